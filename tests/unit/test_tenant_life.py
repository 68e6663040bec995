"""A tenant's life and erasure's edges, without a broker: ids, grants that cannot overlap, key records, dead letters."""

from __future__ import annotations

import base64
import stat
from collections.abc import Iterable
from pathlib import Path

import orjson
import pytest

from pipeline.config.settings import Settings
from pipeline.core.errors import DpmError
from pipeline.core.event_log import RawRecord, ReadResult
from pipeline.core.events import CaseRef, Event, InvalidEventError, LogPosition
from pipeline.core.memory_log import InMemoryEventLog
from pipeline.kafka.cluster.acl_plan import Grant, Pattern, Resource, Role, plan, tenant_principal
from pipeline.kafka.cluster.credentials import credentials_dir
from pipeline.kafka.cluster.grant_checks import colliding_tenant, overlaps, revocable, single_operations
from pipeline.kafka.cluster.topics import TenantNameError, TopicNames, TopicReport, check_topic_tenant, pipeline_topics
from pipeline.kafka.keytopic.keystore import checked_key_record
from pipeline.kafka.local.local_broker import ClusterLayout, _private
from pipeline.keys.providers import (
    KeyDestroyedError,
    KeyRevokedError,
    KeyServiceUnavailableError,
    LocalFileKeyProvider,
    WrappedKey,
)
from pipeline.keys.ring import KeyRing
from pipeline.keys.store import CaseKeys, MemoryKeyTopic
from pipeline.services import tenants
from pipeline.services.api_keys import ApiKeys, keys_file
from pipeline.wire.dead_letter import DeadLetterRecord, cases_named
from pipeline.wire.event import EventRecord, append_events
from pipeline.wire.key import KeyRecord
from pipeline.wire.rejection import RejectedError, Rejection
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.sealing import CaseErasedError, seal_body
from pipeline.wire.trajectory import assemble, own_records
from pipeline.wire.validation import SchemaError, validate
from pipeline.workers.publishing import dead_letter

NAMES = TopicNames("dpm")
MARKER = "OKAPI-4411-MARKER"
ACME = CaseRef("acme", "c-1")


@pytest.fixture
def keys(tmp_path: Path) -> CaseKeys:
    return CaseKeys(KeyRing(LocalFileKeyProvider(tmp_path / "keks")), MemoryKeyTopic())


# --- ids are matched whole ---------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["acme\n", "acme\r\n", "acme/x", ""])
def test_an_id_ending_in_a_newline_is_refused_everywhere_an_id_is_checked(bad: str) -> None:
    with pytest.raises(InvalidEventError):
        CaseRef(bad, "case")
    with pytest.raises(TenantNameError):
        check_topic_tenant(bad)
    body = EventRecord(Event(ACME, 1, "note", "text")).to_wire() | {"tenant": bad}
    with pytest.raises(SchemaError):
        validate(SchemaId.EVENT, body)


# --- grants that cannot overlap ----------------------------------------------------------------------


@pytest.mark.parametrize("tenant", ["keystone", "events2", "triggers-x", "keys", "events-g3", "writer", "segments2"])
def test_a_tenant_id_that_a_shared_grant_would_reach_is_refused_with_the_grant(tenant: str) -> None:
    why = colliding_tenant(NAMES, tenant)
    assert why is not None
    assert f"dpm.{tenant}." in why


@pytest.mark.parametrize("tenant", ["acme", "views2", "audit", "dlqx", "layoutco", "segment", "k"])
def test_other_tenant_ids_are_free_of_every_shared_grant(tenant: str) -> None:
    assert colliding_tenant(NAMES, tenant) is None


def test_the_plan_for_every_role_and_tenant_reaches_no_other_tenant() -> None:
    tenants = ["acme", "acme-2", "globex", "views2"]
    assert overlaps(plan(NAMES, tuple(Role), tenants), NAMES, tenants) == []


