"""One writer per case: a case's events and triggers appended in transactions under a transactional id of its own.

Sequence numbers are the writer's job. When a writer registers the case's transactional id
(`<scope>writer.<tenant>/<case>`), Kafka fences every earlier writer of the case, in this process
or another, and aborts whatever it left open; the writer then reads the case's committed events
from its partition (the head: last seq, positions, recent batch ids, triggers sent) and numbers
what it appends after them. So a restarted process, or a second one, continues the case without
a duplicate or a gap, and a writer that was fenced learns it (CaseWriterConflictError) instead of
forking the log. Writing again after a conflict takes the case back, after the other's events.

Each append is one transaction: a batch is committed whole or not at all. Every record carries
its batch id in a header; a batch retried after an ambiguous failure (the broker away at the
commit) is found in the head and not written twice, and the same id given again by a caller
(an idempotency key) returns the positions of the first write.

Producers outside this library (`dpm produce`, another language's client) are not fenced: a case
must be written through one or the other.

Cost: registering a case reads the case's partition of the events and triggers topics once (the
same read as a scan trigger), per writer; a process keeps the writers of its recent cases.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from confluent_kafka import Consumer, KafkaException, TopicPartition

from pipeline.core.event_log import RawRecord, ReadResult
from pipeline.core.events import CaseRef, Event, LogPosition
from pipeline.kafka.admin import reader_group, topic_partitions
from pipeline.kafka.errors import BrokerUnavailableError, KafkaAdapterError
from pipeline.kafka.partitioning import case_partition
from pipeline.kafka.range_reads import read_range
from pipeline.kafka.steps import Output
from pipeline.kafka.topics import TopicNames
from pipeline.kafka.txn_producer import ProducerFencedError, TransactionalProducer, TransientPublishError
from pipeline.wire.event import CaseOpening, sealed_values
from pipeline.wire.headers import standard_headers
from pipeline.wire.record_keys import claimed_event
from pipeline.wire.rejection import RejectedError, decode_object
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.sealing import CaseCipher
from pipeline.wire.trajectory import own_records
from pipeline.wire.trigger import DecisionRequest

_LOG = logging.getLogger("pipeline.kafka.librdkafka")
SOURCE = "/dpm/client"  # the CloudEvents source of what the client library writes
BATCH_HEADER = "dpm_batch"  # the append (batch) a record was written by
_KEPT_BATCHES = 1_000  # batch ids a writer remembers per case (idempotent retries within them)
_T = TypeVar("_T")


class CaseWriterConflictError(KafkaAdapterError):
    """Another writer took the case over: nothing of this call was written."""

    @classmethod
    def of(cls, case: CaseRef) -> CaseWriterConflictError:
        return cls(f"case {case.key}: another writer took it over; nothing of this append was written. "
                   "Appending again takes the case back and continues after the other writer's events.")  # fmt: skip


@dataclass
class CaseHead:
    """What a case's log holds when its writer registered, kept current by the writer's own appends."""

    positions: list[LogPosition] = field(default_factory=list)  # of seq 1..n, in order
    batches: OrderedDict[str, list[LogPosition]] = field(default_factory=OrderedDict)  # batch id -> its positions
    triggers: dict[str, LogPosition] = field(default_factory=dict)  # trigger id -> where it was sent

    @property
    def last_seq(self) -> int:
        return len(self.positions)

    def add_batch(self, batch_id: str, positions: list[LogPosition]) -> None:
        self.batches[batch_id] = positions
        self.batches.move_to_end(batch_id)
        while len(self.batches) > _KEPT_BATCHES:
            self.batches.popitem(last=False)


@dataclass(frozen=True)
class Appended:
    """Where an append's events are, and whether this call wrote them (False: an earlier call with its id did)."""

    positions: tuple[LogPosition, ...]
    first_seq: int
    written: bool


