"""Decisions an earlier release wrote replay MATCH on this one, beside decisions of the current schema version.

The records are the bytes release 0.1.0 wrote (tests/fixtures/release-0.1.0: `dpm.decision.v1`),
put on fresh topics at the offsets they had; a worker of this release then decides the same case
again (`dpm.decision.v2`, naming its events topic) onto the same topics.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer

from pipeline.core.events import LogPosition
from pipeline.core.task import Architecture
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.writing.producer import EventProducer
from pipeline.keys.store import CaseKeys
from pipeline.services.cluster import pipeline_processes
from pipeline.services.read_outputs import await_decisions, load_outputs
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.trigger import DecisionRequest
from tests.cases import load_fixture
from tests.pipeline_support import committed_records, create_topics, worker_env
from tests.processes import dpm_cli

# What this proves is the command's own (parsing, rendering, reports, readers): `make test-kafka4` leaves it out.
pytestmark = pytest.mark.any_broker

RELEASED = Path(__file__).parents[1] / "fixtures" / "release-0.1.0" / "outputs.jsonl"


def _put_released_records(config: dict[str, str], names: TopicNames) -> tuple[int, tuple[LogPosition, ...]]:
    """Writes what release 0.1.0 wrote, events at their recorded partitions and offsets.

    Returns how many decisions it wrote, and the events' positions.
    """
    records = [orjson.loads(line) for line in RELEASED.read_bytes().splitlines()]
    producer = Producer(config)
    for record in records:
        producer.produce(getattr(names, record["topic"]), key=record["key"].encode(), value=record["value"].encode(),
                         partition=record.get("partition", 0))  # fmt: skip
    producer.flush(30)
    recorded = tuple(LogPosition(r["partition"], r["offset"]) for r in records if r["topic"] == "events")
    events = committed_records(config, names.events, len(recorded))
    assert tuple(r.position for r in events) == recorded, "the events are at the offsets 0.1.0 recorded"
    return sum(r["topic"] == "decisions" for r in records), recorded


def test_release_0_1_0_decisions_replay_match_beside_this_release_s(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    create_topics(kafka_config, topic_names, partitions=3)
    old, positions = _put_released_records(kafka_config, topic_names)
    case = load_fixture()
    producer = EventProducer(kafka_config, topic_names)
    producer.trigger(DecisionRequest("now", case.ref, case.task, 900, (Architecture.DPM,), positions, len(positions)))
    producer.close()
    env = worker_env(kafka_bootstrap, topic_names, tmp_path)
    with pipeline_processes([["worker"]], env, tmp_path / "logs"):
        await_decisions(kafka_config, topic_names, old + 1, timeout_s=120, cipher=case_keys)
    written = committed_records(kafka_config, topic_names.decisions, old + 1)
    schemas = sorted(orjson.loads(r.value or b"")["schema"] for r in written)
    assert schemas == [SchemaId.DECISION_V1.value] * old + [SchemaId.DECISION.value]
    decided = load_outputs(kafka_config, topic_names, cipher=case_keys).decisions
    assert {str(k.decision_id): r.events_topic for k, r in decided.items()} == {
        "rel010-0:dpm": None, "rel010-1:dpm": None, "now:dpm": topic_names.events}  # fmt: skip
    cli_env = {"DPM_BOOTSTRAP": kafka_bootstrap, "DPM_TOPIC_PREFIX": topic_names.prefix}
    for mode in ((), ("--verify-recorded",)):
        replay = dpm_cli("replay", "--all", *mode, env=cli_env)
        assert replay.returncode == 0, replay.stdout + replay.stderr
        assert replay.stdout.count("MATCH") == old + 1, replay.stdout
