"""One writer per case: a case's events appended in transactions under a transactional id of its own.

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
(an idempotency key) returns the positions of the first write. A keyed batch's records also carry
the fingerprint of the request (core/idempotency.py), so the same key with other events is
refused (BatchReusedError), by this process or by any that reads the head later.

Producers outside this library (`dpm produce`, another language's client) are not fenced: a case
must be written through one or the other.

Decision requests are not events: a case's triggers go through one idempotent producer the
process's writers share (kafka/writing/trigger_sender.py), listing the case's events as its writer knows
them, or, for a case this process has no writer of, as committed when asked (read, not registered).

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
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TypeVar

from confluent_kafka import Consumer, KafkaException, TopicPartition

from pipeline.core.event_log import RawRecord, ReadResult
from pipeline.core.events import CaseRef, Event, LogPosition
from pipeline.core.idempotency import decision_fingerprint
from pipeline.kafka.cluster.admin import reader_group, topic_partitions
from pipeline.kafka.cluster.partitioning import case_partition
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.errors import BrokerUnavailableError, KafkaAdapterError, wrapped
from pipeline.kafka.processing.steps import Output, max_record_bytes, oversized
from pipeline.kafka.reading.range_reads import read_range
from pipeline.kafka.writing.trigger_sender import TriggerSender
from pipeline.kafka.writing.txn_producer import (
    CommitOutcomeUnknownError,
    ProducerFencedError,
    TransactionalProducer,
    TransientPublishError,
)
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
REQUEST_HEADER = "dpm_request"  # the fingerprint of the keyed append a record was written by
_KEPT_BATCHES = 1_000  # batch ids a writer remembers per case (idempotent retries within them)
_T = TypeVar("_T")


class CaseWriterConflictError(KafkaAdapterError):
    """Another writer took the case over: nothing of this call was written."""

    @classmethod
    def of(cls, case: CaseRef) -> CaseWriterConflictError:
        return cls(f"case {case.key}: another writer took it over; nothing of this append was written. "
                   "Appending again takes the case back and continues after the other writer's events.")  # fmt: skip


class BatchReusedError(KafkaAdapterError):
    """A batch id (an idempotency key) already names an append of other events: nothing of this call was written."""

    @classmethod
    def of(cls, case: CaseRef) -> BatchReusedError:
        return cls(f"case {case.key}: this idempotency key was used before for an append of other events; nothing "
                   "was written. Retry with the same events, or use a new key for new events.")  # fmt: skip


class SeqMismatchError(KafkaAdapterError):
    """The case's last seq is not the one the append expected: nothing of it was written."""

    def __init__(self, message: str, *, current: int = 0) -> None:
        super().__init__(message)
        self.current = current  # the case's last seq when the append was refused

    def __reduce__(self) -> tuple[type[SeqMismatchError], tuple[str]]:
        return type(self), (str(self),)

    @classmethod
    def of(cls, case: CaseRef, expected: int, current: int) -> SeqMismatchError:
        return cls(f"case {case.key}: its last seq is {current}, not the {expected} this append expected; nothing "
                   "was written. Read the case's new events, then append after them.", current=current)  # fmt: skip


class EventTooLargeError(KafkaAdapterError):
    """An event too large to send as one record (sealed, with its headers): nothing of its batch was written."""

    def __init__(self, message: str, *, index: int = 0, size: int = 0, limit: int = 0) -> None:
        super().__init__(message)
        self.index, self.size, self.limit = index, size, limit  # the event's place in its batch (0-based)

    def __reduce__(self) -> tuple[type[EventTooLargeError], tuple[str]]:
        return type(self), (str(self),)


@dataclass
class Batch:
    """One committed append: where its events are, and its request's fingerprint (None: written without a key)."""

    positions: list[LogPosition] = field(default_factory=list)
    fingerprint: str | None = None

    def answers(self, items: Sequence[tuple[str, str]], fingerprint: str | None) -> bool:
        """Whether this batch is the append asked again (records of older releases carry no fingerprint)."""
        if self.fingerprint is not None and fingerprint is not None:
            return self.fingerprint == fingerprint
        return len(self.positions) == len(items)


@dataclass(frozen=True)
class SentTrigger:
    """A decision request sent for a case: where it is, and its fingerprint (core/idempotency.py)."""

    position: LogPosition
    fingerprint: str


