"""Envelope encryption per case: data keys, key providers, sealed records, erasure and rotation (no broker)."""

from __future__ import annotations

import base64
import os
import stat
from collections.abc import Sequence
from pathlib import Path

import orjson
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from pipeline.config.settings import Settings, SettingsError
from pipeline.core.event_log import RawRecord
from pipeline.core.events import CaseRef, Event, LogPosition
from pipeline.core.memory_log import InMemoryEventLog
from pipeline.core.task import Architecture
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.keytopic.keystore import case_keys_from, checked_key_record
from pipeline.keys.envelope import DataKey, TamperedError
from pipeline.keys.providers import KeyDestroyedError, LocalFileKeyProvider, WrappedKey
from pipeline.keys.ring import KeyRing
from pipeline.keys.store import CaseKeys, MemoryKeyTopic
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.wire.dead_letter import DeadLetterRecord
from pipeline.wire.event import EventRecord
from pipeline.wire.key import KeyErased, KeyRecord, KeyValue, decode_key_value, erases
from pipeline.wire.rejection import RejectedError, Rejection
from pipeline.wire.sealing import CaseErasedError, open_body, open_state, seal_body, seal_state
from pipeline.wire.trigger import DecisionRequest
from pipeline.workers.projection.handler import ProjectionHandler
from tests.cases import load_fixture

CASE = load_fixture()
MARKER = "ZEBRA-7731-MARKER"


@pytest.fixture
def keys(tmp_path: Path) -> CaseKeys:
    return CaseKeys(KeyRing(LocalFileKeyProvider(tmp_path / "keks")), MemoryKeyTopic())


def _event_body(case: CaseRef = CASE.ref, seq: int = 1) -> dict[str, object]:
    return EventRecord(Event(case, seq, "note", f"Applicant {MARKER} earns 5,000 a month.")).to_wire()


def test_a_data_key_seals_and_refuses_altered_metadata_or_another_key() -> None:
    key = DataKey.generate()
    sealed = key.seal(b"secret text", b"clear metadata")
    assert key.open(sealed, b"clear metadata") == b"secret text"
    assert b"secret" not in orjson.dumps(sealed)
    with pytest.raises(TamperedError):
        key.open(sealed, b"other metadata")
    with pytest.raises(TamperedError):
        DataKey.generate().open(sealed, b"clear metadata")
    assert "secret" not in repr(key)
    assert key.kid in repr(key)


def test_the_local_provider_wraps_rotates_retires_and_destroys(tmp_path: Path) -> None:
    provider = LocalFileKeyProvider(tmp_path)
    case = CaseRef("bank-a", "c-1")
    wrapped = provider.wrap(case, b"k" * 32)
    assert provider.unwrap(case, wrapped) == b"k" * 32
    kek_files = list(tmp_path.rglob("*.key"))
    assert len(kek_files) == 1
    assert stat.S_IMODE(kek_files[0].stat().st_mode) == 0o600
    with pytest.raises(KeyDestroyedError):
        provider.unwrap(CaseRef("bank-b", "c-1"), wrapped)  # another tenant's KEK does not unwrap it
    assert provider.rotate("bank-a") == "v2"
    assert provider.unwrap(case, wrapped) == b"k" * 32  # old versions unwrap until retired
    assert provider.wrap(case, b"k" * 32).kek_id == "v2"
    provider.retire("bank-a", wrapped.kek_id)
    with pytest.raises(KeyDestroyedError):
        provider.unwrap(case, wrapped)
    assert provider.destroy("bank-a") == 1
    assert not list(tmp_path.rglob("*.key"))


def test_a_wrapped_key_opens_for_its_own_case_only(tmp_path: Path) -> None:
    """DPM_KEY_BINDING=case: a wrapped key copied into another case's key record does not open there."""
    provider = LocalFileKeyProvider(tmp_path, bind_case=True)
    wrapped = provider.wrap(CaseRef("bank-a", "c-1"), b"k" * 32)
    assert provider.unwrap(CaseRef("bank-a", "c-1"), wrapped) == b"k" * 32
    with pytest.raises(KeyDestroyedError, match="bank-a/c-2"):
        provider.unwrap(CaseRef("bank-a", "c-2"), wrapped)


