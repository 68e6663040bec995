"""The transactional loop against the real broker: retries of transient failures, then a dead letter."""

from __future__ import annotations

import itertools
import re
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from pipeline.core.case import Case
from pipeline.core.event_log import RawRecord
from pipeline.core.events import CaseRef, LogPosition
from pipeline.core.memory_log import InMemoryEventLog
from pipeline.core.model import ModelBackend, ModelBackendError, ModelRequest, ModelResponse
from pipeline.core.task import Architecture
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.errors import KafkaAdapterError
from pipeline.kafka.processing.steps import Deferred, Output, Step
from pipeline.kafka.processing.transactions import LoopConfig, TransactionalLoop
from pipeline.kafka.reading.range_reads import read_topic
from pipeline.kafka.writing import txn_producer
from pipeline.kafka.writing.producer import EventProducer
from pipeline.kafka.writing.txn_producer import PublishFailedError
from pipeline.keys.providers import KeyServiceUnavailableError, LocalFileKeyProvider, WrappedKey
from pipeline.keys.ring import KeyRing
from pipeline.keys.store import CaseKeys, MemoryKeyTopic
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.llm.latency import LatencyBackend
from pipeline.wire.event import EventRecord, append_events
from pipeline.wire.sealing import seal_body
from pipeline.wire.trigger import DecisionId, DecisionRequest
from pipeline.workers.projection.handler import ProjectionHandler
from tests.cases import load_fixture
from tests.pipeline_support import committed_records, create_topics

_W = TypeVar("_W")  # a consumer wrapped by a test


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


def _run_until_committed(loop: TransactionalLoop, *, close: bool = True) -> int:
    """Runs batches until one commits (at most about a minute); returns what was committed."""
    committed = 0
    for _ in range(60):
        committed += loop.run_once(timeout_s=1.0)
        if committed:
            break
    if close:
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
    assert _reasons(kafka_config, topic_names, 1) == ["model-error"]
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
    assert _decisions(kafka_config, topic_names, 1) == ["t-fenced:dpm"]


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
    views = {r.key: r.value for r in committed_records(kafka_config, topic_names.views, 8)}
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
    loop, consumer = _three_decided_through(kafka_config, topic_names, _LosesFirstSeek)
    assert consumer.lost == 1
    assert loop.stats.reseeks == 1  # offset 2 came after the lost rewind to 1: sought again, not committed
    assert sorted(_decisions(kafka_config, topic_names, 3)) == ["s0:dpm", "s1:dpm", "s2:dpm"]


def _three_decided_through(kafka_config: dict[str, str], topic_names: TopicNames,
                           wrapper: Callable[[Any], _W]) -> tuple[TransactionalLoop, _W]:  # fmt: skip
    """Three triggers of one case (offsets 0, 1, 2; the one at 1 fails once), decided through a wrapped consumer."""
    log, case, positions = _logged_fixture(kafka_config, topic_names)
    for n in range(3):
        _trigger(kafka_config, topic_names, f"s{n}", case, positions)
    config = LoopConfig(group_id=f"g-{uuid.uuid4().hex}", input_topic=topic_names.triggers,
                        transactional_id=f"tx-{uuid.uuid4().hex}", batch_size=1, retry_backoff_s=0.1)  # fmt: skip
    loop = TransactionalLoop(kafka_config, config, _FailsOnce(topic_names, log, ExtractiveBackend(), "w"))
    consumer = wrapper(loop._consumer)
    loop._consumer = consumer  # type: ignore[assignment]
    loop.start()
    committed = 0
    for _ in range(60):
        committed += loop.run_once(timeout_s=1.0)
        if committed == 3:
            break
    loop.close()
    return loop, consumer


def _loop(kafka_config: dict[str, str], topic_names: TopicNames, handler: ProjectionHandler, **config: Any
          ) -> TransactionalLoop:  # fmt: skip
    settings = LoopConfig(group_id=f"g-{uuid.uuid4().hex}", input_topic=topic_names.triggers,
                          transactional_id=f"tx-{uuid.uuid4().hex}", retry_backoff_s=0.1, **config)  # fmt: skip
    loop = TransactionalLoop(kafka_config, settings, handler)
    loop.start()
    return loop


def _committed(loop: TransactionalLoop, count: int, turns: int = 90) -> int:
    committed = 0
    for _ in range(turns):
        committed += loop.run_once(timeout_s=1.0)
        if committed >= count:
            break
    loop.close()
    return committed


