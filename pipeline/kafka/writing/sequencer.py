"""The one sequencer of an events partition: numbers the appends of every case on it, many per transaction.

Sequence numbers are a partition's job, not a case's. A process writes a partition's events through
one transactional producer whose id names the partition (`<scope>writer.<events topic>.p<N>`), so
the broker keeps one transactional id per partition, not one per case ever written; registering it
fences any other process's sequencer of the partition and aborts what it left open.

Group commit: appends that arrive together, for any cases of the partition, share one
transaction. The sequencer's thread takes what is waiting, waits `linger_s` for more (up to
`max_records` events), checks and numbers each append alone (one refused append fails only its
caller), publishes them all, and answers each caller once the transaction is committed. A batch
is written whole or not at all, and a case's events stay in order.

Heads: before it numbers anything, the sequencer folds what the partition gained since it last
looked (kafka/writing/case_heads.py, stored by kafka/writing/head_store.py): its own last commit,
and whatever another process wrote meanwhile. The fold reads only records not folded yet, so an
append costs the same however long the log is and however many cases it holds. A fence (another
process registered the partition's id: two door replicas appending to the same partition) is
not a conflict: the sequencer registers again, folds the other's events, and numbers after them.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from pipeline.core.errors import DpmError
from pipeline.core.events import CaseRef, Event, LogPosition
from pipeline.core.idempotency import decision_fingerprint
from pipeline.kafka.cluster.admin import reader_group
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.errors import BrokerUnavailableError, KafkaAdapterError
from pipeline.kafka.processing.steps import Output, max_record_bytes, oversized
from pipeline.kafka.writing.case_heads import Batch, CaseHead, SentTrigger
from pipeline.kafka.writing.head_store import Folded, HeadStore
from pipeline.kafka.writing.txn_producer import (
    GRACE_S,
    CommitOutcomeUnknownError,
    OutputsRefusedError,
    ProducerFencedError,
    TransactionalProducer,
    TransientPublishError,
)
from pipeline.keys.providers import KeyServiceError
from pipeline.wire.event import CaseOpening, sealed_values
from pipeline.wire.headers import header_pairs, standard_headers
from pipeline.wire.record_keys import claimed_event
from pipeline.wire.rejection import RejectedError, decode_object
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.sealing import CaseCipher
from pipeline.wire.trigger import DecisionRequest

_LOG = logging.getLogger("pipeline.kafka.writing.sequencer")
_T = TypeVar("_T")
_LIB_LOG = logging.getLogger("pipeline.kafka.librdkafka")
SOURCE = "/dpm/client"  # the CloudEvents source of what the client library writes
BATCH_HEADER = "dpm_batch"  # the append (batch) a record was written by
REQUEST_HEADER = "dpm_request"  # the fingerprint of the keyed append a record was written by
_FOLD_CHUNK = 5_000  # records folded per store transaction while catching up a long partition
_SYNC_EVERY_S = 1.0  # how often a cipher learns the key topic's news (keys made, erasures) before sealing
_READ_FOLD_S = 2.0  # how long a read waits for its fold before it is answered from the heads as last folded
# Reads without requests leave the triggers partition unfolded; it is folded at least this often
# anyway (and when the sequencer idles), so a read with requests folds seconds of them, not hours.
_TRIGGERS_EVERY_S = 1.0
# How long past its own timeout a caller waits for its answer: a transactional call left hung is
# given up on after its timeout and a grace (kafka/writing/txn_producer.py), an abort after it too.
ANSWER_GRACE_S = 2 * GRACE_S + 5.0


def _waited(answer: Future[_T], case: CaseRef, timeout_s: float) -> _T:
    """A job's answer, waited for on this thread: a sequencer that never answers is not waited for forever."""
    try:
        return answer.result(timeout=timeout_s + ANSWER_GRACE_S)
    except FutureTimeout:
        raise unanswered(case, timeout_s) from None


def unanswered(case: CaseRef, timeout_s: float) -> BrokerUnavailableError:
    """What a caller raises when a job's answer did not come within `timeout_s` and ANSWER_GRACE_S."""
    return BrokerUnavailableError(
        f"case {case.key}: no answer within {timeout_s:g} s; an append may have been "
        "written: retry it with the same idempotency key, which never writes it twice"
    )