@dataclass
class CaseHead:
    """What a case's log holds when its writer registered, kept current by the writer's own appends."""

    positions: list[LogPosition] = field(default_factory=list)  # of seq 1..n, in order
    batches: OrderedDict[str, Batch] = field(default_factory=OrderedDict)  # batch id -> the batch
    triggers: dict[str, SentTrigger] = field(default_factory=dict)  # trigger id -> the request sent

    @property
    def last_seq(self) -> int:
        return len(self.positions)

    def add_batch(self, batch_id: str, batch: Batch) -> None:
        self.batches[batch_id] = batch
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
        self._max_bytes = max_record_bytes(client_config)
        self._registered: int | None = None  # the producer generation the head was read for
        self.head = CaseHead()
        self._lock = threading.Lock()  # one call at a time: each numbers its events after the last one's

    def _ready(self, timeout_s: float | None = None) -> int:
        """Registers the case's transactional id (fencing any other writer) and reads the head when it is new."""
        generation = self._producer.ready(timeout_s)
        if generation != self._registered:
            self.head = read_head(self._config, self._names, self.case, self._partitions)
            self._registered = generation
        return generation

    def append(self, items: Sequence[tuple[str, str]], *, batch_id: str | None = None,
               fingerprint: str | None = None, opening: CaseOpening | None = None, expected_seq: int | None = None,
               timeout_s: float = 60.0) -> Appended:  # fmt: skip
        """Appends (kind, text) events after the case's last, in one transaction; returns their positions.

        `batch_id` names the append (a caller's idempotency key), `fingerprint` its request: the same
        id again with the same request returns the first write's positions, with another raises
        BatchReusedError. `expected_seq`: the case's last seq the caller saw (0: no events yet);
        another raises SeqMismatchError, checked after the batch id (a retry gets its first answer).
        Raises CaseWriterConflictError when another writer fenced this one, BrokerUnavailableError
        when the broker did not take the batch within `timeout_s` (nothing of it written either way,
        unless its message says the commit was sent and not answered),
        InvalidEventError or SchemaError for an event that is not valid, EventTooLargeError for one
        too large to send (nothing sent).
        """
        batch = Batch(fingerprint=fingerprint)
        batch_id = batch_id or uuid.uuid4().hex
        deadline = time.monotonic() + timeout_s
        once = partial(self._append_once, items, batch_id, batch, opening=opening, expected_seq=expected_seq,
                       deadline=deadline)  # fmt: skip
        return self._retried(once, timeout_s)

    def _append_once(self, items: Sequence[tuple[str, str]], batch_id: str, batch: Batch, *,
                     opening: CaseOpening | None, expected_seq: int | None, deadline: float) -> Appended:  # fmt: skip
        # Each transactional call gets what is left of the caller's time (a second at least), not 30 s.
        generation = self._ready(_left(deadline))
        done = self.head.batches.get(batch_id)
        if done is not None:
            if not done.answers(items, batch.fingerprint):
                raise BatchReusedError.of(self.case)
            return Appended(tuple(done.positions), self._seq_of(done.positions[0]), written=False)
        if expected_seq is not None and expected_seq != self.head.last_seq:
            raise SeqMismatchError.of(self.case, expected_seq, self.head.last_seq)
        first = self.head.last_seq + 1
        events = [Event(self.case, first + i, kind, text) for i, (kind, text) in enumerate(items)]
        outputs = self._event_outputs(events, batch_id, batch.fingerprint, opening)
        self._check_sizes(outputs, first)
        positions = self._producer.publish(outputs, generation=generation, call_timeout_s=_left(deadline))
        self.head.positions.extend(positions)
        self.head.add_batch(batch_id, Batch(positions, batch.fingerprint))
        return Appended(tuple(positions), first, written=True)

    def _check_sizes(self, outputs: Sequence[Output], first_seq: int) -> None:
        too_large = oversized(outputs, self._max_bytes)
        if too_large is not None:
            index, size = outputs.index(too_large), too_large.size()
            raise EventTooLargeError(f"case {self.case.key}: event {first_seq + index} (number {index + 1} of the "
                                     f"batch) takes {size} bytes as a record, over the limit of {self._max_bytes}; "
                                     "nothing of the batch was written", index=index, size=size,
                                     limit=self._max_bytes)  # fmt: skip

    def _seq_of(self, position: LogPosition) -> int:
        return self.head.positions.index(position) + 1

    def _event_outputs(self, events: Sequence[Event], batch_id: str, fingerprint: str | None,
                       opening: CaseOpening | None) -> list[Output]:  # fmt: skip
        partition = case_partition(self.case, self._partitions[self._names.events])
        marks: tuple[tuple[str, bytes], ...] = ((BATCH_HEADER, batch_id.encode()),)
        if fingerprint is not None:
            marks += ((REQUEST_HEADER, fingerprint.encode()),)
        return [Output(self._names.events, e.key.encode(), value, (*self._headers(SchemaId.EVENT, e.key), *marks),
                       partition)
                for e, value in sealed_values(events, opening, self._cipher)]  # fmt: skip

    def _headers(self, schema: SchemaId, record_id: str) -> tuple[tuple[str, bytes], ...]:
        return standard_headers(schema, source=SOURCE, event_id=record_id, tenant=self.case.tenant)

    @property
    def registered(self) -> bool:
        """Whether the head was ever read (it then holds every event this writer or an earlier one committed)."""
        return self._registered is not None

    def note_trigger(self, trigger_id: str, sent: SentTrigger) -> None:
        """Records a decision request sent for the case (CaseWriters sends them), so the same id is not sent twice.

        Called on the trigger producer's report thread, which must never wait for an append in
        progress: no lock (one dict item set; a head read again at registration replaces the dict).
        """
        self.head.triggers[trigger_id] = sent

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
                    raise BrokerUnavailableError(f"case {self.case.key}: {_unconfirmed(exc, timeout_s)}") from exc
                _LOG.debug("case %s: write not committed (%s), trying again", self.case.key, exc)
                time.sleep(pause)
                pause = min(pause * 2, 5.0)

    def close(self) -> None:
        self._producer.close()