def test_the_check_names_each_grant_that_reaches_a_tenant_it_must_not() -> None:
    tenants = ["acme", "globex", "keystone"]  # keystone was onboarded before ids were checked
    shared_agents = plan(NAMES, (Role.PRODUCER,))  # left on the cluster from the shared mode
    hand_made = [
        Grant(tenant_principal("acme"), Resource.TOPIC, "dpm.globex.decisions", Pattern.LITERAL, ("Read",)),
        Grant(tenant_principal("acme"), Resource.GROUP, "dpm-projection", Pattern.LITERAL, ("Read",)),
        Grant(tenant_principal("acme"), Resource.GROUP, "dpm.globex.doors", Pattern.LITERAL, ("Read",)),
        Grant(tenant_principal("beta"), Resource.TOPIC, "dpm.beta.", Pattern.PREFIXED, ("Read",)),  # removed tenant
        Grant("User:someone", Resource.TOPIC, "*", Pattern.LITERAL, ("Read",)),
    ]
    found = overlaps([*plan(NAMES, tuple(Role), tenants), *shared_agents, *hand_made], NAMES, tenants)
    said = [str(o) for o in found]
    assert any(s.startswith("User:producer: topic 'dpm.keys'") and "'keystone'" in s for s in said)
    assert any("'dpm.globex.decisions'" in s and "tenant 'globex'" in s for s in said)
    assert any("'dpm-projection'" in s and "serves every tenant" in s for s in said)
    assert any("'dpm.globex.doors'" in s and "tenant 'globex'" in s for s in said)  # another tenant's doors
    assert not [s for s in said if "'dpm.acme.doors'" in s]  # its own doors' group is its own
    assert any(s.startswith("User:tenant-beta") and "has no topics" in s for s in said)
    assert {o.grant.principal for o in found if o.grant.name == "*"} == {"User:someone"}
    assert not [o for o in found if o.grant.principal in ("User:worker", "User:auditor", "User:operator")]


def test_what_apply_revokes_is_the_managed_principals_grants_the_plan_no_longer_gives() -> None:
    shared = plan(NAMES, (Role.PRODUCER, Role.WORKER))
    by_topic = plan(NAMES, (Role.PRODUCER, Role.WORKER), ["acme"])
    elsewhere = Grant("User:worker", Resource.TOPIC, "other.events", Pattern.LITERAL, ("Read",))
    existing = [*single_operations(shared), *single_operations(by_topic), elsewhere]
    gone = revocable(existing, by_topic, {"User:producer", "User:worker", tenant_principal("acme")}, NAMES)
    assert {g.principal for g in gone} == {"User:producer", "User:worker"}
    assert all(g.principal != "User:worker" or not g.name.startswith("dpm.acme.") for g in gone)
    assert elsewhere not in gone  # another pipeline's resource
    assert not single_operations(by_topic) & set(gone)


# --- key records are checked where they enter --------------------------------------------------------


def _key_record(kek_id: str, case: CaseRef = ACME) -> dict[str, object]:
    return KeyRecord(case, "kid-1", "v1", b"wrapped-bytes", 1).to_wire() | {"kek_id": kek_id}


@pytest.mark.parametrize("kek_id", ["../../../etc/passwd", "v1/../../x", "/tmp/x", "v0", "v1\n", "key"])
def test_a_key_record_whose_kek_id_is_no_version_name_is_refused(kek_id: str) -> None:
    value = orjson.dumps(_key_record(kek_id))
    with pytest.raises(RejectedError) as refused:
        checked_key_record(b"acme/c-1", value, None)
    assert refused.value.reason is Rejection.SCHEMA


def test_the_local_provider_never_reads_a_file_named_by_a_forged_kek_id(tmp_path: Path) -> None:
    chosen = tmp_path / "chosen.key"
    chosen.write_bytes(b"x" * 32)
    provider = LocalFileKeyProvider(tmp_path / "keks")
    provider.wrap(CaseRef("acme", "c-1"), b"k" * 32)
    forged = WrappedKey(f"../../{chosen.stem}", b"\0" * 60)
    with pytest.raises(KeyDestroyedError, match="not a key-encryption key version"):
        provider.unwrap(CaseRef("acme", "c-1"), forged)


def test_a_key_record_is_applied_only_when_its_key_value_and_topic_name_one_tenant_and_case() -> None:
    value = orjson.dumps(_key_record("v1"))
    assert checked_key_record(b"acme/c-1", value, "acme")[0] == ACME
    assert checked_key_record(b"acme/c-1", None, "acme") == (ACME, None)  # a tombstone
    refusals = [
        (b"acme/c-2", value, None, Rejection.KEY_MISMATCH),
        (b"globex/c-1", orjson.dumps(_key_record("v1", CaseRef("globex", "c-1"))), "acme", Rejection.TENANT_MISMATCH),
        (b"no-case", None, None, Rejection.SCHEMA),
    ]
    for key, body, tenant, reason in refusals:
        with pytest.raises(RejectedError) as refused:
            checked_key_record(key, body, tenant)
        assert refused.value.reason is reason


