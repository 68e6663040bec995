"""Exactly-once consume-transform-produce: outputs and the input offsets commit in one transaction."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition

from pipeline.core.event_log import RawRecord
from pipeline.core.events import LogPosition
from pipeline.core.model import ModelBackendError
from pipeline.kafka.errors import KafkaAdapterError

_LOG = logging.getLogger("pipeline.kafka.transactions")
_LIB_LOG = logging.getLogger("pipeline.kafka.librdkafka")


@dataclass(frozen=True)
class Output:
    """One record to publish inside the transaction."""

    topic: str
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()


class Handler(Protocol):
    """Turns one input record into outputs; bad input becomes a dead letter, never an exception."""

    def handle(self, record: RawRecord) -> Sequence[Output]:
        """Outputs for `record`; raises ModelBackendError only for a failure worth retrying."""
        ...

    def dead_letter(self, record: RawRecord, detail: str) -> Output:
        """The dead letter for a record whose processing kept failing (model or log unavailable)."""
        ...


@dataclass(frozen=True)
class LoopConfig:
    group_id: str
    input_topic: str
    transactional_id: str
    batch_size: int = 8
    session_timeout_ms: int = 10_000
    transaction_timeout_ms: int = 60_000
    max_model_attempts: int = 3
    retry_backoff_s: float = 2.0


@dataclass
class LoopStats:
    """Counters the metrics layer reads."""

    batches: int = 0
    records: int = 0
    outputs: int = 0
    aborts: int = 0
    on_batch: list[Callable[[int, float], None]] = field(default_factory=list)


def _raw(msg: Message) -> RawRecord:
    return RawRecord(LogPosition(msg.partition() or 0, msg.offset() or 0), msg.key(), msg.value(), msg.timestamp()[1])


class TransactionalLoop:
    """Consumes a batch, runs the handler, and commits outputs with the batch's offsets, or nothing.

    A crash anywhere leaves the transaction uncommitted: its outputs stay invisible to
    read_committed readers and the batch is consumed again by whichever member owns it next.
    """

    def __init__(self, client_config: dict[str, str], config: LoopConfig, handler: Handler) -> None:
        self._config = config
        self._handler = handler
        self._attempts: dict[LogPosition, int] = {}
        self.stats = LoopStats()
        self._consumer = Consumer(
            {
                **client_config,
                "group.id": config.group_id,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "session.timeout.ms": config.session_timeout_ms,
                "heartbeat.interval.ms": max(500, config.session_timeout_ms // 5),
            },
            logger=_LIB_LOG,
        )
        self._producer = Producer(
            {
                **client_config,
                "transactional.id": config.transactional_id,
                "transaction.timeout.ms": config.transaction_timeout_ms,
                "linger.ms": 5,
            },
            logger=_LIB_LOG,
        )

    def start(self) -> None:
        try:
            self._producer.init_transactions(30)
            self._consumer.subscribe([self._config.input_topic])
        except KafkaException as exc:
            raise KafkaAdapterError(f"worker could not join {self._config.group_id}: {exc}") from exc

    def _outputs(self, record: RawRecord) -> Sequence[Output]:
        if self._attempts.get(record.position, 0) >= self._config.max_model_attempts:
            detail = f"processing failed {self._attempts.pop(record.position)} times (model or event log)"
            return [self._handler.dead_letter(record, detail)]
        try:
            outputs = self._handler.handle(record)
        except (ModelBackendError, KafkaAdapterError):
            self._attempts[record.position] = self._attempts.get(record.position, 0) + 1
            raise
        self._attempts.pop(record.position, None)
        return outputs

    def _rewind(self, batch: list[Message]) -> None:
        firsts: dict[int, int] = {}
        for msg in batch:
            firsts.setdefault(msg.partition() or 0, msg.offset() or 0)
        for partition, offset in firsts.items():
            self._consumer.seek(TopicPartition(self._config.input_topic, partition, offset))

    def _commit(self, batch: list[Message]) -> None:
        started = time.perf_counter()
        self._producer.begin_transaction()
        produced = 0
        for msg in batch:
            for out in self._outputs(_raw(msg)):
                self._producer.produce(out.topic, value=out.value, key=out.key, headers=list(out.headers))
                produced += 1
        next_offsets: dict[int, int] = {}
        for msg in batch:
            next_offsets[msg.partition() or 0] = (msg.offset() or 0) + 1
        offsets = [TopicPartition(self._config.input_topic, p, o) for p, o in next_offsets.items()]
        self._producer.send_offsets_to_transaction(offsets, self._consumer.consumer_group_metadata(), 30)
        self._producer.commit_transaction(60)
        self.stats.batches += 1
        self.stats.records += len(batch)
        self.stats.outputs += produced
        for callback in self.stats.on_batch:
            callback(len(batch), time.perf_counter() - started)

    def run_once(self, timeout_s: float = 0.5) -> int:
        """Processes at most one batch; returns how many input records it committed."""
        batch = [m for m in self._consumer.consume(self._config.batch_size, timeout_s) if self._usable(m)]
        if not batch:
            return 0
        try:
            self._commit(batch)
        except (ModelBackendError, KafkaAdapterError) as exc:
            _LOG.warning("batch aborted and retried after a transient failure: %s", exc)
            self._abort(batch)
            time.sleep(self._config.retry_backoff_s)
            return 0
        except KafkaException as exc:
            error = exc.args[0]
            if not error.txn_requires_abort() and not error.retriable():
                raise KafkaAdapterError(f"fatal transaction error: {error.str()}") from exc
            _LOG.warning("transaction aborted (%s); batch will be consumed again", error.str())
            self._abort(batch)
            return 0
        return len(batch)

    def _abort(self, batch: list[Message]) -> None:
        self.stats.aborts += 1
        self._producer.abort_transaction(30)
        self._rewind(batch)

    @staticmethod
    def _usable(msg: Message) -> bool:
        error = msg.error()
        if error is not None:
            _LOG.warning("consumer error: %s", error.str())
            return False
        return True

    def lag(self) -> dict[int, int]:
        """Records between this member's position and the high watermark, per assigned partition."""
        lags: dict[int, int] = {}
        try:
            for tp in self._consumer.position(self._consumer.assignment()):
                _, high = self._consumer.get_watermark_offsets(tp, cached=True)
                if tp.offset >= 0 and high >= 0:
                    lags[tp.partition] = max(0, high - tp.offset)
        except KafkaException as exc:
            _LOG.debug("lag unavailable: %s", exc)
        return lags

    def run(self, should_stop: Callable[[], bool], on_idle: Callable[[], None] | None = None) -> None:
        """Runs batches until `should_stop()`, calling `on_idle` about every 5 s; then leaves the group cleanly."""
        self.start()
        last = 0.0
        try:
            while not should_stop():
                self.run_once()
                if on_idle is not None and time.monotonic() - last > 5:
                    on_idle()
                    last = time.monotonic()
        finally:
            self.close()

    def close(self) -> None:
        self._consumer.close()
        self._producer.flush(10)