def _unconfirmed(exc: TransientPublishError, timeout_s: float) -> str:
    """What an append the broker did not confirm in time tells its caller: written or not, and what to do."""
    said = f"the broker did not take the write in {timeout_s:g} s ({exc})"
    if isinstance(exc, CommitOutcomeUnknownError):  # the next registration would tell; the caller's time is up
        return (f"{said}; its commit was sent and not confirmed, so it may have been written: retry with the same "
                "idempotency key, which never writes it twice")  # fmt: skip
    return f"{said}; nothing of it was written"


def _left(deadline: float) -> float:
    """The seconds left before `deadline`, at least one (a transactional call needs a moment to answer)."""
    return max(1.0, deadline - time.monotonic())


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
        headers = dict(record.headers)
        batch_id = headers.get(BATCH_HEADER)
        if batch_id is not None:
            batch = head.batches.setdefault(batch_id.decode("utf-8", "replace"), Batch())
            batch.positions.append(record.position)
            fingerprint = headers.get(REQUEST_HEADER)
            batch.fingerprint = fingerprint.decode("ascii", "replace") if fingerprint is not None else None
    while len(head.batches) > _KEPT_BATCHES:
        head.batches.popitem(last=False)
    topic = names.triggers
    for record in _case_records(client_config, topic, case_partition(case, partitions[topic]), case, exact=True):
        request = _request(record)
        if request is not None:
            head.triggers[request.trigger_id] = SentTrigger(record.position, request_fingerprint(request))
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


def _request(record: RawRecord) -> DecisionRequest | None:
    """The decision request a trigger record holds; None for one a worker would dead-letter (never decided)."""
    try:
        return DecisionRequest.from_wire(decode_object(record.value, "trigger"))
    except RejectedError:
        return None


def request_fingerprint(request: DecisionRequest) -> str:
    """A decision request's idempotency fingerprint: what it asks, not which events it lists."""
    return decision_fingerprint(request.task, request.budget_chars, request.architectures)


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
        raise wrapped(exc, f"reading case {case.key} from {topic}[{partition}] failed") from exc
    finally:
        consumer.close()
    if exact:
        return [r for r in found if r.value]
    latest = {r.key: r for r in found}  # a later record of a key replaces it, a tombstone (erasure) removes it
    return sorted((r for r in latest.values() if r.value), key=lambda r: r.position)


