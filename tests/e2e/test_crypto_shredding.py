"""Erasure that erases: per-case keys, `dpm erase`, and the marker found in plaintext nowhere afterwards."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Consumer

from pipeline.core.case import Case
from pipeline.core.events import CaseRef
from pipeline.core.task import Architecture
from pipeline.kafka.cluster.topics import ErasureBound, TopicNames, create_pipeline_topics
from pipeline.kafka.keytopic.keystore import kafka_case_keys
from pipeline.kafka.writing.producer import EventProducer
from pipeline.keys.store import CaseKeys
from pipeline.services.cluster import pipeline_processes
from pipeline.services.read_outputs import await_decisions, load_outputs
from pipeline.wire.event import CaseOpening
from pipeline.wire.key import KeyErased, decode_key_value, erases
from pipeline.wire.sealing import CaseErasedError
from pipeline.wire.trigger import DecisionId, DecisionKey, DecisionRequest
from tests.kafka_support import every_record
from tests.pipeline_support import small_cases, worker_env
from tests.processes import dpm_cli

BUDGET = 900


def _marked(case: Case, marker: str) -> Case:
    """The case with a unique marker in every event's text (a name, say, that must vanish)."""
    events = tuple(replace(e, text=f"{e.text} Contact: {marker}.") for e in case.trajectory.events)
    return replace(case, trajectory=replace(case.trajectory, events=events))


def _topics(config: dict[str, str], prefix: str) -> list[str]:
    consumer = Consumer({**config, "group.id": f"list-{uuid.uuid4().hex}"})
    try:
        return sorted(t for t in consumer.list_topics(timeout=10).topics if t.startswith(prefix))
    finally:
        consumer.close()


