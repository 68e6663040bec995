"""Hostile triggers and slow models against real worker processes: dead letters, never a stall or a crash loop."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from pipeline.config.settings import Settings
from pipeline.core.case import Case
from pipeline.core.events import LogPosition
from pipeline.core.task import Architecture
from pipeline.core.verification import ReplayStatus
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.reading.range_reads import read_topic
from pipeline.kafka.reading.reader import KafkaEventLog
from pipeline.kafka.writing.producer import EventProducer
from pipeline.keys.store import CaseKeys
from pipeline.services.cluster import pipeline_processes as processes
from pipeline.services.read_outputs import await_decisions, load_outputs
from pipeline.services.replay import registry_backends, replay_many
from pipeline.wire.trigger import DecisionId, DecisionRequest
from tests.pipeline_support import await_dead_letters, create_topics, small_cases, worker_env

# Our consumers' validation and dead letters, which no broker release changes: `make test-kafka4` leaves these
# out; the slow batch stays (it rests on the broker's transaction timeout).
_OURS = pytest.mark.any_broker


def _one_case(config: dict[str, str], names: TopicNames) -> tuple[EventProducer, Case, tuple[LogPosition, ...]]:
    """Topics of one partition (every trigger on it, in order) and one short case's events appended."""
    create_topics(config, names, partitions=1)
    producer = EventProducer(config, names)
    case = small_cases(per_domain=1)[0]
    return producer, case, tuple(producer.append(case.trajectory.events))


def _produce_raw(config: dict[str, str], names: TopicNames, values: list[dict[str, object]]) -> None:
    """Trigger values as an outside client might write them, unchecked, to partition 0."""
    producer = Producer(config)
    for value in values:
        # the standard library writes integers of any size (orjson stops at 64 bits)
        key = f"{value['tenant']}/{value['case_id']}".encode()  # filed under the case it names
        producer.produce(names.triggers, value=json.dumps(value).encode(), key=key, partition=0)
    assert producer.flush(30) == 0