def test_by_default_a_wrapped_key_is_bound_to_its_tenant_as_the_previous_release_reads_it(tmp_path: Path) -> None:
    """A rolling upgrade runs the previous release beside this one: its members open keys this one wraps."""
    provider = LocalFileKeyProvider(tmp_path)
    wrapped = provider.wrap(CaseRef("bank-a", "c-1"), b"k" * 32)
    kek = next(tmp_path.rglob(f"{wrapped.kek_id}.key")).read_bytes()
    assert AESGCM(kek).decrypt(wrapped.blob[:12], wrapped.blob[12:], b"bank-a") == b"k" * 32  # the former reading
    bound = LocalFileKeyProvider(tmp_path, bind_case=True)  # a member set to bind: opens both layouts
    assert bound.unwrap(CaseRef("bank-a", "c-1"), wrapped) == b"k" * 32
    assert provider.unwrap(CaseRef("bank-a", "c-1"), bound.wrap(CaseRef("bank-a", "c-1"), b"k" * 32)) == b"k" * 32


def test_a_key_wrapped_before_keys_were_bound_to_their_case_still_opens(tmp_path: Path) -> None:
    """The former layout: nonce, ciphertext and tag, bound to the tenant alone (what existing key topics hold)."""
    provider = LocalFileKeyProvider(tmp_path)
    kek_id = provider.current("bank-a")
    kek = next(tmp_path.rglob(f"{kek_id}.key")).read_bytes()
    nonce = os.urandom(12)
    former = WrappedKey(kek_id, nonce + AESGCM(kek).encrypt(nonce, b"k" * 32, b"bank-a"))
    assert provider.unwrap(CaseRef("bank-a", "c-9"), former) == b"k" * 32


def test_a_sealed_event_hides_its_text_keeps_routing_in_clear_and_opens_to_the_same_record(keys: CaseKeys) -> None:
    body = _event_body()
    sealed = seal_body(body, keys)
    assert MARKER not in orjson.dumps(sealed).decode()
    assert {k: sealed[k] for k in ("tenant", "case_id", "seq", "kind")} == {
        k: body[k] for k in ("tenant", "case_id", "seq", "kind")
    }
    assert open_body(sealed, keys) == body
    assert EventRecord.decode(orjson.dumps(sealed), cipher=keys) == EventRecord.decode(orjson.dumps(body))
    moved = {**sealed, "seq": 2}  # a sealed text carried to another position does not open
    with pytest.raises(RejectedError) as refused:
        open_body(moved, keys)
    assert refused.value.reason is Rejection.SCHEMA
    with pytest.raises(CaseErasedError):
        open_body(sealed, None)  # a reader without keys learns the content is sealed, nothing more


def test_each_case_has_its_own_key_and_erasing_one_leaves_the_other(keys: CaseKeys) -> None:
    other = CaseRef(CASE.ref.tenant, "another-case")
    mine, theirs = seal_body(_event_body(), keys), seal_body(_event_body(other), keys)
    assert mine["sealed"]["kid"] != theirs["sealed"]["kid"]
    assert keys.erase_case(CASE.ref)
    with pytest.raises(CaseErasedError) as erased:
        open_body(mine, keys)
    assert erased.value.reason is Rejection.ERASED
    assert open_body(theirs, keys)["text"].startswith("Applicant")
    with pytest.raises(CaseErasedError):  # an erased case takes no new key: a subject who comes back is a new case
        seal_body(_event_body(), keys)
    assert not keys.knows(CASE.ref)


def _erased_only(case: CaseRef, erased_ms: int = 1_800_000_000_000) -> MemoryKeyTopic:
    """A key topic as compaction leaves it long after an erasure: the erased marker alone (tombstone and key gone)."""
    topic = MemoryKeyTopic()
    topic.publish([(case, KeyErased(case, erased_ms))])
    return topic