_CACHED_HEADS = 100_000  # heads a sequencer keeps in memory (then it starts again from the store)


@dataclass(frozen=True)
class GroupCommit:
    """How long a sequencer waits for more appends to share a transaction, and how many events one may hold."""

    linger_s: float = 0.002
    max_records: int = 1_000


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


@dataclass(frozen=True)
class Appended:
    """Where an append's events are, and whether this call wrote them (False: an earlier call with its id did)."""

    positions: tuple[LogPosition, ...]
    first_seq: int
    written: bool


@dataclass(frozen=True)
class KnownCase:
    """A case's events and the decision requests sent for it, as committed when asked."""

    positions: tuple[LogPosition, ...]
    triggers: dict[str, SentTrigger]


@dataclass
class SequencerStats:
    """What a sequencer has done: transactions committed, the appends they held, and event records it read."""

    transactions: int = 0
    appends: int = 0
    events_read: int = 0  # folded from the log: others' records, or its own commits it could not keep at once


@dataclass
class _Append:
    case: CaseRef
    items: Sequence[tuple[str, str]]
    batch_id: str
    fingerprint: str | None
    opening: CaseOpening | None
    expected_seq: int | None
    cipher: CaseCipher | None
    deadline: float
    answer: Future[Appended] = field(default_factory=Future)
    maybe_written: bool = False  # a commit holding it was sent and not answered


@dataclass
class _Read:
    case: CaseRef
    deadline: float
    requests: bool  # the case's decision requests too (else none)
    answer: Future[KnownCase] = field(default_factory=Future)


_Job = _Append | _Read