# --- a scan is not blocked by a mis-keyed record; nothing is opened on a forger's say-so ---------------


def _events(log: InMemoryEventLog, case: CaseRef, count: int) -> list[LogPosition]:
    return append_events(log, [Event(case, n, "note", f"event {n} of {case.key}") for n in range(1, count + 1)])


def test_a_scan_leaves_out_a_record_keyed_under_the_case_whose_value_names_another() -> None:
    log = InMemoryEventLog(partitions=1)
    _events(log, ACME, 3)
    other = Event(CaseRef("acme", "c-9"), 1, "note", "filed under c-1")
    log.append(ACME, b"acme/c-1/00000004", EventRecord(other).encode())  # keyed under c-1, its value names c-9
    read, others = own_records(ACME, log.scan(ACME))
    assert [r.key for r in others] == [b"acme/c-1/00000004"]
    trajectory, _ = assemble(ACME, read, None)
    assert [e.seq for e in trajectory.events] == [1, 2, 3]


class _Refusing:
    """A cipher that fails the test if asked for any case but `allowed`'s key."""

    def __init__(self, inner: CaseKeys, allowed: CaseRef) -> None:
        self.inner, self.allowed = inner, allowed

    def sync(self) -> None:
        self.inner.sync()

    def prepare(self, cases: Iterable[CaseRef]) -> None:
        assert set(cases) <= {self.allowed}, "prepared another case"
        self.inner.prepare([self.allowed])

    def seal(self, case: CaseRef, plaintext: bytes, aad: bytes) -> dict[str, str]:
        assert case == self.allowed, f"sealed for {case.key}"
        return self.inner.seal(case, plaintext, aad)

    def open(self, case: CaseRef, sealed: object, aad: bytes) -> bytes:
        assert case == self.allowed, f"opened for {case.key}"
        return self.inner.open(case, sealed, aad)  # type: ignore[arg-type]

    def erased(self, case: CaseRef) -> bool:
        return self.inner.erased(case)

    def opens(self, case: CaseRef) -> bool:
        return self.inner.opens(case)


def test_an_event_naming_another_tenant_on_a_tenant_s_topic_is_a_tenant_mismatch_before_any_key_opens(
    keys: CaseKeys,
) -> None:
    forged = Event(CaseRef("globex", "c-1"), 1, "note", "globex's?")
    body = orjson.dumps(seal_body(EventRecord(forged).to_wire(), keys))
    read = ReadResult((RawRecord(LogPosition(0, 0), forged.key.encode(), body),))
    with pytest.raises(RejectedError) as refused:
        assemble(ACME, read, 1, cipher=_Refusing(keys, ACME), topic_tenant="acme")
    assert refused.value.reason is Rejection.TENANT_MISMATCH


# --- dead letters are erased with their case ---------------------------------------------------------


def _event_record(case: CaseRef, key: bytes, seq: int = 1) -> RawRecord:
    value = EventRecord(Event(case, seq, "note", f"{MARKER} of {case.key}")).encode()
    return RawRecord(LogPosition(0, 5), key, value, topic=NAMES.events)


def _letter(record: RawRecord, keys: CaseKeys | None, reason: Rejection = Rejection.KEY_MISMATCH) -> bytes:
    return dead_letter(NAMES, record, source_topic=record.topic or "", reason=reason, detail=f"detail {MARKER}",
                       worker_id="w", cipher=keys).value  # fmt: skip


def test_an_event_s_dead_letter_is_sealed_under_its_case_and_gone_when_the_case_is_erased(keys: CaseKeys) -> None:
    record = _event_record(ACME, b"acme/c-1/00000009")
    value = _letter(record, keys)
    assert MARKER.encode() not in value
    assert MARKER.encode() not in base64.b64decode(orjson.loads(value)["sealed"]["ct"])
    validate(SchemaId.DEAD_LETTER, orjson.loads(value))
    opened = DeadLetterRecord.decode(value, keys)
    assert opened.original_value.kept == record.value
    assert opened.detail == f"detail {MARKER}"
    keys.erase_case(ACME)
    with pytest.raises(CaseErasedError):
        DeadLetterRecord.decode(value, keys)