@_OURS
def test_a_trigger_listing_positions_never_written_is_refused_at_once_and_the_partition_moves_on(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    producer, case, positions = _one_case(kafka_config, topic_names)  # poison and honest triggers: one partition
    far_apart = tuple(LogPosition(0, 1_000 * n) for n in range(10_000))  # past the log's end: no read at all
    producer.trigger(DecisionRequest("poison", case.ref, case.task, 900, (Architecture.DPM,), far_apart))
    producer.trigger(DecisionRequest("honest", case.ref, case.task, 900, (Architecture.DPM,), positions))
    producer.close()
    env = {**worker_env(kafka_bootstrap, topic_names, tmp_path), "DPM_TRIGGER_DEADLINE_S": "2"}
    started = time.monotonic()
    with processes([["worker"]], env, tmp_path / "logs") as procs:
        outputs = await_decisions(kafka_config, topic_names, 1, timeout_s=60, cipher=case_keys)
        letters = await_dead_letters(kafka_config, topic_names, 1, timeout_s=10)
        assert procs[0].poll() is None, "the worker is still running"
    assert outputs.decision_ids() == {DecisionId("honest", Architecture.DPM)}
    assert letters == [("schema", "poison")]
    assert time.monotonic() - started < 45


@_OURS
def test_out_of_range_and_unknown_input_are_schema_rejections(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    producer, case, positions = _one_case(kafka_config, topic_names)
    producer.close()
    good: dict[str, object] = DecisionRequest(
        "ok", case.ref, case.task, 900, (Architecture.DPM,), positions, len(positions)
    ).to_wire()
    hostile = {
        "huge-budget": {**good, "trigger_id": "huge-budget", "budget_chars": 10**30},
        "huge-offset": {**good, "trigger_id": "huge-offset", "positions": [[0, 2**70]], "events_count": 1},
        "huge-partition": {**good, "trigger_id": "huge-partition", "positions": [[2**31, 0]], "events_count": 1},
        "missing-partition": {**good, "trigger_id": "missing-partition", "positions": [[7, 0]], "events_count": 1},
        "nuclear": {**good, "trigger_id": "nuclear", "task": {**case.task.wire(), "domain": "nuclear"}},
        "nul": {**good, "trigger_id": "nul\u0000id"},
        "count-mismatch": {**good, "trigger_id": "count-mismatch", "events_count": len(positions) + 1},
    }
    _produce_raw(kafka_config, topic_names, [*hostile.values(), good])
    with processes([["worker"]], worker_env(kafka_bootstrap, topic_names, tmp_path), tmp_path / "logs"):
        outputs = await_decisions(kafka_config, topic_names, 1, timeout_s=60, cipher=case_keys)
        letters = await_dead_letters(kafka_config, topic_names, len(hostile), timeout_s=20)
    assert outputs.decision_ids() == {DecisionId("ok", Architecture.DPM)}
    assert sorted(letters) == sorted(("schema", trigger_id) for trigger_id in
                                     (v["trigger_id"] for v in hostile.values()))  # fmt: skip


def test_a_slow_batch_outlasting_the_transaction_timeout_commits_without_fencing(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    """8 triggers x 2 calls x 1.1 s = a 17.6 s batch against a 5 s transaction timeout."""
    producer, case, positions = _one_case(kafka_config, topic_names)
    ids = set()
    for n in range(8):
        request = DecisionRequest(f"slow{n}", case.ref, case.task, 600 + 50 * n, (Architecture.DPM,), positions)
        producer.trigger(request)
        ids.add(request.decision_id(Architecture.DPM))
    producer.close()
    env = {**worker_env(kafka_bootstrap, topic_names, tmp_path), "DPM_TRANSACTION_TIMEOUT_MS": "5000",
           "DPM_MODEL_LATENCY_MS": "1100"}  # fmt: skip
    with processes([["worker", "--batch-size", "8"]], env, tmp_path / "logs") as procs:
        outputs = await_decisions(kafka_config, topic_names, len(ids), timeout_s=90, cipher=case_keys)
        assert procs[0].poll() is None, "the worker did not die"
    assert outputs.decision_ids() == ids
    assert outputs.duplicates == 0
    log = (tmp_path / "logs").glob("*")
    assert not any("fenced" in p.read_text(errors="replace").lower() for p in log if p.is_file())


@_OURS
def test_a_trigger_id_sent_twice_is_refused_by_its_worker_and_seen_once_by_every_reader(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    producer, case, positions = _one_case(kafka_config, topic_names)
    request = DecisionRequest("twice", case.ref, case.task, 900, (Architecture.DPM,), positions)
    env = worker_env(kafka_bootstrap, topic_names, tmp_path)
    producer.trigger(request)
    with processes([["worker"]], env, tmp_path / "logs"):
        await_decisions(kafka_config, topic_names, 1, timeout_s=60, cipher=case_keys)
        producer.trigger(request)
        assert await_dead_letters(kafka_config, topic_names, 1, timeout_s=60) == [("duplicate", "twice")]
    # A new worker never saw the id: it decides it again, and readers keep the first decision.
    producer.trigger(request)
    producer.close()
    with processes([["worker"]], env, tmp_path / "logs-again"):
        deadline = time.monotonic() + 60
        while len(list(read_topic(kafka_config, topic_names.decisions))) < 2:
            assert time.monotonic() < deadline, "the new worker did not decide the third copy"
            time.sleep(0.5)
    outputs = load_outputs(kafka_config, topic_names, cipher=case_keys)
    assert outputs.decision_ids() == {request.decision_id(Architecture.DPM)}
    assert outputs.duplicates == 1
    assert [a.call_index for a in outputs.audits[request.decision_key(Architecture.DPM)]] == [0, 1]
    log = KafkaEventLog(kafka_config, topic_names.events)
    lines = replay_many(outputs.decisions.values(), outputs.views, outputs.audits, log,
                        registry_backends(Settings.from_env({}).model, "extractive"), cipher=case_keys)  # fmt: skip
    log.close()
    assert [line.report.status for line in lines] == [ReplayStatus.MATCH]