class PartitionSequencer:
    """Appends to the cases of one events partition, group-committed on a thread of its own."""

    def __init__(self, client_config: dict[str, str], names: TopicNames, partition: int, store: HeadStore,
                 commit: GroupCommit) -> None:  # fmt: skip
        self._config, self._names, self.partition, self._store, self._commit = (client_config, names, partition,
                                                                                store, commit)  # fmt: skip
        self._producer = TransactionalProducer({**client_config, "transactional.id": names.sequencer_id(partition),
                                                "enable.idempotence": True, "acks": "all", "linger.ms": 1,
                                                "compression.type": "lz4"})  # fmt: skip
        # A fetch at the partition's end returns after fetch.wait.max.ms: short, since a fold waits for it.
        self._consumer = Consumer({**client_config, "group.id": reader_group("sequencer"), "enable.auto.commit": False,
                                   "enable.partition.eof": True, "isolation.level": "read_committed",
                                   "auto.offset.reset": "earliest",  # a triggers topic's start is deleted in time
                                   "fetch.wait.max.ms": 10}, logger=_LIB_LOG)  # fmt: skip
        self._max_bytes = max_record_bytes(client_config)
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self.stats = SequencerStats()
        self._closed = False
        # Heads as this sequencer last stored them, valid while the store's folded offsets are the ones it left.
        self._cache: dict[str, CaseHead] = {}
        self._cached_at: dict[str, int] = {}
        self._own_tail: int | None = None  # the folded offset, when it was moved past this process's last commit
        self._triggers_at = 0.0  # when the triggers partition was last folded
        self._triggers_behind = False  # reads without requests came since
        self._synced_at: dict[int, float] = {}  # by id of a cipher: when it last learned the key topic's news
        self._thread = threading.Thread(target=self._run, name=f"sequencer-{names.events}-{partition}", daemon=True)
        self._thread.start()

    # Callers' side

    def append(self, case: CaseRef, items: Sequence[tuple[str, str]], *, batch_id: str, fingerprint: str | None,
               opening: CaseOpening | None, expected_seq: int | None, cipher: CaseCipher | None,
               timeout_s: float) -> Appended:  # fmt: skip
        """Numbers and writes `items` after the case's last event; returns their positions once committed."""
        answer = self.append_soon(case, items, batch_id=batch_id, fingerprint=fingerprint, opening=opening,
                                  expected_seq=expected_seq, cipher=cipher, timeout_s=timeout_s)  # fmt: skip
        return _waited(answer, case, timeout_s)

    def append_soon(self, case: CaseRef, items: Sequence[tuple[str, str]], *, batch_id: str,
                    fingerprint: str | None, opening: CaseOpening | None, expected_seq: int | None,
                    cipher: CaseCipher | None, timeout_s: float) -> Future[Appended]:  # fmt: skip
        """`append`'s answer to come; wait for it no longer than `timeout_s` and ANSWER_GRACE_S (see unanswered)."""
        job = _Append(case, items, batch_id, fingerprint, opening, expected_seq, cipher, time.monotonic() + timeout_s)
        self._queue(job)
        return job.answer

    def known(self, case: CaseRef, timeout_s: float, *, requests: bool = True) -> KnownCase:
        """The case's events and decision requests as committed now (folded first; nothing registered or fenced).

        requests=False: the events only, all a request under a new trigger id (one without an
        idempotency key) needs, since no request sent before can have its id. The triggers partition
        gains a record with every request, so folding it for each would fetch each time, and its
        rows are on disk: 500 requests at once queued on the store's lock.
        """
        return _waited(self.known_soon(case, timeout_s, requests=requests), case, timeout_s)

    def known_soon(self, case: CaseRef, timeout_s: float, *, requests: bool = True) -> Future[KnownCase]:
        """`known`'s answer to come; wait for it no longer than `timeout_s` and ANSWER_GRACE_S (then never)."""
        job = _Read(case, time.monotonic() + timeout_s, requests)
        self._queue(job)
        return job.answer

    def _queue(self, job: _Append | _Read) -> None:
        if self._closed:
            raise KafkaAdapterError(f"case {job.case.key}: this client was closed; nothing was written")
        job.answer.set_running_or_notify_cancel()  # no longer cancellable: the sequencer's thread answers it
        self._jobs.put(job)

    def close(self) -> None:
        self._closed = True
        self._jobs.put(None)
        self._thread.join(30)
        self._producer.close()
        self._consumer.close()

    # The sequencer's thread

    def _run(self) -> None:
        while True:
            try:
                first = self._jobs.get(timeout=_TRIGGERS_EVERY_S if self._triggers_behind else None)
            except queue.Empty:  # idle, with requests not folded: folded now, not by the next read that needs them
                self._catch_up_triggers()
                continue
            if first is None:
                return
            jobs = self._gathered(first)
            try:
                self._serve(jobs)
            except Exception as exc:  # noqa: BLE001 - every caller hears of it; the thread goes on
                _LOG.exception("sequencer of %s[%d] failed", self._names.events, self.partition)
                for job in jobs:
                    _fail(job, exc if isinstance(exc, KafkaAdapterError) else KafkaAdapterError(str(exc)))

    def _gathered(self, first: _Job) -> list[_Job]:
        """`first` and what arrives within the linger, up to the most events a transaction holds."""
        jobs, records = [first], _records(first)
        until = time.monotonic() + self._commit.linger_s
        while records < self._commit.max_records:
            try:
                job = self._jobs.get(timeout=max(0.0, until - time.monotonic()))
            except queue.Empty:
                break
            if job is None:
                self._jobs.put(None)  # close after this group
                break
            jobs.append(job)
            records += _records(job)
        return jobs

    def _serve(self, jobs: list[_Job]) -> None:
        """Answers the reads, then commits the appends; what passes (an outage, a fence) is tried again."""
        reads = [j for j in jobs if isinstance(j, _Read) and not _expired(j)]
        if reads:
            self._answer(reads)
        appends = [j for j in jobs if isinstance(j, _Append)]
        pause = 0.05
        while appends:
            appends = [j for j in appends if not j.answer.done() and not _expired(j)]
            try:
                generation = self._producer.ready(_left(appends)) if appends else None
                self._fold(time.monotonic() + _left(appends), triggers=False)  # appends need no requests
                self._write(appends, generation)
            except ProducerFencedError as exc:  # another process took the partition: take it back, after its events
                _LOG.info("%s[%d]: fenced (%s); registering again", self._names.events, self.partition, exc)
                # Two replicas fencing each other back and forth: a random pause lets one of them commit.
                time.sleep(random.uniform(0.0, 0.05))  # noqa: S311 - jitter, not a secret
                continue
            except (TransientPublishError, BrokerUnavailableError) as exc:
                if isinstance(exc, CommitOutcomeUnknownError):
                    for append in appends:
                        append.maybe_written = True
                _LOG.debug("%s[%d]: not committed (%s), trying again", self._names.events, self.partition, exc)
                if time.monotonic() + pause > max((j.deadline for j in appends), default=0):
                    for append in appends:
                        _fail(append, _unavailable(append, exc))
                    return
            else:
                return
            time.sleep(pause)
            pause = min(pause * 2, 2.0)

    def _answer(self, reads: list[_Read]) -> None:
        """Folds, then answers each read from its case's head.

        With the broker away (for a short while: the thread serves appends too), a case whose head
        this store holds is answered as it was last folded, with this process's own appends, as a
        client that writes a case knows it; a case it holds nothing of is refused as unavailable.
        """
        try:
            triggers = any(r.requests for r in reads) or time.monotonic() - self._triggers_at >= _TRIGGERS_EVERY_S
            self._fold(time.monotonic() + min(_READ_FOLD_S, _left(reads)), triggers=triggers)
            self._triggers_behind = not triggers
        except BrokerUnavailableError as exc:
            _LOG.info("%s[%d]: reading heads as last folded (%s)", self._names.events, self.partition, exc)
            for read in reads:
                if self._stored(read.case.key) is None:
                    _fail(read, BrokerUnavailableError(f"case {read.case.key}: the broker did not answer ({exc})"))
        for read in reads:
            _answer_read(read, self._known)

    def _known(self, case: CaseRef, with_requests: bool) -> KnownCase:
        """The case's events (its events row) and decision requests (its triggers row: each topic folds its own)."""
        head = self._stored(case.key)
        if head is not None and head.broken is not None:
            raise KafkaAdapterError(f"case {case.key}: {head.broken}")
        requests = self._store.head(self._names.triggers, case.key) if with_requests else None
        return KnownCase(head.positions() if head is not None else (),
                         dict(requests.triggers) if requests is not None else {})  # fmt: skip

    def _write(self, appends: list[_Append], generation: int | None) -> None:
        """Numbers each append after its case's head (each checked alone), then commits them all at once."""
        ciphers = {id(job.cipher): job.cipher for job in appends if job.cipher is not None}
        self._sync(ciphers)
        self._prepare(ciphers, appends)
        heads: dict[CaseRef, CaseHead] = {}  # as stored: numbering leaves them as they are (a commit may fail)
        numbered: dict[CaseRef, int] = {}  # seqs this group numbered per case, after its head's
        planned: list[tuple[_Append, int, list[Output]]] = []  # (append, first seq, its outputs)
        pending: dict[tuple[CaseRef, str], _Append] = {}  # batch ids numbered in this group
        repeats: list[tuple[_Append, _Append]] = []  # (a repeat, the append of this group it repeats)
        for job in appends:
            earlier = pending.get((job.case, job.batch_id))
            if earlier is not None:
                if _same_request(earlier, job):
                    repeats.append((job, earlier))
                else:
                    _fail(job, BatchReusedError.of(job.case))
                continue
            head = heads.get(job.case)
            if head is None:
                head = heads[job.case] = self._stored(job.case.key) or CaseHead(self.partition)
            last_seq = head.last_seq + numbered.get(job.case, 0)
            try:
                outputs = self._planned(job, head, last_seq)
            except DpmError as exc:
                _fail(job, exc)
                continue
            if outputs is None:
                continue  # answered from the head: an earlier call with its id wrote it
            planned.append((job, last_seq + 1, outputs))
            pending[(job.case, job.batch_id)] = job
            numbered[job.case] = numbered.get(job.case, 0) + len(outputs)  # the group's next append numbers after
        if not planned:
            return
        outputs = [o for _, _, outs in planned for o in outs]
        try:
            positions = self._producer.publish(outputs, generation=generation, call_timeout_s=_left(appends))
        except OutputsRefusedError as exc:
            self._refused(planned, exc)
            for repeat, _ in repeats:  # asked again next time: the append it repeats is written, or refused
                self._jobs.put(repeat)
            return
        self._committed(planned, repeats, positions)

    def _committed(self, planned: list[tuple[_Append, int, list[Output]]], repeats: list[tuple[_Append, _Append]],
                   positions: list[LogPosition]) -> None:  # fmt: skip
        """Answers every append of a committed transaction, then keeps its heads (best effort: it is committed)."""
        self.stats.transactions += 1
        self.stats.appends += len(planned)
        at = 0
        for job, first, outs in planned:
            job.answer.set_result(Appended(tuple(positions[at : at + len(outs)]), first, written=True))
            at += len(outs)
        for repeat, earlier in repeats:
            done = earlier.answer.result()
            repeat.answer.set_result(Appended(done.positions, done.first_seq, written=False))
        try:
            self._keep_own(planned, positions)
        except Exception:  # noqa: BLE001 - committed and answered: the next fold reads them instead
            _LOG.exception("%s[%d]: keeping the commit's heads failed", self._names.events, self.partition)
            self._cache.clear()
            self._cached_at.clear()
            self._own_tail = None

    def _keep_own(self, planned: list[tuple[_Append, int, list[Output]]], positions: list[LogPosition]) -> None:
        """Folds this commit's own events into the stored heads now, so the next fold need not read them back.

        When they follow the folded offset with nothing between (no other producer wrote meanwhile), the
        folded offset moves past them; the commit's marker after them is then all the partition gained,
        and the next fold reads nothing. Else the offset stays, and the next fold reads them again (no
        change) with what came between.
        """
        events, at = self._names.events, 0
        heads: dict[str, CaseHead | None] = {}
        for job, first, outs in planned:
            head = heads.get(job.case.key) or self._stored(job.case.key) or CaseHead(self.partition)
            for i, position in enumerate(positions[at : at + len(outs)]):
                if first + i == head.last_seq + 1:  # else another process's fold is behind: the next fold catches up
                    head.fold_event(first + i, position.offset, (job.batch_id, job.fingerprint))
            heads[job.case.key] = head
            at += len(outs)
        offsets = sorted(p.offset for p in positions)
        start = self._store.next_offset(events, self.partition)
        # The folded offset at this process's last commit's marker (_own_tail): this commit's events follow it
        # when nothing came between (else another's record would sit at `start`, and the marker after it).
        first = start + 1 if start == self._own_tail else start
        moved = Folded(events, self.partition, start, offsets[-1] + 1)
        # Only with the offset check: heads stored without it could overwrite what another process on the
        # store folded since. When the check fails, or others wrote between, the next fold reads them.
        if offsets == list(range(first, first + len(offsets))) and self._saved(heads, moved):
            self._own_tail = moved.end

    def _sync(self, ciphers: dict[int, CaseCipher]) -> None:
        """Each cipher learns the keys created and destroyed since, at most every _SYNC_EVERY_S.

        Syncing reads the key topic's ends (a round trip per partition, under the key ring's lock):
        per append it capped the whole process's appends. Keys another process created are found
        when a case has none here (CaseKeys syncs on a miss), and erasures reach the client's
        erasure watch within about a second, which refuses the case before it reaches a sequencer.
        """
        now = time.monotonic()
        try:
            for key, cipher in ciphers.items():
                if now - self._synced_at.get(key, 0.0) >= _SYNC_EVERY_S:
                    cipher.sync()
                    self._synced_at[key] = now
        except KafkaAdapterError as exc:  # the key topic not read now: tried again, like the transaction
            raise BrokerUnavailableError(f"reading the key topic failed: {exc}") from exc

    def _prepare(self, ciphers: dict[int, CaseCipher], appends: list[_Append]) -> None:
        """The group's new cases get their data keys in one write of the key topic per cipher, not one each.

        Only a shortcut: when it fails, each new case's key is made as its events are sealed, and a
        failure there fails that append alone, not its whole group.
        """
        for key, cipher in ciphers.items():
            try:
                cipher.prepare(job.case for job in appends if id(job.cipher) == key)
            except (KafkaAdapterError, KeyServiceError) as exc:
                _LOG.info("%s[%d]: new cases' keys not made together (%s); each is made as it is sealed",
                          self._names.events, self.partition, exc)  # fmt: skip

    def _planned(self, job: _Append, head: CaseHead, last_seq: int) -> list[Output] | None:
        """The append's outputs numbered after `last_seq`; None when the head shows it written (its answer is set).

        `last_seq` is the head's, or the last this group numbered for the case: the head is left as stored.
        """
        if head.broken is not None:
            raise KafkaAdapterError(f"case {job.case.key}: {head.broken}")
        done = head.batches.get(job.batch_id)
        if done is not None:
            if not done.answers(len(job.items), job.fingerprint):
                raise BatchReusedError.of(job.case)
            positions = head.positions()[done.first_seq - 1 : done.first_seq - 1 + done.count]
            job.answer.set_result(Appended(positions, done.first_seq, written=False))
            return None
        if job.expected_seq is not None and job.expected_seq != last_seq:
            raise SeqMismatchError.of(job.case, job.expected_seq, last_seq)
        first = last_seq + 1
        events = [Event(job.case, first + i, kind, text) for i, (kind, text) in enumerate(job.items)]
        marks: tuple[tuple[str, bytes], ...] = ((BATCH_HEADER, job.batch_id.encode()),)
        if job.fingerprint is not None:
            marks += ((REQUEST_HEADER, job.fingerprint.encode()),)
        outputs = [Output(self._names.events, e.key.encode(), value,
                          (*standard_headers(SchemaId.EVENT, source=SOURCE, event_id=e.key, tenant=e.case.tenant),
                           *marks), self.partition)
                   for e, value in sealed_values(events, job.opening, job.cipher, synced=True)]  # fmt: skip
        too_large = oversized(outputs, self._max_bytes)
        if too_large is not None:
            index, size = outputs.index(too_large), too_large.size()
            raise EventTooLargeError(f"case {job.case.key}: event {first + index} (number {index + 1} of the batch) "
                                     f"takes {size} bytes as a record, over the limit of {self._max_bytes}; nothing "
                                     "of the batch was written", index=index, size=size,
                                     limit=self._max_bytes)  # fmt: skip
        return outputs

    def _refused(self, planned: list[tuple[_Append, int, list[Output]]], exc: OutputsRefusedError) -> None:
        """Outputs the broker will never take fail their appends; the others are asked again."""
        at, again = 0, []
        for job, _, outs in planned:
            reasons = [exc.refused[i] for i in range(at, at + len(outs)) if i in exc.refused]
            if reasons:
                _fail(job, KafkaAdapterError(f"case {job.case.key}: the broker refused the append: {reasons[0]}; "
                                             "nothing of it was written"))  # fmt: skip
            else:
                again.append(job)
            at += len(outs)
        for job in again:
            self._jobs.put(job)

    # Folding the partition's new records into the heads

    def _fold(self, deadline: float, *, triggers: bool = True) -> None:
        """Folds the partition's events (and decision requests) committed since the store last folded them."""
        topics: list[tuple[str, _Folder]] = [(self._names.events, _fold_event)]
        if triggers:
            topics.append((self._names.triggers, _fold_trigger))
        for topic, fold in topics:
            while not self._fold_some(topic, fold, deadline):
                pass
        if triggers:
            self._triggers_at = time.monotonic()

    def _catch_up_triggers(self) -> None:
        """Folds the decision requests reads without requests left, while nothing waits (best effort)."""
        try:
            while not self._fold_some(self._names.triggers, _fold_trigger, time.monotonic() + _READ_FOLD_S):
                pass
        except Exception:  # noqa: BLE001 - tried again when next idle, and folded by the next read that needs them
            _LOG.warning("%s[%d]: decision requests not folded now", self._names.events, self.partition, exc_info=True)
            return
        self._triggers_at, self._triggers_behind = time.monotonic(), False

    def _fold_some(self, topic: str, fold: _Folder, deadline: float) -> bool:
        """Folds up to a chunk of `topic`'s new records; True once the partition's end was reached."""
        start = self._store.next_offset(topic, self.partition)
        if topic == self._names.events and self._cached_at.get(topic) != start:
            self._cache.clear()  # another process on the store folded past what this one cached
            self._cached_at.clear()
        records, end = self._read(topic, start, deadline)
        if not records and end == start:
            return True
        heads: dict[str, CaseHead | None] = {}
        # Each topic folds rows of its own (a case's events, a case's requests), so that two processes folding
        # the two topics at once never write over each other's: each row is guarded by its topic's offset.
        if topic == self._names.events:
            self.stats.events_read += len(records)
            for msg in records:
                fold(msg, heads, self._stored, self.partition)
            saved = self._saved(heads, Folded(topic, self.partition, start, end))
        else:
            for msg in records:
                fold(msg, heads, lambda key: self._store.head(topic, key), self.partition)
            saved = self._store.save(topic, heads, Folded(topic, self.partition, start, end))
        return saved and len(records) < _FOLD_CHUNK  # not saved: another process folded it; go on from its offset

    def _stored(self, case_key: str) -> CaseHead | None:
        """A case's head as last folded: from this sequencer's cache, else from the store."""
        head = self._cache.get(case_key)
        if head is None:
            head = self._store.head(self._names.events, case_key)
            if head is not None:
                if len(self._cache) >= _CACHED_HEADS:
                    self._cache.clear()
                self._cache[case_key] = head
        return head

    def _saved(self, heads: dict[str, CaseHead | None], folded: Folded | None) -> bool:
        """Stores `heads` (and the fold) and caches them; False, the cache dropped, when another folded first."""
        if not self._store.save(self._names.events, heads, folded):
            self._cache.clear()
            self._cached_at.clear()
            return False
        for key, head in heads.items():
            if head is None:
                self._cache.pop(key, None)
            else:
                self._cache[key] = head
        if folded is not None:
            self._cached_at[folded.topic] = folded.end
        return True

    def _read(self, topic: str, start: int, deadline: float) -> tuple[list[Message], int]:
        """Up to a chunk of committed records of `topic`[partition] from `start`, and the offset to go on from."""
        part = TopicPartition(topic, self.partition, start)
        records: list[Message] = []
        until = max(deadline, time.monotonic() + 1.0)
        try:
            _, high = self._consumer.get_watermark_offsets(part, timeout=max(1.0, until - time.monotonic()))
        except KafkaException as exc:
            raise BrokerUnavailableError(f"reading {topic}[{self.partition}]'s end failed: {exc}") from exc
        if start >= high or (start == self._own_tail and high == start + 1 and topic == self._names.events):
            return records, start  # nothing new, or only the marker of this process's last commit: no fetch
        self._own_tail = None
        self._consumer.assign([part])
        try:
            while len(records) < _FOLD_CHUNK:
                if time.monotonic() > until:
                    raise BrokerUnavailableError(f"reading {topic}[{self.partition}] timed out")
                msg = self._consumer.poll(0.1)
                if msg is None:
                    continue
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        break
                    raise BrokerUnavailableError(f"reading {topic}[{self.partition}] failed: {error.str()}")
                records.append(msg)
            position = self._consumer.position([part])[0].offset
        except KafkaException as exc:
            raise BrokerUnavailableError(f"reading {topic}[{self.partition}] failed: {exc}") from exc
        finally:
            self._consumer.unassign()
        end = max(position, (records[-1].offset() or 0) + 1 if records else start)
        return records, end