def _decisions(config: dict[str, str], names: TopicNames, count: int) -> list[str]:
    """The decision ids committed, once `count` are readable (or the time is up)."""
    return [orjson.loads(r.value or b"")["decision_id"] for r in committed_records(config, names.decisions, count)]


def _reasons(config: dict[str, str], names: TopicNames, count: int) -> list[str]:
    """The dead-letter reasons committed, once `count` are readable (or the time is up)."""
    return [orjson.loads(r.value or b"")["reason"] for r in committed_records(config, names.dlq, count)]


class _KeyServiceAway(LocalFileKeyProvider):
    """A key service that does not answer while `back` is False."""

    back = True

    def unwrap(self, case: CaseRef, wrapped: WrappedKey) -> bytes:
        if not self.back:
            raise KeyServiceUnavailableError("aws-kms cannot be reached: connect timeout")
        return super().unwrap(case, wrapped)


def test_a_key_service_away_is_retried_then_dead_lettered_and_the_trigger_sent_again_is_decided(
    kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    create_topics(kafka_config, topic_names)
    case, log, service, topic = load_fixture(), InMemoryEventLog(), _KeyServiceAway(tmp_path), MemoryKeyTopic()
    writer = CaseKeys(KeyRing(service), topic)
    positions = tuple(log.append(e.case, e.key.encode(), orjson.dumps(seal_body(EventRecord(e).to_wire(), writer)))
                      for e in case.trajectory.events)  # fmt: skip
    service.back = False  # from here on: the worker's keys must ask it to open the case's events
    _trigger(kafka_config, topic_names, "t-kms", case, positions)
    config = LoopConfig(group_id=f"g-{uuid.uuid4().hex}", input_topic=topic_names.triggers,
                        transactional_id=f"tx-{uuid.uuid4().hex}", key_service_wait_s=0.5,
                        retry_backoff_s=0.1)  # fmt: skip
    handler = ProjectionHandler(
        topic_names, log, ExtractiveBackend(), "w", cipher=CaseKeys(KeyRing(service), topic), key_service_wait_s=0.0
    )  # no refusals at once after it: the loop's bound alone
    loop = TransactionalLoop(kafka_config, config, handler)
    loop.start()
    try:
        assert _run_until_committed(loop, close=False) == 1
        assert loop.stats.retries >= 1  # consumed again (pauses of 0.1, 0.2, 0.4 s...) until 0.5 s had passed
        [letter] = committed_records(kafka_config, topic_names.dlq, 1)
        body = orjson.loads(letter.value or b"")
        assert body["reason"] == "key-service-unavailable"
        assert re.fullmatch(r"the key service did not answer \d+ attempts? over \d+ s; last: aws-kms cannot be "
                            "reached: connect timeout", body["detail"])  # fmt: skip
        service.back = True
        _trigger(kafka_config, topic_names, "t-kms", case, positions)  # the same id: not a duplicate
        assert _run_until_committed(loop, close=False) == 1
        [decision] = committed_records(kafka_config, topic_names.decisions, 1)
        assert decision.key == str(DecisionId("t-kms", Architecture.DPM)).encode()
    finally:
        loop.close()


class _HangsOnce(Producer):
    """A producer whose first send_offsets_to_transaction blocks past any timeout (librdkafka issue 5456)."""

    hung = 0

    def send_offsets_to_transaction(self, *args: Any, **kwargs: Any) -> None:
        if not _HangsOnce.hung:
            _HangsOnce.hung += 1
            threading.Event().wait()  # never returns: the loop must give up on this producer
        super().send_offsets_to_transaction(*args, **kwargs)


def test_a_transactional_call_that_hangs_gives_way_to_a_new_producer(
    kafka_config: dict[str, str], topic_names: TopicNames, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(txn_producer, "Producer", _HangsOnce)
    monkeypatch.setattr(txn_producer, "GRACE_S", 0.5)
    log, case, positions = _logged_fixture(kafka_config, topic_names)
    _trigger(kafka_config, topic_names, "t-hang", case, positions)
    loop = _loop(kafka_config, topic_names, ProjectionHandler(topic_names, log, ExtractiveBackend(), "w"),
                 call_timeout_s=2.0)  # fmt: skip
    assert _committed(loop, 1) == 1
    assert _HangsOnce.hung == 1
    assert loop.stats.producers_replaced == 1
    assert _decisions(kafka_config, topic_names, 1) == ["t-hang:dpm"]


class _Oversized(ProjectionHandler):
    """Gives the trigger `big` a 2 MB view: more than any broker takes in one record."""

    def start(self, record: RawRecord) -> Step:
        step = super().start(record)
        if b'"big"' not in (record.value or b"") or not isinstance(step, Deferred):
            return step

        def finish(result: object) -> Sequence[Output]:
            return [replace(o, value=o.value + b" " * 2_000_000) for o in step.finish(result)]

        return Deferred(step.slow, finish)


def test_outputs_too_large_to_publish_give_way_to_their_dead_letter(
    kafka_config: dict[str, str], topic_names: TopicNames
) -> None:
    log, case, positions = _logged_fixture(kafka_config, topic_names)
    for trigger_id in ("big", "after"):
        _trigger(kafka_config, topic_names, trigger_id, case, positions)
    loop = _loop(kafka_config, topic_names, _Oversized(topic_names, log, ExtractiveBackend(), "w"), batch_size=1)
    assert _committed(loop, 2) == 2
    assert _decisions(kafka_config, topic_names, 1) == ["after:dpm"]
    assert _reasons(kafka_config, topic_names, 1) == ["oversize"]
    assert loop.stats.publish_failures == 1


def test_a_batch_that_fails_for_an_unknown_reason_is_published_record_by_record(
    kafka_config: dict[str, str], topic_names: TopicNames
) -> None:
    log, case, positions = _logged_fixture(kafka_config, topic_names)
    for trigger_id in ("first", "poison", "last"):
        _trigger(kafka_config, topic_names, trigger_id, case, positions)
    loop = _loop(kafka_config, topic_names, ProjectionHandler(topic_names, log, ExtractiveBackend(), "w"),
                 batch_size=8)  # fmt: skip
    publish = loop._producer.publish

    def refuses_poison(outputs: Sequence[Output], *args: Any, **kwargs: Any) -> list[LogPosition]:
        if any(o.key == b"poison:dpm" for o in outputs):
            raise PublishFailedError("transaction not committed: Local: Invalid argument")
        return publish(outputs, *args, **kwargs)

    loop._producer.publish = refuses_poison  # type: ignore[method-assign]
    assert _committed(loop, 3) == 3
    assert sorted(_decisions(kafka_config, topic_names, 2)) == ["first:dpm", "last:dpm"]
    assert _reasons(kafka_config, topic_names, 1) == ["unpublishable"]


def test_the_loop_keeps_turning_while_it_waits_for_the_model(
    kafka_config: dict[str, str], topic_names: TopicNames
) -> None:
    """Liveness sees a loop waiting for a slow model as alive; only a loop stuck in a call stops turning."""
    log, case, positions = _logged_fixture(kafka_config, topic_names)
    _trigger(kafka_config, topic_names, "slow", case, positions)
    backend = LatencyBackend(ExtractiveBackend(), latency_ms=2_500)
    loop = _loop(kafka_config, topic_names, ProjectionHandler(topic_names, log, backend, "w"))
    turns: list[float] = []
    loop._on_progress = lambda: turns.append(time.monotonic())
    assert _committed(loop, 1) == 1
    gaps = [b - a for a, b in itertools.pairwise(turns)]
    assert len(turns) >= 5  # two 2.5 s model calls: a turn at least every second while they run
    assert max(gaps) < 1.6, gaps


class _RefusesFirstSeek:
    """A consumer whose first seek raises as librdkafka does for a partition revoked or lost since the read."""

    def __init__(self, inner: Any) -> None:
        self._inner, self.refused = inner, 0

    def seek(self, partition: TopicPartition) -> None:
        if not self.refused:
            self.refused += 1
            raise KafkaException(KafkaError(KafkaError._STATE, "Failed to seek to offset 1: Local: Erroneous state"))
        self._inner.seek(partition)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_rewind_librdkafka_refuses_neither_stops_the_loop_nor_skips_a_trigger(
    kafka_config: dict[str, str], topic_names: TopicNames
) -> None:
    """A rebalance between a read and its rewind made seek raise out of the loop: the worker left its group."""
    _, consumer = _three_decided_through(kafka_config, topic_names, _RefusesFirstSeek)
    assert consumer.refused == 1
    assert sorted(_decisions(kafka_config, topic_names, 3)) == ["s0:dpm", "s1:dpm", "s2:dpm"]
