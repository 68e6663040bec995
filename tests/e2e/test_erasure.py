"""The right to erasure: `dpm erase` tombstones a case, compaction removes it, replay reports ERASED."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pipeline.core.events import Event, LogPosition
from pipeline.core.task import Architecture
from pipeline.kafka.cluster.admin import admin_client
from pipeline.kafka.cluster.topics import TopicNames, TopicSpec, ensure_topics
from pipeline.kafka.reading.reader import KafkaEventLog
from pipeline.kafka.writing.producer import EventProducer
from pipeline.keys.store import CaseKeys
from pipeline.services.cluster import pipeline_processes
from pipeline.services.read_outputs import await_decisions
from pipeline.wire.event import CaseOpening
from pipeline.wire.trigger import DecisionRequest
from tests.pipeline_support import await_dead_letters, create_topics, small_cases, worker_env
from tests.processes import dpm_cli

# What this proves is the readers' replay statuses,
# which no broker release changes: `make test-kafka4` leaves it out.
pytestmark = pytest.mark.any_broker

# Compaction within seconds instead of hours: tiny segments, any dirt is cleanable, short tombstone life.
FAST_COMPACTION = {
    "cleanup.policy": "compact",
    "retention.ms": "-1",
    "segment.ms": "200",
    "min.cleanable.dirty.ratio": "0.001",
    "delete.retention.ms": "100",
    "min.compaction.lag.ms": "0",
}


def _await_compaction(config: dict[str, str], names: TopicNames, producer: EventProducer,
                      positions: tuple[LogPosition, ...]) -> None:  # fmt: skip
    """Waits until compaction removed the records at `positions` (new records roll segments, so the cleaner can run)."""
    log = KafkaEventLog(config, names.events)
    deadline = time.monotonic() + 60
    while not log.read(positions).missing:
        assert time.monotonic() < deadline, "compaction did not remove the records"
        producer.append(small_cases(per_domain=1, tenant=f"roll{int(time.monotonic() * 10)}")[0].trajectory.events[:1])
        time.sleep(1)
    log.close()


def test_an_erased_case_replays_as_erased(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    ensure_topics(admin_client(kafka_config), (TopicSpec(topic_names.events, 3, FAST_COMPACTION),), 1)
    create_topics(kafka_config, topic_names)
    gone, kept = small_cases(per_domain=1)[:2]
    producer = EventProducer(kafka_config, topic_names)
    positions = {c.ref: tuple(producer.append(c.trajectory.events)) for c in (gone, kept)}
    for case in (gone, kept):
        producer.trigger(DecisionRequest(case.ref.case_id, case.ref, case.task, 900, (Architecture.DPM,),
                                         positions[case.ref]))  # fmt: skip
    with pipeline_processes([["worker"]], worker_env(kafka_bootstrap, topic_names, tmp_path), tmp_path / "logs"):
        await_decisions(kafka_config, topic_names, 2, timeout_s=60, cipher=case_keys)
    env = {"DPM_BOOTSTRAP": kafka_bootstrap, "DPM_TOPIC_PREFIX": topic_names.prefix}
    erased = dpm_cli("erase", "--tenant", gone.ref.tenant, "--case", gone.ref.case_id, env=env)
    assert erased.returncode == 0, erased.stderr
    assert f"1 data key(s) destroyed, {len(gone.trajectory)} event tombstone(s) and 0 segment view" in erased.stdout
    _await_compaction(kafka_config, topic_names, producer, positions[gone.ref])
    producer.close()
    replay = dpm_cli("replay", "--all", env=env)
    assert replay.returncode == 2
    lines = {line.split()[1]: line for line in replay.stdout.splitlines() if ":dpm" in line}
    assert "ERASED" in lines[f"{gone.ref.case_id}:dpm"]
    assert "MATCH" in lines[f"{kept.ref.case_id}:dpm"]


def test_a_rewritten_event_is_log_changed_and_superseded_never_erased(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    """An event sent again with new text under its key: compaction drops the old one, nothing was erased."""
    ensure_topics(admin_client(kafka_config), (TopicSpec(topic_names.events, 3, FAST_COMPACTION),), 1)
    create_topics(kafka_config, topic_names)
    case = small_cases(per_domain=1)[0]
    producer = EventProducer(kafka_config, topic_names, case_keys)
    positions = tuple(producer.append(case.trajectory.events, CaseOpening(case.task, (900,))))
    both = (Architecture.DPM, Architecture.SUMM)

    def trigger(trigger_id: str, at: tuple[LogPosition, ...]) -> None:
        producer.trigger(DecisionRequest(trigger_id, case.ref, case.task, 900, both, at, len(at)))

    trigger("before", positions)
    env = worker_env(kafka_bootstrap, topic_names, tmp_path)
    with pipeline_processes([["worker"], ["baseline", "--budgets", "900"]], env, tmp_path / "logs"):
        await_decisions(kafka_config, topic_names, 2, timeout_s=120, cipher=case_keys)
        old = case.trajectory.events[4]
        rewritten = producer.append([Event(case.ref, old.seq, old.kind, old.text + " (corrected)")])[0]
        log = KafkaEventLog(kafka_config, topic_names.events)
        deadline = time.monotonic() + 60
        while not log.read([positions[4]]).missing:  # new records roll segments, so the cleaner can run
            assert time.monotonic() < deadline, "compaction did not remove the superseded event"
            producer.append(
                small_cases(per_domain=1, tenant=f"roll{int(time.monotonic() * 10)}")[0].trajectory.events[:1]
            )
            time.sleep(1)
        log.close()
        trigger("old-offsets", positions)
        trigger("new-offsets", (*positions[:4], rewritten, *positions[5:]))
        await_decisions(kafka_config, topic_names, 3, timeout_s=120, cipher=case_keys)
        letters = await_dead_letters(kafka_config, topic_names, 3, timeout_s=60)
    producer.close()
    # The worker: the old offset is gone (superseded), the new one is decided. Summ-only folded the old text.
    assert sorted(letters) == [("superseded", "new-offsets"), ("superseded", "old-offsets"),
                               ("superseded", "old-offsets")]  # fmt: skip
    replay = dpm_cli("replay", "--tenant", case.ref.tenant, "--case", case.ref.case_id,
                     env={"DPM_BOOTSTRAP": kafka_bootstrap, "DPM_TOPIC_PREFIX": topic_names.prefix})  # fmt: skip
    lines = {line.split()[1]: line for line in replay.stdout.splitlines() if ":dpm" in line or ":summ" in line}
    assert "LOG-CHANGED" in lines["before:dpm"], replay.stdout
    assert "LOG-CHANGED" in lines["before:summ"], replay.stdout
    assert "MATCH" in lines["new-offsets:dpm"], replay.stdout
    assert "ERASED" not in replay.stdout
