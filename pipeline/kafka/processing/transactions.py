"""Exactly-once consume-transform-produce: outputs and the input offsets commit in one transaction."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from pipeline.core.event_log import RawRecord, RecordId
from pipeline.core.model import ModelBackendError
from pipeline.kafka.errors import KafkaAdapterError
from pipeline.kafka.processing.steps import Deferred, Handler, Output, max_record_bytes, oversized
from pipeline.kafka.reading.range_reads import raw_record
from pipeline.kafka.writing.txn_producer import (
    OutputsRefusedError,
    PublishFailedError,
    TransactionalProducer,
    TransientPublishError,
)
from pipeline.keys.providers import KeyServiceUnavailableError
from pipeline.wire.rejection import Rejection

_LOG = logging.getLogger("pipeline.kafka.processing.transactions")
_LIB_LOG = logging.getLogger("pipeline.kafka.librdkafka")
# Attempts to publish a record's outputs, then its dead letter, before it is committed with nothing.
PUBLISH_ATTEMPTS = 3
# Waits between attempts after a transient failure (the broker away): doubling up to this.
MAX_BACKOFF_S = 10.0


@dataclass(frozen=True)
class LoopConfig:
    group_id: str
    input_topic: str
    transactional_id: str
    batch_size: int = 8
    session_timeout_ms: int = 10_000
    transaction_timeout_ms: int = 60_000
    max_poll_interval_ms: int = 900_000
    batch_time_s: float = 450.0  # then a batch takes no more records (WorkerSettings.batch_time_s)
    max_model_attempts: int = 3
    # A key service (KMS) that does not answer: the batch is consumed again after the back-off (2, 4, 8, 10 s...)
    # until this long after the first failure, then the trigger's retryable dead letter (DPM_KEY_SERVICE_WAIT_S).
    key_service_wait_s: float = 30.0
    retry_backoff_s: float = 2.0
    concurrency: int = 1  # records of a batch whose slow parts (model calls) run at once
    group_protocol: str = "classic"  # or "consumer": KIP-848, the broker assigns and times out members
    call_timeout_s: float = 30.0  # each transactional call; a call that hangs past it replaces the producer


@dataclass
class LoopStats:
    """Counters the metrics layer reads."""

    batches: int = 0
    records: int = 0
    outputs: int = 0
    aborts: int = 0  # transactions that did not commit
    retries: int = 0  # batches consumed again after a transient failure
    producers_replaced: int = 0
    reseeks: int = 0  # rewinds that had not taken effect when the next batch came, so were made again
    publish_failures: int = 0  # records whose outputs could not be published (dead-lettered after PUBLISH_ATTEMPTS)
    dropped: int = 0  # records committed without any output: not even their dead letter could be published
    on_batch: list[Callable[[int, float], None]] = field(default_factory=list)


@dataclass(frozen=True)
class _Retried:
    """A record's retryable failures so far: how many since when, and the dead letter it gets past their bound."""

    attempts: int
    since: float  # monotonic time of the first
    reason: Rejection
    detail: str


@dataclass(frozen=True)
class _Started:
    """A record of the batch being processed: its outputs, or its deferred work and where that runs."""

    record: RawRecord
    outputs: Sequence[Output] = ()
    deferred: Deferred[Any] | None = None
    future: Future[Any] | None = None

    def finished(self) -> Sequence[Output]:
        """The outputs, once the future (if any) is done."""
        if self.deferred is None or self.future is None:
            return self.outputs
        return self.deferred.finish(self.future.result())