_Lookup = Callable[[str], CaseHead | None]  # a case's stored head, by its key
_Folder = Callable[[Message, dict[str, CaseHead | None], _Lookup, int], None]  # folds one record into the heads


def _head(heads: dict[str, CaseHead | None], stored: _Lookup, key: str, partition: int) -> CaseHead:
    """The case's head being folded: from this chunk, else the store's, else a new one (erased in this chunk: new)."""
    head = heads.get(key)
    if head is None:
        head = (None if key in heads else stored(key)) or CaseHead(partition)
        heads[key] = head
    return head


def _fold_event(msg: Message, heads: dict[str, CaseHead | None], stored: _Lookup, partition: int) -> None:
    key = msg.key() or b""
    case_key, _, seq_text = key.decode("utf-8", "replace").rpartition("/")
    if not seq_text.isdigit():
        return
    offset, seq = msg.offset() or 0, int(seq_text)
    if msg.value() is None:  # a tombstone: the case was erased, its head goes with it
        current = heads[case_key] if case_key in heads else stored(case_key)
        if current is not None and current.erased_by(seq, offset):
            heads[case_key] = None
        return
    try:
        claimed = claimed_event(decode_object(msg.value(), "event"))
    except RejectedError:
        return
    if claimed is None or claimed[1].encode() != key:
        return  # a record whose value names another event is not the case's (wire/trajectory.py)
    batch_id = _header(msg, BATCH_HEADER)
    batch = None if batch_id is None else (batch_id, _header(msg, REQUEST_HEADER))
    _head(heads, stored, case_key, partition).fold_event(seq, offset, batch)


