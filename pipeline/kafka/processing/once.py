"""Publishes each input record's outputs exactly once, for a consumer that commits its input offsets on its own.

The Summ-only baseline consumes with faust, at least once: a record may be delivered again after a
crash or a rebalance, and faust commits the offsets, not us. Exactly-once publication then rests
on two things per input partition p:

- one transactional producer, `<prefix>-<input topic>-<p>`, whose registration (init_transactions)
  fences every earlier producer of that id and aborts whatever it left open;
- a ledger record (topic `ledger_topic`, partition p, key `<input topic>/<p>`) that lists the
  offsets whose outputs are committed, written in the same transaction as those outputs.

The ledger is read (read_committed) after every registration, so what it says is final: a
transaction that committed before the registration is in it, one still open was aborted by it,
and one that would commit later belongs to a producer fenced by it. An offset found there is not
published again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException, TopicPartition

from pipeline.core.events import LogPosition
from pipeline.kafka.cluster.admin import reader_group
from pipeline.kafka.errors import KafkaAdapterError
from pipeline.kafka.processing.steps import Output
from pipeline.kafka.reading.range_reads import read_range, renewed
from pipeline.kafka.writing.txn_producer import TransactionalProducer
from pipeline.wire.headers import standard_headers
from pipeline.wire.ledger import PublishedLedger
from pipeline.wire.rejection import RejectedError
from pipeline.wire.schema_ids import SchemaId

_LOG = logging.getLogger("pipeline.kafka.processing.once")
_LIB_LOG = logging.getLogger("pipeline.kafka.librdkafka")


@dataclass
class _Partition:
    """One input partition's producer and the ledger as read after the producer's latest registration."""

    producer: TransactionalProducer
    ledger: PublishedLedger
    read_at: int = 0  # the producer generation the ledger was read after (0: never)


@dataclass
class OnceStats:
    published: int = 0
    skipped: int = 0  # records found in the ledger: published already (a redelivery)
    ledger_reads: int = field(default=0)


class OncePublisher:
    """Exactly-once publication of each input record's outputs; not thread-safe (call from one thread)."""

    def __init__(self, client_config: dict[str, str], ledger_topic: str, transactional_prefix: str,
                 source: str, call_timeout_s: float = 30.0) -> None:  # fmt: skip
        self._config = client_config
        self._ledger_topic = ledger_topic
        self._prefix = transactional_prefix
        self._source = source  # the CloudEvents source of the ledger records
        self._timeout_s = call_timeout_s
        self._partitions: dict[tuple[str, int], _Partition] = {}
        self._reader = self._connect()
        self.stats = OnceStats()

    def _connect(self) -> Consumer:
        return Consumer(
            {**self._config, "group.id": reader_group("ledger"), "enable.auto.commit": False,
             "isolation.level": "read_committed", "enable.partition.eof": True, "fetch.wait.max.ms": 5},
            logger=_LIB_LOG,
        )  # fmt: skip

    def _partition(self, topic: str, partition: int) -> _Partition:
        """The partition's producer, registered, and its ledger read after that registration."""
        state = self._partitions.get((topic, partition))
        if state is None:
            config = {**self._config, "transactional.id": f"{self._prefix}-{topic}-{partition}", "linger.ms": 0}
            state = _Partition(TransactionalProducer(config, self._timeout_s), PublishedLedger(topic, partition))
            self._partitions[(topic, partition)] = state
        generation = state.producer.ready()
        if state.read_at != generation:
            state.ledger = self._read_ledger(topic, partition)
            state.read_at = generation
        return state

    def _read_ledger(self, topic: str, partition: int) -> PublishedLedger:
        """The partition's latest committed ledger record (an empty ledger when there is none)."""
        latest = PublishedLedger(topic, partition)
        key = latest.key
        self.stats.ledger_reads += 1
        try:
            low, high = self._reader.get_watermark_offsets(TopicPartition(self._ledger_topic, partition), timeout=10)
            if high <= low:
                return latest
            for raw in read_range(self._reader, self._ledger_topic, partition, low, last=high - 1, timeout_s=10):
                if raw.key == key and raw.value is not None:
                    latest = PublishedLedger.decode(raw.value)
        except KafkaException as exc:
            self._reader = renewed(self._reader, self._connect)
            raise KafkaAdapterError(f"reading the ledger {self._ledger_topic}[{partition}] failed: {exc}") from exc
        except RejectedError as exc:
            raise KafkaAdapterError(f"the ledger {self._ledger_topic}[{partition}] holds a bad record: {exc}") from exc
        return latest

    def published(self, topic: str, position: LogPosition) -> bool:
        """Whether the outputs of the record at `position` of `topic` are committed already."""
        return position.offset in self._partition(topic, position.partition).ledger

    def publish(self, topic: str, position: LogPosition, outputs: Sequence[Output]) -> bool:
        """Commits `outputs` with the ledger's new record; False (nothing sent) when they were committed already.

        Raises the TransactionalProducer's errors (TransientPublishError: try again later; OutputsRefusedError,
        PublishFailedError: these outputs will not go), after which nothing of them is committed.
        """
        state = self._partition(topic, position.partition)
        if position.offset in state.ledger:
            self.stats.skipped += 1
            return False
        ledger = state.ledger.with_offset(position.offset)
        headers = standard_headers(SchemaId.LEDGER, source=self._source, tenant=None,
                                   event_id=f"{topic}/{position.partition}/{position.offset}")  # fmt: skip
        record = Output(self._ledger_topic, ledger.key, ledger.encode(), headers, partition=position.partition)
        state.producer.publish([*outputs, record], generation=state.read_at)
        state.ledger = ledger
        self.stats.published += 1
        return True

    def forget(self) -> None:
        """Drops every partition's producer and ledger (after a rebalance): each is registered and read again on use."""
        for state in self._partitions.values():
            state.producer.close()
        self._partitions.clear()

    def close(self) -> None:
        self.forget()
        self._reader.close()