class TransactionalLoop:
    """Consumes a batch, runs the handler, and commits outputs with the batch's offsets, or nothing.

    The handler starts each record in input order on this thread (validation, reads); the slow
    parts (model calls) of up to `concurrency` records run at once on a thread pool; their
    outputs are finished and committed in input order, so a batch's outputs are the same bytes in
    the same order as if it had run record by record.

    The handler (reads and model calls, the slow part) runs before the transaction begins; the
    transaction then only produces the outputs and commits them with the offsets, so its timeout
    never has to cover model latency, and a worker killed mid-batch leaves no open transaction
    holding back its partitions. A crash anywhere leaves nothing committed: outputs stay invisible
    to read_committed readers and the batch is consumed again by whichever member owns it next.

    Failures, by kind: a model that keeps failing dead-letters its record after
    `max_model_attempts`, a key service that does not answer after `key_service_wait_s`
    (`key-service-unavailable`, which binds nothing: the trigger sent again is decided); Kafka
    that is away (reads, the transaction) is waited for, with backoff, however long it takes,
    since no record is at fault; outputs the broker refuses are tried PUBLISH_ATTEMPTS times,
    then replaced by their record's dead letter, then by nothing, so no record can hold its
    partition back.
    """

    def __init__(self, client_config: dict[str, str], config: LoopConfig, handler: Handler) -> None:
        self._config = config
        self._handler = handler
        self._retries: dict[RecordId, _Retried] = {}  # records whose last attempt failed in a retryable way
        self._publish_failures: dict[RecordId, list[str]] = {}
        self._alone: dict[_Part, int] = {}  # partition -> last offset of a failed batch: published record by record
        self._on_progress: Callable[[], None] = lambda: None
        self._should_stop: Callable[[], bool] = lambda: False
        self._backoff_s = config.retry_backoff_s
        self.stats = LoopStats()
        self._consumer = Consumer(
            {
                **client_config,
                "group.id": config.group_id,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "max.poll.interval.ms": config.max_poll_interval_ms,
                **_membership(config),
                **_discovery(config),
            },
            logger=_LIB_LOG,
        )
        self._producer = TransactionalProducer(
            {**client_config, "transactional.id": config.transactional_id,
             "transaction.timeout.ms": config.transaction_timeout_ms, "linger.ms": 5},
            call_timeout_s=config.call_timeout_s,
        )  # fmt: skip
        self._max_record_bytes = max_record_bytes(client_config)
        self._pool = ThreadPoolExecutor(max_workers=config.concurrency, thread_name_prefix="model-call")
        # partition -> offset a rewind sought to, until the partition's next batch shows that it took
        self._rewound: dict[_Part, int] = {}

    def start(self) -> None:
        """Registers the transactional id and joins the group; waits (with backoff) while Kafka is away."""
        while not self._should_stop():
            try:
                self._producer.ready()
                break
            except TransientPublishError as exc:
                _LOG.warning("transactional producer not started yet: %s", exc)
                self._pause()
        else:
            return
        try:
            self._consumer.subscribe([self._config.input_topic], on_assign=self._forget_rewinds,
                                     on_revoke=self._forget_rewinds, on_lost=self._forget_rewinds)  # fmt: skip
        except KafkaException as exc:
            raise KafkaAdapterError(f"worker could not join {self._config.group_id}: {exc}") from exc

    def _start(self, record: RawRecord) -> Sequence[Output] | Deferred[Any]:
        retried = self._retries.get(record.where)
        if retried is not None and self._given_up(retried):
            del self._retries[record.where]
            return [self._handler.dead_letter(record, retried.reason, retried.detail)]
        try:
            return self._handler.start(record)
        except (ModelBackendError, KeyServiceUnavailableError) as exc:
            self._failed(record, exc)
            raise

    def _given_up(self, retried: _Retried) -> bool:
        if retried.reason is Rejection.MODEL_ERROR:
            return retried.attempts >= self._config.max_model_attempts
        return time.monotonic() - retried.since >= self._config.key_service_wait_s

    def _failed(self, record: RawRecord, error: ModelBackendError | KeyServiceUnavailableError) -> None:
        """Counts a retryable failure against the record: past its bound, the record is dead-lettered."""
        reason = Rejection.MODEL_ERROR if isinstance(error, ModelBackendError) else Rejection.KEY_SERVICE_UNAVAILABLE
        before = self._retries.get(record.where)
        if before is not None and before.reason is not reason:  # each kind of failure has its own bound
            before = None
        attempts, since = (1, time.monotonic()) if before is None else (before.attempts + 1, before.since)
        if reason is Rejection.MODEL_ERROR:  # the handler keeps the model's last failure for the detail
            detail = f"the model failed {attempts} times"
        else:
            tries = f"{attempts} attempt{'s' if attempts > 1 else ''}"
            detail = f"the key service did not answer {tries} over {time.monotonic() - since:.0f} s; last: {error}"
        self._retries[record.where] = _Retried(attempts, since, reason, detail)

    def _rewind(self, batch: Sequence[Message], to: dict[_Part, int] | None = None) -> None:
        """Seeks each partition of `batch` back to its first record there (or to the offset `to` names).

        The rewind is noted first, so a seek that fails is made again when the partition's records
        come (_rewinds_took). librdkafka refuses (_STATE) a seek on a partition revoked or lost since
        the batch was read: its next owner starts from the committed offset, nothing to rewind.
        """
        for (topic, partition), offset in {**_firsts(batch), **(to or {})}.items():
            self._rewound[topic, partition] = offset
            try:
                self._consumer.seek(TopicPartition(topic, partition, offset))
            except KafkaException as exc:
                _LOG.warning("rewinding %s[%d] to %d failed, left to its next records or owner: %s", topic,
                             partition, offset, exc)  # fmt: skip

    def _rewinds_took(self, batch: list[Message]) -> bool:
        """False, and the batch rewound again, when a partition's records resume past where a rewind sought.

        The record sought to was read before, so after the seek it must come next. Committing a batch
        that starts later would commit past records never handled: a silent loss. A seek is asked of
        the client's fetcher, which may be busy with a leader change when it arrives.
        """
        firsts = _firsts(batch)
        skipped = {p: self._rewound[p] for p, first in firsts.items() if first > self._rewound.get(p, first)}
        for partition in firsts:
            self._rewound.pop(partition, None)
        if not skipped:
            return True
        _LOG.error("a rewind had not taken effect (sought %s, next records at %s); seeking again", skipped,
                   {p: firsts[p] for p in skipped})  # fmt: skip
        self.stats.reseeks += 1
        self._rewind(batch, to=skipped)
        return False

    def _forget_rewinds(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """A (re)assigned or revoked partition restarts from its committed offset: earlier rewinds no longer apply."""
        for tp in partitions:
            self._rewound.pop((tp.topic, tp.partition), None)

    def _one_at_a_time(self, batch: list[Message]) -> list[Message]:
        """A batch whose publication failed for an unknown reason is published record by record until past it."""
        first = batch[0]
        part, offset = _part(first), first.offset() or 0
        last = self._alone.get(part)
        if last is None:
            return batch
        if offset > last:
            del self._alone[part]
            return batch
        if len(batch) > 1:
            self._rewind(batch[1:])
        return batch[:1]

    def _process(self, batch: list[Message]) -> tuple[list[Message], list[Sequence[Output]]]:
        """Runs the handler over the batch, outside any transaction: the records done and each one's outputs.

        Once the batch has used its time (half the poll interval), or the loop is stopping, it takes
        no more records; those left are consumed again by the next batch, so a member never misses its
        poll deadline. A record waits for a free slot before it is taken, so the time check sees the
        model calls already in flight.
        """
        started = time.monotonic()
        slots = threading.BoundedSemaphore(self._config.concurrency)
        taken: list[_Started] = []
        try:
            try:
                for msg in batch:
                    while not slots.acquire(timeout=1.0):
                        self._on_progress()
                    if taken and (time.monotonic() - started > self._config.batch_time_s or self._should_stop()):
                        slots.release()
                        break
                    taken.append(self._launch(raw_record(msg), slots))
            finally:  # never leave a model call running for a batch that is consumed again
                self._await([s.future for s in taken if s.future is not None])
            return batch[: len(taken)], self._finish(taken)
        except BaseException:
            for record in taken:
                if record.deferred is not None:
                    record.deferred.abandon()
            raise

    def _await(self, futures: list[Future[Any]]) -> None:
        """Waits for the model calls in flight, the loop still turning (liveness) while they run."""
        pending = set(futures)
        while pending:
            _, pending = wait(pending, timeout=1.0)
            self._on_progress()

    def _launch(self, record: RawRecord, slot: threading.BoundedSemaphore) -> _Started:
        """Starts `record`; its slow part goes to the pool and gives `slot` back when it ends."""
        try:
            step = self._start(record)
        except BaseException:
            slot.release()
            raise
        if not isinstance(step, Deferred):
            slot.release()
            return _Started(record, outputs=step)
        future = self._pool.submit(step.slow)
        future.add_done_callback(lambda _: slot.release())
        return _Started(record, deferred=step, future=future)

    def _finish(self, taken: list[_Started]) -> list[Sequence[Output]]:
        """Each started record's outputs in input order; raises the first retryable failure."""
        failure: Exception | None = None
        for started in taken:
            error = started.future.exception() if started.future is not None else None
            if isinstance(error, ModelBackendError | KeyServiceUnavailableError):
                self._failed(started.record, error)
                failure = failure or error
            elif isinstance(error, KafkaAdapterError):
                failure = failure or error
            elif error is not None:
                raise error  # the handler's own bug: its slow parts turn bad input into dead letters
        if failure is not None:
            raise failure
        outputs: list[Sequence[Output]] = []
        for started in taken:
            try:
                outputs.append(started.finished())  # sealing its outputs may ask the key service
            except KeyServiceUnavailableError as exc:
                self._failed(started.record, exc)
                raise
            self._retries.pop(started.record.where, None)
            self._on_progress()
        return outputs

    def _publishable(self, record: RawRecord, outputs: Sequence[Output]) -> Sequence[Output]:
        """`outputs`, or what replaces them once they proved unpublishable: the dead letter, then nothing."""
        failures = self._publish_failures.get(record.where, [])
        too_large = oversized(outputs, self._max_record_bytes)
        if too_large is not None and len(failures) < PUBLISH_ATTEMPTS:
            detail = f"an output to {too_large.topic} of {too_large.size()} bytes exceeds the record limit"
            failures = self._publish_failures[record.where] = [detail] * PUBLISH_ATTEMPTS
        if len(failures) < PUBLISH_ATTEMPTS:
            return outputs
        if len(failures) < 2 * PUBLISH_ATTEMPTS:
            reason = Rejection.OVERSIZE if too_large is not None else Rejection.UNPUBLISHABLE
            return [self._handler.dead_letter(record, reason, f"its outputs could not be published: {failures[0]}")]
        _LOG.error("record at %s committed without outputs: neither they nor its dead letter could be published (%s)",
                   record.position, failures[-1])  # fmt: skip
        return []

    def _publish_failed(self, records: Sequence[RawRecord], detail: str) -> None:
        for record in records:
            self._publish_failures.setdefault(record.where, []).append(detail)

    def _commit(self, done: list[Message], outputs: list[Sequence[Output]]) -> None:
        started = time.perf_counter()
        next_offsets: dict[_Part, int] = {}
        for msg in done:
            next_offsets[_part(msg)] = (msg.offset() or 0) + 1
        offsets = [TopicPartition(topic, p, o) for (topic, p), o in next_offsets.items()]
        flat = [out for outs in outputs for out in outs]
        try:
            self._producer.publish(flat, offsets, self._consumer.consumer_group_metadata())
        finally:
            self.stats.producers_replaced = self._producer.stats.replaced
        records = [raw_record(m) for m in done]
        for record, outs in zip(records, outputs, strict=True):
            if self._publish_failures.pop(record.where, None) is not None:
                self.stats.publish_failures += 1
                self.stats.dropped += int(not outs)
        self._handler.committed(records)
        self._backoff_s = self._config.retry_backoff_s
        self.stats.batches += 1
        self.stats.records += len(done)
        self.stats.outputs += len(flat)
        for callback in self.stats.on_batch:
            callback(len(done), time.perf_counter() - started)

    def run_once(self, timeout_s: float = 0.5) -> int:
        """Processes at most one batch; returns how many input records it committed."""
        self._producer.poll()
        batch = self._next_batch(timeout_s)
        if not batch:
            return 0
        self._on_progress()  # positions are known now: the lag probe counts from here
        try:
            done, outputs = self._process(batch)
        except (ModelBackendError, KafkaAdapterError, KeyServiceUnavailableError) as exc:
            _LOG.warning("batch not committed after a transient failure, consumed again: %s", exc)
            self._again(batch)
            return 0
        if len(done) < len(batch):
            self._rewind(batch[len(done) :])
        return self._publish(done, outputs)

    def _next_batch(self, timeout_s: float) -> list[Message]:
        """The first record when one comes and whatever else has arrived: a batch never waits to fill."""
        first: Message | None = None
        try:
            first = self._consumer.poll(timeout_s)
            if first is None:
                return []
            rest = self._consumer.consume(self._config.batch_size - 1, 0) if self._config.batch_size > 1 else []
        except KafkaException as exc:  # the library's own state (a rebalance's assignment), not a record's fault
            if exc.args and isinstance(exc.args[0], KafkaError) and exc.args[0].fatal():
                raise  # this consumer can never go on: the process ends, to be started again
            _LOG.warning("polling failed, trying again: %s", exc)
            if first is not None and self._usable(first):
                self._rewind([first])  # taken from the local queue: read again, never skipped
            self._pause()
            return []
        batch = [m for m in (first, *rest) if self._usable(m)]
        if not batch or not self._rewinds_took(batch):
            return []
        return self._one_at_a_time(batch)

    def _publish(self, done: list[Message], outputs: list[Sequence[Output]]) -> int:
        """Commits the records done with their outputs; what a failure means decides what happens next."""
        records = [raw_record(m) for m in done]
        outputs = [self._publishable(r, outs) for r, outs in zip(records, outputs, strict=True)]
        try:
            self._commit(done, outputs)
        except TransientPublishError as exc:
            _LOG.warning("batch not committed (%s); consumed again", exc)
            self._again(done)
            return 0
        except OutputsRefusedError as exc:
            self._refused(done, records, outputs, exc)
            return 0
        except PublishFailedError as exc:
            self._unpublishable(done, records, str(exc))
            return 0
        return len(done)

    def _again(self, batch: Sequence[Message]) -> None:
        """The batch is consumed again after a pause that doubles, up to MAX_BACKOFF_S, while failures last."""
        self.stats.retries += 1
        self._rewind(batch)
        self._pause()
        self._backoff_s = min(MAX_BACKOFF_S, self._backoff_s * 2)

    def _pause(self) -> None:
        """Sleeps the current backoff, in short steps: a stop request or a liveness check is never kept waiting."""
        until = time.monotonic() + self._backoff_s
        while time.monotonic() < until and not self._should_stop():
            time.sleep(min(0.25, max(0.0, until - time.monotonic())))
            self._on_progress()

    def _refused(self, done: list[Message], records: list[RawRecord], outputs: list[Sequence[Output]],
                 exc: OutputsRefusedError) -> None:  # fmt: skip
        """Outputs the broker refused: each failure counts against the record that made them."""
        self.stats.aborts += 1
        owners: list[RawRecord] = [r for r, outs in zip(records, outputs, strict=True) for _ in outs]
        culprits = {owners[i].where: detail for i, detail in exc.refused.items()}
        _LOG.warning("outputs of %d record(s) refused by Kafka (%s); consumed again", len(culprits), exc)
        for record in records:
            if record.where in culprits:
                self._publish_failed([record], culprits[record.where])
        self._rewind(done)

    def _unpublishable(self, done: list[Message], records: list[RawRecord], detail: str) -> None:
        """A failure that names no output: a record alone is its own culprit; a batch is retried record by record."""
        self.stats.aborts += 1
        _LOG.warning("batch not committed (%s); consumed again", detail)
        if len(records) == 1:
            self._publish_failed(records, detail)
        else:
            for msg in done:
                self._alone[_part(msg)] = max(self._alone.get(_part(msg), -1), msg.offset() or 0)
        self._rewind(done)

    @staticmethod
    def _usable(msg: Message) -> bool:
        error = msg.error()
        if error is not None:
            _LOG.warning("consumer error: %s", error.str())
            return False
        return True

    def positions(self) -> dict[tuple[str, int], int]:
        """This member's next offset per assigned (topic, partition) that has one (call on the loop's thread)."""
        try:
            assigned = self._consumer.position(self._consumer.assignment())
        except KafkaException as exc:
            _LOG.debug("positions unavailable: %s", exc)
            return {}
        return {(tp.topic, tp.partition): tp.offset for tp in assigned if tp.offset >= 0}

    def run(self, should_stop: Callable[[], bool], on_progress: Callable[[], None] | None = None) -> None:
        """Runs batches until `should_stop()`; then leaves the group cleanly.

        `on_progress` is called on this thread after every record handled, every loop turn and
        every second of waiting for the model, so liveness and the tracked positions move while a
        long batch runs (the consumer stays on one thread; a LagProbe turns the positions into the
        lag gauge from its own). A batch under way when the stop comes takes no further records and
        is committed if it finishes; the caller bounds how long that may take (see lifecycle).
        """
        self._should_stop = should_stop
        if on_progress is not None:
            self._on_progress = on_progress
        self.start()
        try:
            while not should_stop():
                self.run_once()
                self._on_progress()
        finally:
            self.close()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._consumer.close()
        self._producer.close()


# A subscription by pattern (every tenant's own triggers topic) sees a topic created since within this.
PATTERN_REFRESH_MS = 10_000


def _discovery(config: LoopConfig) -> dict[str, int]:
    """A pattern is matched against metadata, which librdkafka refreshes every 5 minutes by default: too late."""
    return {"topic.metadata.refresh.interval.ms": PATTERN_REFRESH_MS} if config.input_topic.startswith("^") else {}


def _membership(config: LoopConfig) -> dict[str, str | int]:
    """How the consumer takes part in its group.

    Under the classic protocol the member sets its session timeout and heartbeats; under KIP-848's
    consumer protocol the broker owns both (group.consumer.session.timeout.ms) and the client must
    not set them.
    """
    if config.group_protocol == "consumer":
        return {"group.protocol": "consumer"}
    return {"session.timeout.ms": config.session_timeout_ms,
            "heartbeat.interval.ms": max(500, config.session_timeout_ms // 5)}  # fmt: skip


_Part = tuple[str, int]  # an input partition: topic (one, or a tenant's own each) and partition


def _part(msg: Message) -> _Part:
    return msg.topic() or "", msg.partition() or 0


def _firsts(batch: Sequence[Message]) -> dict[_Part, int]:
    """Each partition's first (lowest) offset in a batch, which holds each partition's records in order."""
    firsts: dict[_Part, int] = {}
    for msg in batch:
        firsts.setdefault(_part(msg), msg.offset() or 0)
    return firsts