def test_an_erasure_is_a_tombstone_then_a_marker_that_holds_no_key_material(keys: CaseKeys) -> None:
    sealed = seal_body(_event_body(), keys)
    wrapped = keys.ring.records(CASE.ref.tenant)[0]
    secret = keys.ring.key(CASE.ref)
    assert secret is not None
    assert keys.erase_case(CASE.ref)
    published = keys.topic._log[-2:]  # type: ignore[attr-defined]
    assert [(case, type(record).__name__) for case, record in published] == [(CASE.ref, "NoneType"),
                                                                             (CASE.ref, "KeyErased")]  # fmt: skip
    marker = published[1][1]
    assert isinstance(marker, KeyErased)
    assert set(marker.to_wire()) == {"schema", "tenant", "case_id", "erased_ms"}
    encoded = marker.encode()
    for secret_part in (secret.secret, wrapped.wrapped, base64.b64encode(wrapped.wrapped),
                        base64.b64encode(secret.secret), secret.kid.encode()):  # fmt: skip
        assert secret_part not in encoded
    assert decode_key_value(encoded) == marker
    with pytest.raises(CaseErasedError):
        open_body(sealed, keys)


def test_a_process_that_reads_only_the_marker_knows_the_case_erased_and_gives_it_no_new_key(tmp_path: Path) -> None:
    fresh = CaseKeys(KeyRing(LocalFileKeyProvider(tmp_path / "keks")), _erased_only(CASE.ref))
    fresh.sync()
    assert fresh.erased(CASE.ref)
    assert not fresh.knows(CASE.ref)
    with pytest.raises(CaseErasedError) as refused:
        seal_body(_event_body(), fresh)
    assert refused.value.reason is Rejection.ERASED
    assert fresh.topic._log == _erased_only(CASE.ref)._log  # type: ignore[attr-defined]  # no key written
    other = CaseRef(CASE.ref.tenant, "a-new-case-id")
    assert open_body(seal_body(_event_body(other), fresh), fresh)["text"].startswith("Applicant")


def test_the_ring_forgets_a_key_at_its_marker_as_at_its_tombstone(keys: CaseKeys) -> None:
    seal_body(_event_body(), keys)
    record = keys.ring.records(CASE.ref.tenant)[0]
    ring = KeyRing(keys.ring.provider)
    ring.apply(CASE.ref, record)
    assert ring.key(CASE.ref) is not None
    ring.apply(CASE.ref, KeyErased(CASE.ref, 1))
    assert ring.erased(CASE.ref)
    assert not ring.knows(CASE.ref)
    assert ring.key(CASE.ref) is None
    assert ring.records(CASE.ref.tenant) == []


def test_a_key_topic_value_is_read_as_key_or_marker_and_checked_against_its_key() -> None:
    marker = KeyErased(CASE.ref, 1_800_000_000_000)
    assert checked_key_record(CASE.ref.key.encode(), marker.encode(), None) == (CASE.ref, marker)
    assert checked_key_record(CASE.ref.key.encode(), None, CASE.ref.tenant) == (CASE.ref, None)
    assert erases(None)
    assert erases(marker.encode())
    assert not erases(b"not json")
    other = CaseRef(CASE.ref.tenant, "other")
    with pytest.raises(RejectedError) as mismatch:
        checked_key_record(other.key.encode(), marker.encode(), None)
    assert mismatch.value.reason is Rejection.KEY_MISMATCH
    with pytest.raises(RejectedError) as foreign:
        checked_key_record(CASE.ref.key.encode(), marker.encode(), "another-tenant")
    assert foreign.value.reason is Rejection.TENANT_MISMATCH
    with pytest.raises(RejectedError) as extra:  # a marker that would carry anything more is no marker
        decode_key_value(orjson.dumps({**marker.to_wire(), "wrapped_b64": "AAAA"}))
    assert extra.value.reason is Rejection.SCHEMA