def _header(msg: Message, name: str) -> str | None:
    """The value of the record's header `name` (its last), None without one."""
    found = [value for key, value in header_pairs(msg.headers()) if key == name]
    return found[-1].decode("utf-8", "replace") if found else None


def _fold_trigger(msg: Message, heads: dict[str, CaseHead | None], stored: _Lookup, partition: int) -> None:
    value = msg.value()
    if not value:
        return
    try:
        request = DecisionRequest.from_wire(decode_object(value, "trigger"))
    except RejectedError:
        return  # one a worker dead-letters: never decided, nothing to remember
    if (msg.key() or b"") != request.case.key.encode():
        return
    sent = SentTrigger(LogPosition(partition, msg.offset() or 0), request_fingerprint(request))
    _head(heads, stored, request.case.key, partition).add_trigger(request.trigger_id, sent)


def request_fingerprint(request: DecisionRequest) -> str:
    """A decision request's idempotency fingerprint: what it asks, not which events it lists."""
    return decision_fingerprint(request.task, request.budget_chars, request.architectures)


def _answer_read(read: _Read, known: Callable[[CaseRef, bool], KnownCase]) -> None:
    if read.answer.done():
        return
    try:
        read.answer.set_result(known(read.case, read.requests))
    except KafkaAdapterError as exc:
        _fail(read, exc)