def test_a_dead_letter_naming_two_cases_is_gone_when_either_is_erased(tmp_path: Path) -> None:
    record = _event_record(CaseRef("acme", "c-2"), b"acme/c-1/00000001")  # keyed under c-1, its value names c-2
    assert cases_named(record) == (ACME, CaseRef("acme", "c-2"))
    for erased in (ACME, CaseRef("acme", "c-2")):
        keys = CaseKeys(KeyRing(LocalFileKeyProvider(tmp_path / erased.case_id)), MemoryKeyTopic())
        value = _letter(record, keys)
        assert DeadLetterRecord.decode(value, keys).original_value.kept == record.value
        keys.erase_case(erased)
        with pytest.raises(CaseErasedError):
            DeadLetterRecord.decode(value, keys)


def test_a_dead_letter_of_an_erased_case_keeps_none_of_its_content(keys: CaseKeys) -> None:
    keys.seal(ACME, b"x", b"")
    keys.erase_case(ACME)
    value = _letter(_event_record(ACME, b"acme/c-1/00000001"), keys, Rejection.ERASED)
    assert MARKER.encode() not in value
    body = orjson.loads(value)
    assert body["withheld"] == "erased"
    assert body["original_value_size"] > 0
    assert not keys.knows(ACME)  # no new data key was made for it


class _FailingProvider(LocalFileKeyProvider):
    """The local files, with a key service's refusal of every wrap and unwrap once `failure` is set."""

    failure: Exception | None = None

    def wrap(self, case: CaseRef, secret: bytes) -> WrappedKey:
        if self.failure is not None:
            raise self.failure
        return super().wrap(case, secret)

    def unwrap(self, case: CaseRef, wrapped: WrappedKey) -> bytes:
        if self.failure is not None:
            raise self.failure
        return super().unwrap(case, wrapped)


def test_a_dead_letter_under_a_revoked_key_keeps_none_of_its_content_and_one_under_a_key_service_away_waits(
    tmp_path: Path,
) -> None:
    """A revoked KEK: the letter is written, its content withheld. The service away: raised, for the caller to wait."""
    provider = _FailingProvider(tmp_path / "keks")
    record = _event_record(ACME, b"acme/c-1/00000003")
    provider.failure = KeyRevokedError("acme's key is revoked")
    body = orjson.loads(_letter(record, CaseKeys(KeyRing(provider), MemoryKeyTopic())))
    assert body["withheld"] == "key-revoked"
    assert body["reason"] == Rejection.KEY_MISMATCH.value
    assert MARKER not in orjson.dumps(body).decode()
    validate(SchemaId.DEAD_LETTER, body)
    provider.failure = KeyServiceUnavailableError("the key service did not answer")
    with pytest.raises(KeyServiceUnavailableError):
        _letter(record, CaseKeys(KeyRing(provider), MemoryKeyTopic()))


def test_dead_letters_of_a_tenant_s_topic_are_never_sealed_in_another_tenant_s_name(keys: CaseKeys) -> None:
    forged = RawRecord(LogPosition(0, 1), b"globex/c-1/00000001",
                       EventRecord(Event(CaseRef("globex", "c-1"), 1, "note", MARKER)).encode(),
                       topic="dpm.acme.events")  # fmt: skip
    letter = dead_letter(NAMES.of_tenant("acme"), forged, source_topic="dpm.acme.events",
                         reason=Rejection.TENANT_MISMATCH, detail="x", worker_id="w", cipher=keys)  # fmt: skip
    assert "sealed" not in orjson.loads(letter.value)  # in clear: nothing of acme's is in it
    assert not keys.knows(CaseRef("globex", "c-1"))


def test_a_trigger_s_dead_letter_stays_in_clear_and_a_v1_dead_letter_still_reads(keys: CaseKeys) -> None:
    trigger = RawRecord(LogPosition(0, 2), b"acme/c-1", b'{"not": "a trigger"}', topic=NAMES.triggers)
    value = dead_letter(NAMES, trigger, source_topic=NAMES.triggers, reason=Rejection.SCHEMA, detail="d",
                        worker_id="w", cipher=keys).value  # fmt: skip
    assert DeadLetterRecord.decode(value).original_value.kept == trigger.value
    v1 = orjson.loads(value) | {"schema": SchemaId.DEAD_LETTER_V1.value}
    assert DeadLetterRecord.from_wire(v1).original_value.kept == trigger.value


# --- the local broker's data --------------------------------------------------------------------------


