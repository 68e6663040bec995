"""Exactly-once consume-transform-produce: outputs and the input offsets commit in one transaction."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition

from pipeline.core.event_log import RawRecord
from pipeline.core.events import LogPosition
from pipeline.core.model import ModelBackendError
from pipeline.kafka.errors import KafkaAdapterError
from pipeline.kafka.range_reads import raw_record

_LOG = logging.getLogger("pipeline.kafka.transactions")
_LIB_LOG = logging.getLogger("pipeline.kafka.librdkafka")


@dataclass(frozen=True)
class Output:
    """One record to publish inside the transaction."""

    topic: str
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()


_Result = TypeVar("_Result")


@dataclass(frozen=True)
class Deferred(Generic[_Result]):
    """A record's slow part (model calls), which may run on another thread, and what turns its result into outputs.

    `slow` must not touch the consumer, the producer or anything else the loop's thread uses;
    `finish` runs back on the loop's thread, in input order.
    """

    slow: Callable[[], _Result]
    finish: Callable[[_Result], Sequence[Output]]
    # Called instead of `finish` when the batch is consumed again (another record's failure, say).
    abandon: Callable[[], None] = lambda: None

    def run_inline(self) -> Sequence[Output]:
        return self.finish(self.slow())


Step = Sequence[Output] | Deferred[Any]


def run_inline(step: Step) -> Sequence[Output]:
    """The outputs of `step`, its slow part run on this thread."""
    return step.run_inline() if isinstance(step, Deferred) else step


class Handler(Protocol):
    """Turns one input record into outputs; bad input becomes a dead letter, never an exception."""

    def start(self, record: RawRecord) -> Step:
        """Outputs for `record`, or the deferred work that makes them (called in input order on the loop's thread).

        Raises ModelBackendError or KafkaAdapterError only for a failure worth retrying; so may a
        Deferred's `slow` part.
        """
        ...

    def dead_letter(self, record: RawRecord, detail: str) -> Output:
        """The dead letter for a record whose processing kept failing (model or log unavailable)."""
        ...

    def committed(self, records: Sequence[RawRecord]) -> None:
        """Called once the outputs of `records` are committed (metrics count committed work only)."""
        ...


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
    retry_backoff_s: float = 2.0
    concurrency: int = 1  # records of a batch whose slow parts (model calls) run at once
    group_protocol: str = "classic"  # or "consumer": KIP-848, the broker assigns and times out members


@dataclass
class LoopStats:
    """Counters the metrics layer reads."""

    batches: int = 0
    records: int = 0
    outputs: int = 0
    aborts: int = 0  # transactions aborted
    retries: int = 0  # batches consumed again after a transient failure, before any transaction began
    producers_replaced: int = 0
    reseeks: int = 0  # rewinds that had not taken effect when the next batch came, so were made again
    on_batch: list[Callable[[int, float], None]] = field(default_factory=list)


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
    """

    def __init__(self, client_config: dict[str, str], config: LoopConfig, handler: Handler) -> None:
        self._config = config
        self._handler = handler
        self._attempts: dict[LogPosition, int] = {}
        self._on_progress: Callable[[], None] | None = None
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
            },
            logger=_LIB_LOG,
        )
        self._producer_config = {
            **client_config,
            "transactional.id": config.transactional_id,
            "transaction.timeout.ms": config.transaction_timeout_ms,
            "linger.ms": 5,
        }
        self._producer = Producer(self._producer_config, logger=_LIB_LOG)
        self._pool = ThreadPoolExecutor(max_workers=config.concurrency, thread_name_prefix="model-call")
        # partition -> offset a rewind sought to, until the partition's next batch shows that it took
        self._rewound: dict[int, int] = {}

    def start(self) -> None:
        try:
            self._producer.init_transactions(30)
            self._consumer.subscribe([self._config.input_topic], on_assign=self._forget_rewinds,
                                     on_revoke=self._forget_rewinds, on_lost=self._forget_rewinds)  # fmt: skip
        except KafkaException as exc:
            raise KafkaAdapterError(f"worker could not join {self._config.group_id}: {exc}") from exc

    def _replace_producer(self, reason: str) -> None:
        """A fenced or otherwise fatal producer cannot be used again: a new one takes its place.

        Its init_transactions bumps the epoch, which aborts whatever the old one left open.
        """
        _LOG.warning("transactional producer replaced after a fatal error: %s", reason)
        self.stats.producers_replaced += 1
        self._producer = Producer(self._producer_config, logger=_LIB_LOG)
        try:
            self._producer.init_transactions(30)
        except KafkaException as exc:
            raise KafkaAdapterError(f"could not start a new transactional producer: {exc}") from exc

    def _start(self, record: RawRecord) -> Step:
        if self._attempts.get(record.position, 0) >= self._config.max_model_attempts:
            detail = f"processing failed {self._attempts.pop(record.position)} times (model or event log)"
            return [self._handler.dead_letter(record, detail)]
        try:
            return self._handler.start(record)
        except (ModelBackendError, KafkaAdapterError):
            self._failed(record)
            raise

    def _failed(self, record: RawRecord) -> None:
        self._attempts[record.position] = self._attempts.get(record.position, 0) + 1

    def _rewind(self, batch: list[Message], to: dict[int, int] | None = None) -> None:
        """Seeks each partition of `batch` back to its first record there (or to the offset `to` names)."""
        for partition, offset in {**_firsts(batch), **(to or {})}.items():
            self._consumer.seek(TopicPartition(self._config.input_topic, partition, offset))
            self._rewound[partition] = offset

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
            self._rewound.pop(tp.partition, None)

    def _process(self, batch: list[Message]) -> tuple[list[Message], list[Output]]:
        """Runs the handler over the batch, outside any transaction: the records done and their outputs.

        Once the batch has used its time (half the poll interval) it takes no more records; those
        left are consumed again by the next batch, so a member never misses its poll deadline.
        A record waits for a free slot before it is taken, so the time check sees the model calls
        already in flight.
        """
        started = time.monotonic()
        slots = threading.BoundedSemaphore(self._config.concurrency)
        taken: list[_Started] = []
        try:
            try:
                for msg in batch:
                    slots.acquire()
                    if taken and time.monotonic() - started > self._config.batch_time_s:
                        slots.release()
                        break
                    taken.append(self._launch(raw_record(msg), slots))
            finally:  # never leave a model call running for a batch that is consumed again
                wait([s.future for s in taken if s.future is not None])
            return batch[: len(taken)], self._finish(taken)
        except BaseException:
            for record in taken:
                if record.deferred is not None:
                    record.deferred.abandon()
            raise

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

    def _finish(self, taken: list[_Started]) -> list[Output]:
        """The outputs of the started records in input order; raises the first retryable failure."""
        failure: Exception | None = None
        for started in taken:
            error = started.future.exception() if started.future is not None else None
            if isinstance(error, (ModelBackendError, KafkaAdapterError)):
                self._failed(started.record)
                failure = failure or error
            elif error is not None:
                raise error  # the handler's own bug: its slow parts turn bad input into dead letters
        if failure is not None:
            raise failure
        outputs: list[Output] = []
        for started in taken:
            self._attempts.pop(started.record.position, None)
            outputs.extend(started.finished())
            if self._on_progress is not None:
                self._on_progress()
        return outputs

    def _commit(self, done: list[Message], outputs: list[Output]) -> None:
        started = time.perf_counter()
        self._producer.begin_transaction()
        for out in outputs:
            self._producer.produce(out.topic, value=out.value, key=out.key, headers=list(out.headers))
        next_offsets: dict[int, int] = {}
        for msg in done:
            next_offsets[msg.partition() or 0] = (msg.offset() or 0) + 1
        offsets = [TopicPartition(self._config.input_topic, p, o) for p, o in next_offsets.items()]
        self._producer.send_offsets_to_transaction(offsets, self._consumer.consumer_group_metadata(), 30)
        self._producer.commit_transaction(60)
        self._handler.committed([raw_record(m) for m in done])
        self.stats.batches += 1
        self.stats.records += len(done)
        self.stats.outputs += len(outputs)
        for callback in self.stats.on_batch:
            callback(len(done), time.perf_counter() - started)

    def run_once(self, timeout_s: float = 0.5) -> int:
        """Processes at most one batch; returns how many input records it committed."""
        # A batch never waits to fill: it is the first record, when one comes, and whatever else has arrived.
        first = self._consumer.poll(timeout_s)
        if first is None:
            return 0
        rest = self._consumer.consume(self._config.batch_size - 1, 0) if self._config.batch_size > 1 else []
        batch = [m for m in (first, *rest) if self._usable(m)]
        if not batch or not self._rewinds_took(batch):
            return 0
        if self._on_progress is not None:  # positions are known now: the lag probe counts from here
            self._on_progress()
        try:
            done, outputs = self._process(batch)
        except (ModelBackendError, KafkaAdapterError) as exc:
            _LOG.warning("batch not committed after a transient failure, consumed again: %s", exc)
            self.stats.retries += 1
            self._rewind(batch)
            time.sleep(self._config.retry_backoff_s)
            return 0
        if len(done) < len(batch):
            self._rewind(batch[len(done) :])
        try:
            self._commit(done, outputs)
        except KafkaException as exc:
            error = exc.args[0]
            if error.fatal() or not (error.txn_requires_abort() or error.retriable()):
                self.stats.aborts += 1
                self._replace_producer(error.str())
                self._rewind(done)
                return 0
            _LOG.warning("transaction aborted (%s); batch will be consumed again", error.str())
            self._abort(done)
            return 0
        return len(done)

    def _abort(self, batch: list[Message]) -> None:
        self.stats.aborts += 1
        try:
            self._producer.abort_transaction(30)
        except KafkaException as exc:
            self._replace_producer(f"abort failed: {exc.args[0].str()}")
        self._rewind(batch)

    @staticmethod
    def _usable(msg: Message) -> bool:
        error = msg.error()
        if error is not None:
            _LOG.warning("consumer error: %s", error.str())
            return False
        return True

    def positions(self) -> dict[int, int]:
        """This member's next offset per assigned partition that has one (call on the loop's thread)."""
        try:
            assigned = self._consumer.position(self._consumer.assignment())
        except KafkaException as exc:
            _LOG.debug("positions unavailable: %s", exc)
            return {}
        return {tp.partition: tp.offset for tp in assigned if tp.offset >= 0}

    def run(self, should_stop: Callable[[], bool], on_progress: Callable[[], None] | None = None) -> None:
        """Runs batches until `should_stop()`; then leaves the group cleanly.

        `on_progress` is called on this thread after every record handled and every loop turn, so
        liveness and the tracked positions move while a long batch runs (the consumer stays on one
        thread; a LagProbe turns the positions into the lag gauge from its own).
        """
        self._on_progress = on_progress
        self.start()
        try:
            while not should_stop():
                self.run_once()
                if on_progress is not None:
                    on_progress()
        finally:
            self.close()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._consumer.close()
        self._producer.flush(10)


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


def _firsts(batch: Sequence[Message]) -> dict[int, int]:
    """Each partition's first (lowest) offset in a batch, which holds each partition's records in order."""
    firsts: dict[int, int] = {}
    for msg in batch:
        firsts.setdefault(msg.partition() or 0, msg.offset() or 0)
    return firsts