class CaseWriter:
    """The one writer of a case: appends its events and sends its triggers, each call one transaction."""

    def __init__(self, client_config: dict[str, str], names: TopicNames, case: CaseRef, cipher: CaseCipher | None,
                 partitions: dict[str, int]) -> None:  # fmt: skip
        self.case, self._names, self._cipher, self._config = case, names, cipher, client_config
        self._producer = TransactionalProducer({**client_config, "transactional.id": names.writer_id(case.key),
                                                "enable.idempotence": True, "acks": "all", "linger.ms": 2,
                                                "compression.type": "lz4"})  # fmt: skip
        self._partitions = partitions  # of the events and triggers topics (CaseWriters asks the cluster once)
        self._registered: int | None = None  # the producer generation the head was read for
        self.head = CaseHead()
        self._lock = threading.Lock()  # one call at a time: each numbers its events after the last one's

    def _ready(self) -> int:
        """Registers the case's transactional id (fencing any other writer) and reads the head when it is new."""
        generation = self._producer.ready()
        if generation != self._registered:
            self.head = read_head(self._config, self._names, self.case, self._partitions)
            self._registered = generation
        return generation

    def append(self, items: Sequence[tuple[str, str]], *, batch_id: str | None = None,
               opening: CaseOpening | None = None, timeout_s: float = 60.0) -> Appended:  # fmt: skip
        """Appends (kind, text) events after the case's last, in one transaction; returns their positions.

        Raises CaseWriterConflictError when another writer fenced this one, BrokerUnavailableError
        when the broker did not take the batch within `timeout_s` (nothing of it written either way),
        InvalidEventError or SchemaError for an event that is not valid (nothing sent).
        """
        batch = batch_id or uuid.uuid4().hex
        return self._retried(lambda: self._append_once(items, batch, opening), timeout_s)

    def _append_once(self, items: Sequence[tuple[str, str]], batch: str, opening: CaseOpening | None) -> Appended:
        generation = self._ready()
        done = self.head.batches.get(batch)
        if done is not None:
            return Appended(tuple(done), self._seq_of(done[0]), written=False)
        first = self.head.last_seq + 1
        events = [Event(self.case, first + i, kind, text) for i, (kind, text) in enumerate(items)]
        outputs = self._event_outputs(events, batch, opening)
        positions = self._producer.publish(outputs, generation=generation)
        self.head.positions.extend(positions)
        self.head.add_batch(batch, positions)
        return Appended(tuple(positions), first, written=True)

    def _seq_of(self, position: LogPosition) -> int:
        return self.head.positions.index(position) + 1

    def _event_outputs(self, events: Sequence[Event], batch: str, opening: CaseOpening | None) -> list[Output]:
        partition = case_partition(self.case, self._partitions[self._names.events])
        return [Output(self._names.events, e.key.encode(), value,
                       (*self._headers(SchemaId.EVENT, e.key), (BATCH_HEADER, batch.encode())), partition)
                for e, value in sealed_values(events, opening, self._cipher)]  # fmt: skip

    def _headers(self, schema: SchemaId, record_id: str) -> tuple[tuple[str, bytes], ...]:
        return standard_headers(schema, source=SOURCE, event_id=record_id, tenant=self.case.tenant)

    def trigger(self, request: DecisionRequest, timeout_s: float = 60.0) -> LogPosition:
        """Sends a decision request for the case (one transaction); a trigger id sent before is not sent again."""
        return self._retried(lambda: self._trigger_once(request), timeout_s)

    def _trigger_once(self, request: DecisionRequest) -> LogPosition:
        generation = self._ready()
        sent = self.head.triggers.get(request.trigger_id)
        if sent is not None:
            return sent
        topic = self._names.triggers
        output = Output(topic, self.case.key.encode(), request.encode(),
                        self._headers(SchemaId.TRIGGER, request.trigger_id),
                        case_partition(self.case, self._partitions[topic]))  # fmt: skip
        [position] = self._producer.publish([output], generation=generation)
        self.head.triggers[request.trigger_id] = position
        return position

    def positions(self) -> tuple[LogPosition, ...]:
        """The positions of the case's events 1..n as this writer knows them (registering first if it must)."""
        self._retried(self._ready, 60.0)
        return tuple(self.head.positions)

    def _retried(self, attempt: Callable[[], _T], timeout_s: float) -> _T:
        """`attempt()` until it succeeds, a conflict or a lasting failure, or `timeout_s` passes (the broker away)."""
        deadline, pause = time.monotonic() + timeout_s, 0.2
        while True:
            try:
                with self._lock:
                    return attempt()
            except ProducerFencedError as exc:
                raise CaseWriterConflictError.of(self.case) from exc
            except TransientPublishError as exc:
                if time.monotonic() + pause > deadline:
                    why = f"the broker did not take the write in {timeout_s:g} s ({exc}); nothing of it was written"
                    raise BrokerUnavailableError(f"case {self.case.key}: {why}") from exc
                _LOG.debug("case %s: write not committed (%s), trying again", self.case.key, exc)
                time.sleep(pause)
                pause = min(pause * 2, 5.0)

    def close(self) -> None:
        self._producer.close()