def test_the_local_broker_s_folders_are_its_owner_s_alone(tmp_path: Path) -> None:
    layout = ClusterLayout(tmp_path, 1, 39092)
    layout.node_dir(1).mkdir(parents=True)
    layout.node_dir(1).chmod(0o755)  # as an earlier release left it
    _private(layout)
    for folder in (tmp_path / "broker", layout.root, layout.node_dir(1)):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700


@pytest.mark.parametrize("key", [b"acme/c-1/00000001", b"acme/c-2/00000001"])  # one case, then key and value apart
def test_a_sealed_dead_letter_of_a_900_kb_event_stays_under_400_kb(keys: CaseKeys, key: bytes) -> None:
    big = EventRecord(Event(ACME, 1, "document", "Scanned appendix. " * 50_000)).encode()
    record = RawRecord(LogPosition(0, 3), key, big, topic=NAMES.events)
    value = _letter(record, keys, Rejection.OVERSIZE)
    assert len(value) < 400_000
    opened = DeadLetterRecord.decode(value, keys)
    assert big.startswith(opened.original_value.kept)
    assert opened.original_value.size == len(big)


def test_an_events_topic_is_told_apart_in_every_generation_and_scope() -> None:
    acme = NAMES.of_tenant("acme")
    assert all(acme.is_events(t) for t in ("dpm.acme.events", "dpm.acme.events-g2", "dpm.acme.events-g12"))
    assert not any(acme.is_events(t) for t in ("dpm.acme.triggers", "dpm.acme.events-gx", "dpm.events",
                                               "dpm.acme.eventsx", "dpm.acme2.events"))  # fmt: skip
    assert NAMES.of_generation(3).is_events("dpm.events")  # the first generation's, read by a later one


def test_a_credential_another_pipeline_uses_is_kept_and_so_is_its_properties_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deleted: list[str] = []

    def delete(_config: dict[str, str], user: str) -> int:
        deleted.append(user)
        return 1

    monkeypatch.setattr(tenants, "revoke_grants", lambda _config, grants: len(grants))
    monkeypatch.setattr(tenants, "delete_scram_credentials", delete)
    settings = Settings.from_env({"DPM_HOME": str(tmp_path), "DPM_TENANCY": "topics"})
    properties = credentials_dir(tmp_path) / "tenant-acme.properties"
    properties.parent.mkdir(parents=True)
    other = Grant(tenant_principal("acme"), Resource.TOPIC, "bank.acme.", Pattern.PREFIXED, ("Read",))
    mine = Grant(tenant_principal("acme"), Resource.TOPIC, "dpm.acme.", Pattern.PREFIXED, ("Read",))

    properties.write_text("sasl.password=kept\n")
    shared = tenants.take_away(settings, tenants.Leftovers("acme", 1, (mine,), (other,)))
    assert (shared.grants, shared.credentials, shared.properties) == (1, 0, None)
    assert shared.kept is not None
    assert "bank.acme." in shared.kept
    assert properties.exists()
    assert deleted == []

    alone = tenants.take_away(settings, tenants.Leftovers("acme", 1, (mine,), ()))
    assert (alone.grants, alone.credentials, alone.kept, alone.properties) == (1, 1, None, properties)
    assert not properties.exists()
    assert deleted == ["tenant-acme"]


