"""Workers on KIP-848's consumer group protocol (Kafka 4.x): the broker assigns partitions, exactly once holds."""

from __future__ import annotations

import time
import uuid

import orjson
import pytest

from pipeline.config.settings import Settings
from pipeline.core.memory_log import InMemoryEventLog
from pipeline.core.task import Architecture
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.local.broker_runtime import KafkaRelease
from pipeline.kafka.processing.transactions import LoopConfig, TransactionalLoop
from pipeline.kafka.writing.producer import EventProducer
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.wire.trigger import DecisionRequest
from pipeline.workers.projection.handler import ProjectionHandler
from tests.integration.test_transactional_loop import _logged_fixture
from tests.pipeline_support import committed_records

pytestmark = pytest.mark.skipif(
    KafkaRelease(Settings.from_env().kafka.version).major < 4,
    reason="the consumer group protocol (KIP-848) is served by Kafka 4.x brokers (DPM_KAFKA_VERSION=4.x)",
)


def _loop(config: dict[str, str], names: TopicNames, log: InMemoryEventLog, group: str, n: int) -> TransactionalLoop:
    loop_config = LoopConfig(group_id=group, input_topic=names.triggers, transactional_id=f"{group}-{n}",
                             group_protocol="consumer")  # fmt: skip
    return TransactionalLoop(config, loop_config, ProjectionHandler(names, log, ExtractiveBackend(), f"w{n}"))


def test_two_workers_on_the_consumer_protocol_decide_every_trigger_once(
    kafka_config: dict[str, str], topic_names: TopicNames
) -> None:
    log, case, positions = _logged_fixture(kafka_config, topic_names)
    producer = EventProducer(kafka_config, topic_names)
    producer.triggers([DecisionRequest(f"k{n}", case.ref, case.task, 500 + 10 * n, (Architecture.DPM,), positions)
                       for n in range(6)])  # fmt: skip
    producer.close()
    group = f"g-{uuid.uuid4().hex}"
    loops = [_loop(kafka_config, topic_names, log, group, n) for n in range(2)]
    for loop in loops:
        loop.start()
    committed, deadline = 0, time.monotonic() + 90
    while committed < 6 and time.monotonic() < deadline:
        committed += sum(loop.run_once(timeout_s=0.5) for loop in loops)
    for loop in loops:
        loop.close()
    decisions = [orjson.loads(r.value or b"")["decision_id"]
                 for r in committed_records(kafka_config, topic_names.decisions, 6)]  # fmt: skip
    assert sorted(decisions) == [f"k{n}:dpm" for n in range(6)]