def test_a_reader_of_key_records_only_refuses_the_marker_as_a_schema_it_does_not_know() -> None:
    """What the key topic's readers before the marker do with it (0.1.0 decoded every value as dpm.key.v1)."""
    with pytest.raises(RejectedError) as refused:
        KeyRecord.decode(KeyErased(CASE.ref, 1).encode())
    assert refused.value.reason is Rejection.SCHEMA
    assert not erases(_wrapped_record().encode())


def _wrapped_record() -> KeyRecord:
    return KeyRecord(CASE.ref, "k1", "v1", b"\x01" * 60, 1)


def test_erasing_a_tenant_destroys_its_kek_and_every_case_key(keys: CaseKeys, tmp_path: Path) -> None:
    sealed = [seal_body(_event_body(CaseRef("bank-a", f"c{n}")), keys) for n in range(3)]
    kept = seal_body(_event_body(CaseRef("bank-b", "c0")), keys)
    assert len(keys.erase_tenant("bank-a")) == 3
    for body in sealed:
        with pytest.raises(CaseErasedError):
            open_body(body, keys)
    assert MARKER in open_body(kept, keys)["text"]
    fresh = CaseKeys(KeyRing(LocalFileKeyProvider(tmp_path / "keks")), MemoryKeyTopic())
    with pytest.raises(CaseErasedError):  # nothing survives in another process's view either
        open_body(sealed[0], fresh)


def test_rotation_rewraps_every_data_key_and_destroys_versions_before_the_previous(
    keys: CaseKeys, tmp_path: Path
) -> None:
    sealed = [seal_body(_event_body(CaseRef("bank-a", f"c{n}")), keys) for n in range(2)]
    rotation = keys.rotate("bank-a")
    assert (rotation.kek_id, rotation.rewrapped, rotation.retired) == ("v2", 2, ())  # v1 kept: the previous one
    assert [r.kek_id for r in keys.ring.records("bank-a")] == ["v2", "v2"]
    assert keys.rotate("bank-a").retired == ("v1",)
    restarted = CaseKeys(KeyRing(LocalFileKeyProvider(tmp_path / "keks")), keys.topic)
    assert all(MARKER in open_body(body, restarted)["text"] for body in sealed)


def test_a_data_key_published_while_a_rotation_runs_is_never_stranded(keys: CaseKeys) -> None:
    """A writer takes v1 as current, the rotation runs, then the writer's key arrives: v1 still unwraps it."""
    seal_body(_event_body(CaseRef("bank-a", "c0")), keys)
    _, late = keys.ring.wrap_new(CaseRef("bank-a", "late"))  # wrapped under v1, not yet published
    assert late.kek_id == "v1"
    keys.rotate("bank-a")
    keys.topic.publish([(late.case, late)])  # the racing writer's record lands after the rotation
    sealed = seal_body(_event_body(CaseRef("bank-a", "late")), keys)
    assert MARKER in open_body(sealed, keys)["text"]
    second = keys.rotate("bank-a")  # the next rotation wraps it again before destroying v1
    assert second.retired == ("v1",)
    assert {r.kek_id for r in keys.ring.records("bank-a")} == {"v3"}
    afresh = CaseKeys(KeyRing(keys.ring.provider), keys.topic)  # a process that reads the key topic anew
    assert MARKER in open_body(sealed, afresh)["text"]


def test_baseline_state_is_sealed_whole_and_bound_to_its_slot(keys: CaseKeys) -> None:
    value = {"memory": {"facts": [[MARKER, [1]]]}}
    stored = seal_state(CASE.ref, value, keys, "t/c/900/00000001")
    assert MARKER not in orjson.dumps(stored).decode()
    assert open_state(CASE.ref, stored, keys, "t/c/900/00000001") == value
    with pytest.raises(RejectedError):
        open_state(CASE.ref, stored, keys, "t/c/900/00000002")
    assert open_state(CASE.ref, value, None, "any") == value  # state written in clear reads as it is