# What is sealed, and where the marker could hide, is our producers' doing; no broker release changes it. The
# broker's part of erasure (compaction removing records) is the next test's, on every release.
@pytest.mark.any_broker
def test_after_erase_the_marker_is_nowhere_in_plaintext_and_only_the_erased_case_replays_erased(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    marker = f"MARKER-{uuid.uuid4().hex}"
    create_pipeline_topics(kafka_config, topic_names, 3, replication=1)
    tenant = f"bank-{uuid.uuid4().hex[:8]}"  # its own KEK: rotating it touches no other test's keys
    gone, kept = small_cases(per_domain=1, tenant=tenant)[:2]
    gone = _marked(gone, marker)
    producer = EventProducer(kafka_config, topic_names, case_keys)  # seals each event under its case's key
    both = (Architecture.DPM, Architecture.SUMM)
    for case in (gone, kept):
        positions = tuple(producer.append(case.trajectory.events, CaseOpening(case.task, (BUDGET,))))
        producer.trigger(DecisionRequest(case.ref.case_id, case.ref, case.task, BUDGET, both, positions,
                                         len(positions)))  # fmt: skip
    env = worker_env(kafka_bootstrap, topic_names, tmp_path)
    with pipeline_processes([["worker"], ["baseline", "--budgets", str(BUDGET)]], env, tmp_path / "logs"):
        before = await_decisions(kafka_config, topic_names, 4, timeout_s=180, cipher=case_keys)
        assert len(before.decisions) == 4
        projected = before.audits[DecisionKey(gone.ref.tenant, DecisionId(gone.ref.case_id, Architecture.DPM))]
        projected_prompt = projected[0].call.request.prompt
        assert marker in projected_prompt  # readable with the key: the records hold it, sealed
        erased = dpm_cli("erase", "--tenant", gone.ref.tenant, "--case", gone.ref.case_id, env=env)
        assert erased.returncode == 0, erased.stdout + erased.stderr
        # The baseline drops the case: its state and steps get tombstones on its changelogs.
        deadline = time.monotonic() + 60
        while not _baseline_forgot(kafka_config, topic_names, gone.ref):
            assert time.monotonic() < deadline, "the baseline kept the erased case's state"
            time.sleep(1)
    producer.close()
    topics = _topics(kafka_config, topic_names.prefix)
    assert {topic_names.events, topic_names.audit, topic_names.keys} <= set(topics)
    assert any("changelog" in t for t in topics), topics
    for topic in topics:
        for record in every_record(kafka_config, topic, committed_only=False):  # open transactions too
            assert marker.encode() not in (record.key or b"") + (record.value or b""), f"marker in plaintext in {topic}"
    replay = dpm_cli("replay", "--all", env=env)
    lines = {line.split()[1]: line for line in replay.stdout.splitlines() if ":dpm" in line or ":summ" in line}
    for arch in ("dpm", "summ"):
        assert "ERASED" in lines[f"{gone.ref.case_id}:{arch}"], replay.stdout
        assert "MATCH" in lines[f"{kept.ref.case_id}:{arch}"], replay.stdout
    after = load_outputs(kafka_config, topic_names, cipher=case_keys)
    assert set(after.erased) == {k for k in before.decisions if k.decision_id.trigger_id == gone.ref.case_id}
    assert all(k.decision_id.trigger_id == kept.ref.case_id for k in after.decisions)

    for expected in ("v2 current; 1 data key(s) wrapped again; destroyed none",  # v1 stays: the previous version
                     "v3 current; 1 data key(s) wrapped again; destroyed v1"):  # fmt: skip
        rotated = dpm_cli("keys", "rotate", "--tenant", tenant, env=env)
        assert f"key-encryption key {expected}" in rotated.stdout, rotated.stderr
    assert dpm_cli("replay", "--tenant", tenant, "--case", kept.ref.case_id, env=env).returncode == 0  # still MATCH
    assert dpm_cli("erase", "--tenant", tenant, env=env).returncode == 0  # the whole tenant
    replay = dpm_cli("replay", "--tenant", tenant, env=env)
    assert replay.stdout.count("ERASED") == 4, replay.stdout


def _baseline_forgot(config: dict[str, str], names: TopicNames, case: CaseRef) -> bool:
    """True once the latest record of every key of `case` on the baseline's step changelog is a tombstone."""
    changelog = next(t for t in _topics(config, names.prefix) if t.endswith("summ-steps-changelog"))
    latest: dict[bytes, bytes | None] = {}
    for record in every_record(config, changelog, committed_only=False):
        if record.key is not None and case.key.encode() in record.key:
            latest[record.key] = record.value
    return bool(latest) and all(v is None for v in latest.values())


def test_erased_event_and_key_records_are_physically_gone_within_the_configured_bound(
    kafka_config: dict[str, str], topic_names: TopicNames, case_keys: CaseKeys
) -> None:
    bound = ErasureBound(max_lag_ms=2_000, tombstone_ms=1_000)
    create_pipeline_topics(kafka_config, topic_names, 1, replication=1, erasure=bound)
    case = small_cases(per_domain=1)[0]
    producer = EventProducer(kafka_config, topic_names, case_keys)
    producer.append(case.trajectory.events)
    assert case_keys.erase_case(case.ref)
    producer.erase(case.ref.tenant, [(e.key.encode(), 0) for e in case.trajectory.events])  # one partition
    erased_at = time.monotonic()

    def stored() -> list[tuple[bytes | None, bytes | None]]:
        kept = [(r.key, r.value) for topic in (topic_names.events, topic_names.keys)
                for r in every_record(kafka_config, topic, committed_only=False)]  # fmt: skip
        return [(k, v) for k, v in kept if k is not None and k.startswith(case.ref.key.encode())]

    def remaining() -> int:  # the erased marker aside: it stays for good, and holds no key (wire/key.py)
        return sum(1 for _, value in stored() if value is None or not erases(value))

    other = 0
    while remaining():  # tombstones included: they go delete.retention.ms after compaction
        assert time.monotonic() - erased_at < 90, f"{remaining()} records of the erased case still stored"
        other += 1  # segments roll on the next write after segment.ms: keep writing, as live traffic does
        producer.append([replace(small_cases(per_domain=1, tenant="roll")[0].trajectory.events[0],
                                 case=CaseRef("roll", f"c{other}"))])  # fmt: skip
        time.sleep(1)
    producer.close()
    print(f"erased records physically gone after {time.monotonic() - erased_at:.1f} s")  # noqa: T201
    left = stored()
    assert [key for key, _ in left] == [case.ref.key.encode()]  # the marker alone: the erasure is remembered
    assert decode_key_value(left[0][1]) == KeyErased(case.ref, orjson.loads(left[0][1] or b"{}")["erased_ms"])
    started_later = kafka_case_keys(kafka_config, topic_names.keys, case_keys.ring.provider)
    started_later.sync()  # a process started after the tombstone went still knows, and gives the case no new key
    assert started_later.erased(case.ref)
    with pytest.raises(CaseErasedError):
        started_later.seal(case.ref, b"the subject came back", b"")
    started_later.close()