class _Cluster:
    """The broker calls of services/tenants.py, answered from memory: topics, grants, one credential."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, grants: list[Grant], topics: set[str]) -> None:
        self.grants, self.topics, self.credentials = grants, topics, 1
        fakes = {"existing_topics": lambda _c: set(self.topics), "cluster_grants": lambda _c: self.grants,
                 "cluster_allows": lambda _c, _op: True, "scram_mechanisms": self._mechanisms,
                 "revoke_grants": self._revoke, "delete_scram_credentials": self._delete,
                 "create_pipeline_topics": self._create, "delete_topics": self._delete_topics,
                 "committed_offsets_on": lambda *_a: [], "case_keys_from": self._case_keys}  # fmt: skip
        for name, fake in fakes.items():
            monkeypatch.setattr(tenants, name, fake)

    @staticmethod
    def _case_keys(settings: Settings, names: TopicNames) -> CaseKeys:
        del names
        return CaseKeys(KeyRing(LocalFileKeyProvider(settings.paths.home / "keks")), MemoryKeyTopic())

    def _mechanisms(self, _config: dict[str, str], _user: str) -> list[int]:
        return [1] * self.credentials

    def _revoke(self, _config: dict[str, str], grants: tuple[Grant, ...]) -> int:
        self.grants = [g for g in self.grants if g not in grants]
        return len(grants)

    def _delete(self, _config: dict[str, str], _user: str) -> int:
        deleted, self.credentials = self.credentials, 0
        return deleted

    def _create(self, _config: dict[str, str], names: TopicNames, *_args: object) -> TopicReport:
        made = tuple(spec.name for spec in pipeline_topics(names))
        self.topics |= set(made)
        return TopicReport(made, ())

    def _delete_topics(self, _config: dict[str, str], topics: list[str]) -> None:
        self.topics -= set(topics)


def test_replace_takes_away_an_earlier_tenant_s_api_keys_as_remove_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old customer's keys would append to the new customer's cases: --replace removes them with its grants."""
    settings = Settings.from_env({"DPM_HOME": str(tmp_path), "DPM_TENANCY": "topics"})
    old = Grant(tenant_principal("acme"), Resource.TOPIC, "dpm.acme.", Pattern.PREFIXED, ("Read",))
    cluster = _Cluster(monkeypatch, [old], set())  # the topics gone, the principal and its grant left
    api_keys = ApiKeys(keys_file(settings))
    _, old_key = api_keys.add("acme")
    _, other_key = api_keys.add("globex")
    with pytest.raises(DpmError, match="outlived an earlier tenant"):
        tenants.add_tenant(settings, "acme", 3)
    assert api_keys.holder(old_key) is not None  # refused: nothing changed

    added = tenants.add_tenant(settings, "acme", 3, replace=True)
    assert added.revoked is not None
    assert (added.revoked.api_keys, added.revoked.grants, added.revoked.credentials) == (1, 1, 1)
    assert api_keys.holder(old_key) is None
    assert api_keys.holder(other_key) is not None
    assert cluster.grants == []

    _, new_key = api_keys.add("acme")  # the new customer's key, then the tenant's removal takes it, by the same step
    removed = tenants.remove_tenant(settings, "acme")
    assert removed.revoked.api_keys == 1
    assert api_keys.holder(new_key) is None


def test_replace_takes_away_api_keys_even_when_no_grant_was_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings.from_env({"DPM_HOME": str(tmp_path), "DPM_TENANCY": "topics"})
    _Cluster(monkeypatch, [], set()).credentials = 0  # a cluster without ACLs: only the keys file names the tenant
    api_keys = ApiKeys(keys_file(settings))
    _, made_first = api_keys.add("acme")
    kept = tenants.add_tenant(settings, "acme", 3)  # keys made before the tenant: kept, and counted for a note
    assert (kept.revoked, kept.api_keys_kept) == (None, 1)
    assert api_keys.holder(made_first) is not None
    tenants.remove_tenant(settings, "acme")
    _, left = api_keys.add("acme")
    replaced = tenants.add_tenant(settings, "acme", 3, replace=True)
    assert replaced.revoked is not None
    assert (replaced.revoked.api_keys, replaced.replaced, replaced.api_keys_kept) == (1, None, 0)
    assert api_keys.holder(left) is None


def test_an_apply_in_either_mode_keeps_the_other_mode_s_grants_on_topics_that_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    roles = list(Role)
    live = {spec.name for scope in (NAMES, NAMES.of_tenant("acme")) for spec in pipeline_topics(scope)}
    cluster = _Cluster(monkeypatch, sorted(single_operations([*plan(NAMES), *plan(NAMES, roles, ["acme"])]), key=str),
                       set(live))  # fmt: skip
    shared = Settings.from_env({"DPM_HOME": str(tmp_path), "DPM_TENANCY": "shared"})
    by_topic = Settings.from_env({"DPM_HOME": str(tmp_path), "DPM_TENANCY": "topics"})
    assert tenants.unplanned(shared, roles, []) == []
    assert tenants.unplanned(by_topic, roles, []) == []
    assert tenants.apply_would_stop(shared, []) == []
    retired = tenants.unplanned(by_topic, roles, [], other_mode=True)  # asked for: the shared mode's, retired
    assert "User:producer" in {g.principal for g in retired}

    cluster.grants = [*cluster.grants, Grant("User:worker", Resource.TOPIC, "dpm.acme.views", Pattern.LITERAL,
                                             ("Read",))]  # fmt: skip  # an older plan's, on a live topic
    (stopping,) = tenants.apply_would_stop(by_topic, [])
    assert stopping[1] == "dpm.acme.views"