def test_the_worker_seals_what_it_publishes_and_refuses_an_erased_case(keys: CaseKeys) -> None:
    log = InMemoryEventLog(partitions=3)
    positions = [log.append(e.case, e.key.encode(), orjson.dumps(seal_body(EventRecord(e).to_wire(), keys)))
                 for e in CASE.trajectory.events]  # fmt: skip
    names = TopicNames("unit")
    handler = ProjectionHandler(names, log, ExtractiveBackend(), "w", cipher=keys, seal=True)
    request = DecisionRequest("t1", CASE.ref, CASE.task, 700, (Architecture.DPM,), tuple(positions))
    outputs = handler.handle(_raw(request, LogPosition(0, 1)))
    assert [o.topic for o in outputs] == [names.views, names.decisions, names.audit, names.audit]
    for out in outputs:
        body = orjson.loads(out.value)
        assert "sealed" in body
        assert body["tenant"] == CASE.ref.tenant
        opened = open_body(body, keys)
        assert set(opened) > set(body) - {"sealed"}
    handler.committed([_raw(request, LogPosition(0, 1))])
    keys.erase_case(CASE.ref)
    again = DecisionRequest("t2", CASE.ref, CASE.task, 700, (Architecture.DPM,), tuple(positions))
    letter = DeadLetterRecord.from_wire(orjson.loads(handler.handle(_raw(again, LogPosition(0, 2)))[0].value))
    assert letter.reason is Rejection.ERASED


def _raw(request: DecisionRequest, position: LogPosition) -> RawRecord:
    return RawRecord(position, request.case.key.encode(), request.encode())


def test_each_pipeline_keeps_its_own_tenant_keks(tmp_path: Path) -> None:
    """Erasing or rotating a tenant in one pipeline (topic prefix) leaves the same tenant's keys in another."""
    env = {"DPM_KEYS_DIR": str(tmp_path)}
    first = Settings.from_env({**env, "DPM_TOPIC_PREFIX": "first"})
    second = Settings.from_env({**env, "DPM_TOPIC_PREFIX": "second"})
    assert first.keys_dir() != second.keys_dir()
    assert first.keys_dir("second") == second.keys_dir()
    mine, theirs = LocalFileKeyProvider(first.keys_dir()), LocalFileKeyProvider(second.keys_dir())
    case = CaseRef("bank-a", "c-1")
    wrapped = theirs.wrap(case, b"k" * 32)
    mine.wrap(case, b"k" * 32)
    assert mine.destroy("bank-a") == 1
    assert theirs.unwrap(case, wrapped) == b"k" * 32


def test_keys_in_the_old_shared_layout_are_refused_with_what_to_do(tmp_path: Path) -> None:
    LocalFileKeyProvider(tmp_path).wrap(CaseRef("bank-a", "c-1"), b"k" * 32)  # tenant folders right under the root
    settings = Settings.from_env({"DPM_KEYS_DIR": str(tmp_path), "DPM_TOPIC_PREFIX": "dpm"})
    with pytest.raises(SettingsError, match=f"move them into {tmp_path}/dpm"):
        case_keys_from(settings)


class _CountingTopic(MemoryKeyTopic):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []

    def publish(self, records: Sequence[tuple[CaseRef, KeyValue | None]]) -> None:
        self.calls.append(len(records))
        super().publish(records)


def test_new_cases_get_their_keys_in_one_write_and_an_erased_case_gets_none(tmp_path: Path) -> None:
    topic = _CountingTopic()
    keys = CaseKeys(KeyRing(LocalFileKeyProvider(tmp_path / "keks")), topic)
    known, erased = CaseRef("acme", "known"), CaseRef("acme", "erased")
    keys.seal(known, b"x", b"")
    keys.erase_case(erased)
    topic.calls.clear()
    new = [CaseRef("acme", f"new-{n}") for n in range(3)]
    keys.prepare([*new, known, erased, new[0]])
    assert topic.calls == [3]
    for case in new:
        assert keys.open(case, keys.seal(case, b"step", b"aad"), b"aad") == b"step"
    assert topic.calls == [3]  # sealing found the keys prepared
    with pytest.raises(CaseErasedError):
        keys.seal(erased, b"x", b"")