def _same_request(one: _Append, other: _Append) -> bool:
    """Whether `other` asks again what `one` asked: by the rule a committed batch answers a retry with."""
    return Batch(0, len(one.items), one.fingerprint).answers(len(other.items), other.fingerprint)


def _records(job: _Job) -> int:
    return len(job.items) if isinstance(job, _Append) else 0


def _expired(job: _Job) -> bool:
    if time.monotonic() <= job.deadline:
        return False
    _fail(job, _unavailable(job, "no answer in time"))
    return True


def _left(jobs: Sequence[_Job]) -> float:
    """The seconds the longest-waiting caller has left, at least one (a transactional call needs a moment)."""
    return max(1.0, max((j.deadline for j in jobs), default=0) - time.monotonic())


def _fail(job: _Job, error: BaseException) -> None:
    if not job.answer.done():
        job.answer.set_exception(error)


def _unavailable(job: _Job, exc: BaseException | str) -> BrokerUnavailableError:
    """What an append the broker did not confirm in time tells its caller: written or not, and what to do."""
    said = f"case {job.case.key}: the broker did not take the write in time ({exc})"
    if isinstance(job, _Append) and job.maybe_written:
        return BrokerUnavailableError(f"{said}; its commit was sent and not confirmed, so it may have been written: "
                                      "retry with the same idempotency key, which never writes it twice")  # fmt: skip
    return BrokerUnavailableError(f"{said}; nothing of it was written")