@dataclass(frozen=True)
class KnownCase:
    """A case's events and the decision requests sent for it, as a client knows them when it asks for a decision."""

    positions: tuple[LogPosition, ...]
    triggers: dict[str, SentTrigger]


class CaseWriters:
    """The writers of a process's recent cases, and the one producer every case's decision requests share.

    Writers are made on first use, the least recently used closed first. Thread-safe.
    """

    def __init__(self, client_config: dict[str, str], names: TopicNames, cipher: CaseCipher | None,
                 capacity: int = 64) -> None:  # fmt: skip
        self._config, self._names, self._cipher, self._capacity = client_config, names, cipher, capacity
        self._writers: OrderedDict[CaseRef, CaseWriter] = OrderedDict()
        self._partitions: dict[str, int] | None = None  # asked of the cluster at the first use, not at every case
        self._sender: TriggerSender | None = None
        self._lock = threading.Lock()

    def _partition_counts(self) -> dict[str, int]:
        if self._partitions is None:
            self._partitions = {t: topic_partitions(self._config, t) for t in (self._names.events,
                                                                               self._names.triggers)}  # fmt: skip
        return self._partitions

    def __call__(self, case: CaseRef) -> CaseWriter:
        evicted: list[CaseWriter] = []
        with self._lock:
            writer = self._writers.get(case)
            if writer is None:
                writer = self._writers[case] = CaseWriter(self._config, self._names, case, self._cipher,
                                                          self._partition_counts())  # fmt: skip
                while len(self._writers) > self._capacity:
                    evicted.append(self._writers.popitem(last=False)[1])
            self._writers.move_to_end(case)
        for old in evicted:  # outside the lock: a producer's close may wait, and known_here runs on event loops
            old.close()
        return writer

    def forget(self, case: CaseRef) -> None:
        """Closes the case's writer, if this process has one (the case was erased: its head is of no more use)."""
        with self._lock:
            writer = self._writers.pop(case, None)
        if writer is not None:  # outside the lock, as an evicted writer's close
            writer.close()

    def known(self, case: CaseRef) -> KnownCase:
        """The case as this process's writer of it knows it; for a case it has no writer of, as committed now.

        The first needs no broker (a decision asked while it is away waits for it, not for a new
        registration); the second reads the case's partitions without registering a writer: asking
        for a decision fences nobody.
        """
        known = self.known_here(case)
        if known is not None:
            return known
        return self.committed(case)

    def committed(self, case: CaseRef) -> KnownCase:
        """The case as committed now, read from its partitions (a writer's head misses what others requested)."""
        with self._lock:
            partitions = self._partition_counts()
        head = read_head(self._config, self._names, case, partitions)
        return KnownCase(tuple(head.positions), head.triggers)

    def known_here(self, case: CaseRef) -> KnownCase | None:
        """The case as this process's registered writer of it knows it (no broker call); None without one."""
        with self._lock:
            writer = self._writers.get(case)
        if writer is None or not writer.registered:
            return None
        head = writer.head  # as its own appends left it: no broker call
        return KnownCase(tuple(head.positions), dict(head.triggers))

    def send_trigger(self, request: DecisionRequest) -> Future[LogPosition]:
        """Sends a decision request on the case's partition of the triggers topic; its future completes when acked."""
        topic = self._names.triggers
        headers = standard_headers(SchemaId.TRIGGER, source=SOURCE, event_id=request.trigger_id,
                                   tenant=request.case.tenant)  # fmt: skip
        with self._lock:
            output = Output(topic, request.case.key.encode(), request.encode(), headers,
                            case_partition(request.case, self._partition_counts()[topic]))  # fmt: skip
            if self._sender is None:
                self._sender = TriggerSender(self._config)
            sent = self._sender.send(output)
            writer = self._writers.get(request.case)
        if writer is not None:
            sent.add_done_callback(partial(_note_sent, writer, request))
        return sent

    def close(self) -> None:
        with self._lock:
            for writer in self._writers.values():
                writer.close()
            self._writers.clear()
            if self._sender is not None:
                self._sender.close()
                self._sender = None


def _note_sent(writer: CaseWriter, request: DecisionRequest, sent: Future[LogPosition]) -> None:
    if sent.exception() is None:
        writer.note_trigger(request.trigger_id, SentTrigger(sent.result(), request_fingerprint(request)))