def read_head(client_config: dict[str, str], names: TopicNames, case: CaseRef,
              partitions: dict[str, int]) -> CaseHead:  # fmt: skip
    """The case's committed events (their positions and batch ids) and the trigger ids sent for it, from its partitions.

    Reads the case's partition of the events and the triggers topic to their ends (read_committed:
    after the writer registered, nothing of an earlier writer is still open).
    """
    events = _case_records(client_config, names.events, case_partition(case, partitions[names.events]), case)
    head = CaseHead()
    for seq, record in _numbered(case, events):
        if seq != head.last_seq + 1:
            raise KafkaAdapterError(f"case {case.key}: its events are not numbered 1..n (seq {seq} after "
                                    f"{head.last_seq}); it was written by another producer")  # fmt: skip
        head.positions.append(record.position)
        batch = dict(record.headers).get(BATCH_HEADER)
        if batch is not None:
            head.batches.setdefault(batch.decode("utf-8", "replace"), []).append(record.position)
    while len(head.batches) > _KEPT_BATCHES:
        head.batches.popitem(last=False)
    topic = names.triggers
    for record in _case_records(client_config, topic, case_partition(case, partitions[topic]), case, exact=True):
        trigger_id = _trigger_id(record)
        if trigger_id is not None:
            head.triggers[trigger_id] = record.position
    return head


def _numbered(case: CaseRef, records: Sequence[RawRecord]) -> list[tuple[int, RawRecord]]:
    """The case's own event records by seq, a re-sent event's later copy replacing the earlier (as compaction would)."""
    own, _ = own_records(case, ReadResult(tuple(records)))
    latest: dict[int, RawRecord] = {}
    for record in own.records:
        claimed = claimed_event(decode_object(record.value, "event"))
        if claimed is not None:
            latest[int(claimed[1].rsplit("/", 1)[1])] = record
    return sorted(latest.items())


def _trigger_id(record: RawRecord) -> str | None:
    try:
        value = decode_object(record.value, "trigger")
    except RejectedError:
        return None
    trigger_id = value.get("trigger_id")
    return trigger_id if isinstance(trigger_id, str) else None


def _case_records(client_config: dict[str, str], topic: str, partition: int, case: CaseRef, *,
                  exact: bool = False) -> list[RawRecord]:  # fmt: skip
    """The committed records of a partition keyed under the case (`tenant/case/...`, or exactly `tenant/case`)."""
    consumer = Consumer({**client_config, "group.id": reader_group("writer"), "enable.auto.commit": False,
                         "enable.partition.eof": True, "isolation.level": "read_committed"}, logger=_LOG)  # fmt: skip
    exact_key, prefix = case.key.encode(), f"{case.key}/".encode()
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        if high <= low:
            return []
        found = [replace(r, topic=topic) for r in read_range(consumer, topic, partition, low, last=high - 1,
                                                              timeout_s=10)
                 if r.key and (r.key == exact_key if exact else r.key.startswith(prefix))]  # fmt: skip
    except KafkaException as exc:
        raise KafkaAdapterError(f"reading case {case.key} from {topic}[{partition}] failed: {exc}") from exc
    finally:
        consumer.close()
    if exact:
        return [r for r in found if r.value]
    latest = {r.key: r for r in found}  # a later record of a key replaces it, a tombstone (erasure) removes it
    return sorted((r for r in latest.values() if r.value), key=lambda r: r.position)


class CaseWriters:
    """The writers of a process's recent cases (least recently used closed first), made on first use."""

    def __init__(self, client_config: dict[str, str], names: TopicNames, cipher: CaseCipher | None,
                 capacity: int = 64) -> None:  # fmt: skip
        self._config, self._names, self._cipher, self._capacity = client_config, names, cipher, capacity
        self._writers: OrderedDict[CaseRef, CaseWriter] = OrderedDict()
        self._partitions: dict[str, int] | None = None  # asked of the cluster at the first writer, not at every one

    def __call__(self, case: CaseRef) -> CaseWriter:
        writer = self._writers.get(case)
        if writer is None:
            if self._partitions is None:
                self._partitions = {t: topic_partitions(self._config, t) for t in (self._names.events,
                                                                                   self._names.triggers)}  # fmt: skip
            writer = self._writers[case] = CaseWriter(self._config, self._names, case, self._cipher, self._partitions)
            while len(self._writers) > self._capacity:
                self._writers.popitem(last=False)[1].close()
        self._writers.move_to_end(case)
        return writer

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()
