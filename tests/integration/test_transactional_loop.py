"""The transactional loop against the real broker: retries of transient failures, then a dead letter."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from typing import Any

import orjson
from confluent_kafka import Consumer, Producer, TopicPartition

from pipeline.core.case import Case
from pipeline.core.event_log import RawRecord
from pipeline.core.events import LogPosition
from pipeline.core.memory_log import InMemoryEventLog
from pipeline.core.model import ModelBackend, ModelBackendError, ModelRequest, ModelResponse
from pipeline.core.task import Architecture
from pipeline.kafka.errors import KafkaAdapterError
from pipeline.kafka.producer import EventProducer
from pipeline.kafka.range_reads import read_topic
from pipeline.kafka.topics import TopicNames
from pipeline.kafka.transactions import Deferred, LoopConfig, Output, Step, TransactionalLoop
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.llm.latency import LatencyBackend
from pipeline.wire.event import append_events
from pipeline.wire.trigger import DecisionRequest
from pipeline.workers.projection.handler import ProjectionHandler
from tests.cases import load_fixture
from tests.pipeline_support import create_topics


class _Overloaded(ExtractiveBackend):
    calls = 0

    def complete(self, request: ModelRequest) -> ModelResponse:
        _Overloaded.calls += 1
        raise ModelBackendError("Messages API answered HTTP 529: overloaded")


def _logged_fixture(
    config: dict[str, str], names: TopicNames
) -> tuple[InMemoryEventLog, Case, tuple[LogPosition, ...]]:
    """The pipeline's topics, and the fixture case's events in an in-memory log."""
    create_topics(config, names)
    case = load_fixture()
    log = InMemoryEventLog()
    return log, case, tuple(append_events(log, case.trajectory.events))


def _trigger(config: dict[str, str], names: TopicNames, trigger_id: str, case: Case,
             positions: tuple[LogPosition, ...]) -> None:  # fmt: skip
    producer = EventProducer(config, names)
    producer.trigger(DecisionRequest(trigger_id, case.ref, case.task, 700, (Architecture.DPM,), positions))
    producer.close()


def _run_until_committed(loop: TransactionalLoop) -> int:
    """Runs batches until one commits (at most about a minute); returns what was committed."""
    committed = 0
    for _ in range(60):
        committed += loop.run_once(timeout_s=1.0)
        if committed:
            break
    loop.close()
    return committed


def test_a_model_that_keeps_failing_is_retried_then_dead_lettered(
    kafka_config: dict[str, str], topic_names: TopicNames
) -> None:
    log, case, positions = _logged_fixture(kafka_config, topic_names)
    _trigger(kafka_config, topic_names, "t-529", case, positions)
    config = LoopConfig(
        group_id=f"g-{uuid.uuid4().hex}",
        input_topic=topic_names.triggers,
        transactional_id=f"tx-{uuid.uuid4().hex}",
        max_model_attempts=3,
        retry_backoff_s=0.1,
    )
    loop = TransactionalLoop(kafka_config, config, ProjectionHandler(topic_names, log, _Overloaded(), "w"))
    loop.start()
    assert _run_until_committed(loop) == 1
    assert _Overloaded.calls == 3
    assert (loop.stats.retries, loop.stats.aborts) == (3, 0)  # the model fails before any transaction begins
    letters = [orjson.loads(r.value or b"") for r in read_topic(kafka_config, topic_names.dlq)]
    assert [letter["reason"] for letter in letters] == ["model-error"]
    assert list(read_topic(kafka_config, topic_names.decisions)) == []


def test_a_fenced_producer_is_replaced_and_the_batch_consumed_again(
    kafka_config: dict[str, str], topic_names: TopicNames
) -> None:
    log, case, positions = _logged_fixture(kafka_config, topic_names)
    config = LoopConfig(group_id=f"g-{uuid.uuid4().hex}", input_topic=topic_names.triggers,
                        transactional_id=f"tx-{uuid.uuid4().hex}")  # fmt: skip
    loop = TransactionalLoop(kafka_config, config, ProjectionHandler(topic_names, log, ExtractiveBackend(), "w"))
    loop.start()
    usurper = Producer({**kafka_config, "transactional.id": config.transactional_id})
    usurper.init_transactions(30)  # a newer instance with the same id: the loop's producer is now fenced
    _trigger(kafka_config, topic_names, "t-fenced", case, positions)
    assert _run_until_committed(loop) == 1
    assert loop.stats.producers_replaced == 1
    decisions = [orjson.loads(r.value or b"")["decision_id"] for r in read_topic(kafka_config, topic_names.decisions)]
    assert decisions == ["t-fenced:dpm"]


class _InFlight:
    """Wraps a backend and records the most calls it had in flight at once."""

    def __init__(self, inner: ModelBackend) -> None:
        self._inner, self._lock = inner, threading.Lock()
        self.now = self.peak = 0
        self.name, self.model = inner.name, inner.model

    def complete(self, request: ModelRequest) -> ModelResponse:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        try:
            return self._inner.complete(request)
        finally:
            with self._lock:
                self.now -= 1


class _FinishOrder(ProjectionHandler):
    """Records the input offsets in the order the loop finishes their deferred work."""

    finished: list[int]

    def start(self, record: RawRecord) -> Step:
        step = super().start(record)
        if not isinstance(step, Deferred):
            return step

        def finish(result: object) -> Sequence[Output]:
            self.finished.append(record.position.offset)
            return step.finish(result)

        return Deferred(step.slow, finish)


def test_a_batch_calls_the_model_concurrently_and_commits_what_sequential_work_would(
    kafka_config: dict[str, str], topic_names: TopicNames
) -> None:
    log, case, positions = _logged_fixture(kafka_config, topic_names)
    producer = EventProducer(kafka_config, topic_names)
    for n in range(8):  # one case: one trigger partition, so one batch can hold all eight
        producer.trigger(DecisionRequest(f"c{n}", case.ref, case.task, 500 + 40 * n, (Architecture.DPM,), positions))
    producer.close()
    backend = _InFlight(LatencyBackend(ExtractiveBackend(), latency_ms=300))
    handler = _FinishOrder(topic_names, log, backend, "w")
    handler.finished = []
    config = LoopConfig(group_id=f"g-{uuid.uuid4().hex}", input_topic=topic_names.triggers,
                        transactional_id=f"tx-{uuid.uuid4().hex}", batch_size=8, concurrency=4)  # fmt: skip
    loop = TransactionalLoop(kafka_config, config, handler)
    loop.start()
    committed = 0
    while committed < 8:
        committed += loop.run_once(timeout_s=2.0)
    loop.close()
    assert 2 <= backend.peak <= 4  # concurrent, and never above the setting
    assert handler.finished == sorted(handler.finished)  # outputs are finished in trigger order
    views = {r.key: r.value for r in read_topic(kafka_config, topic_names.views)}
    sequential = ProjectionHandler(topic_names, log, ExtractiveBackend(), "w")
    for trigger in read_topic(kafka_config, topic_names.triggers):
        expected = {o.key: o.value for o in sequential.handle(trigger) if o.topic == topic_names.views}
        assert expected.items() <= views.items()  # byte-identical to the view made record by record
    assert len(views) == 8


class _LosesFirstSeek:
    """A consumer whose first seek is lost, as a seek that meets a leader change can be."""

    def __init__(self, inner: Consumer) -> None:
        self._inner, self.lost = inner, 0

    def seek(self, partition: TopicPartition) -> None:
        if not self.lost:
            self.lost += 1
            return
        self._inner.seek(partition)

    def __getattr__(self, name: str) -> Any:  # every other call goes to the real consumer
        return getattr(self._inner, name)


class _FailsOnce(ProjectionHandler):
    """Fails the trigger at offset 1 once, as a read during a broker node's loss does."""

    failed = False

    def start(self, record: RawRecord) -> Step:
        if record.position.offset == 1 and not self.failed:
            self.failed = True
            raise KafkaAdapterError("reading the events failed: broker handle destroyed")
        return super().start(record)


def test_a_rewind_that_does_not_take_is_made_again_and_no_trigger_is_skipped(
    kafka_config: dict[str, str], topic_names: TopicNames
) -> None:
    log, case, positions = _logged_fixture(kafka_config, topic_names)
    for n in range(3):  # one case: one partition, offsets 0, 1, 2
        _trigger(kafka_config, topic_names, f"s{n}", case, positions)
    config = LoopConfig(group_id=f"g-{uuid.uuid4().hex}", input_topic=topic_names.triggers,
                        transactional_id=f"tx-{uuid.uuid4().hex}", batch_size=1, retry_backoff_s=0.1)  # fmt: skip
    loop = TransactionalLoop(kafka_config, config, _FailsOnce(topic_names, log, ExtractiveBackend(), "w"))
    consumer = loop._consumer = _LosesFirstSeek(loop._consumer)  # type: ignore[assignment]
    loop.start()
    committed = 0
    for _ in range(60):
        committed += loop.run_once(timeout_s=1.0)
        if committed == 3:
            break
    loop.close()
    assert consumer.lost == 1
    assert loop.stats.reseeks == 1  # offset 2 came after the lost rewind to 1: sought again, not committed
    decisions = [orjson.loads(r.value or b"")["decision_id"] for r in read_topic(kafka_config, topic_names.decisions)]
    assert sorted(decisions) == ["s0:dpm", "s1:dpm", "s2:dpm"]
