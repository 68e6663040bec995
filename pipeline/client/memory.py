"""DecisionMemory: a tenant's door to the pipeline — append a case's steps, ask for a decision, get it back.

Connected the way every `dpm` command is (DPM_* settings, the local broker recorded under DPM_HOME,
a role's client properties on a secured cluster), with one tenant's rights: its events are sealed
under its cases' data keys, its decisions opened with them. Appends go through one writer per case
(kafka/writing/case_writer.py: sequence numbers, fencing, one transaction per call); decisions are waited
for by one replies reader per client (kafka/reading/replies.py) that serves every waiting call.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, overload

from pipeline.client.errors import (
    CaseErasedError,
    ClientError,
    ClusterUnavailableError,
    DecisionNotFoundError,
    DecisionRefusedError,
    DecisionTimeoutError,
    EventTooLargeError,
    IdempotencyKeyInFlightError,
    IdempotencyKeyReusedError,
    NoEventsError,
    NotAdverseError,
    ReasonsUnavailableError,
    SeqMismatchError,
    TopicsMissingError,
    TopicsRefusedError,
    UnknownCursorError,
)
from pipeline.client.recent import RecentEvents
from pipeline.client.replies import Reply, Waiters, trigger_refusal
from pipeline.client.results import Contest, Decision, EventPosition, Explanation, cited_indexes
from pipeline.config.settings import Settings
from pipeline.core.contest import AdverseReasons, ContestError
from pipeline.core.domains import domain_task
from pipeline.core.events import CaseRef, Event, LogPosition, Trajectory
from pipeline.core.explanation import fact_rows
from pipeline.core.idempotency import append_fingerprint, check_idempotency_key, decision_fingerprint
from pipeline.core.task import Architecture, TaskSpec
from pipeline.core.verification import ReplayReport
from pipeline.kafka.cluster.admin import TopicFacts, ensure_reachable, group_members
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.errors import BrokerUnavailableError, KafkaAdapterError
from pipeline.kafka.keytopic.erasures import ErasureWatch
from pipeline.kafka.keytopic.keystore import case_keys_from
from pipeline.kafka.reading.index_store import place
from pipeline.kafka.reading.output_index import OutputIndex
from pipeline.kafka.reading.places import PlaceReader
from pipeline.kafka.reading.reader import KafkaEventLog, PooledLog
from pipeline.kafka.reading.replies import START_TIMEOUT_S, ReplyReader
from pipeline.kafka.writing.case_writer import READ_TIMEOUT_S, CaseWriters
from pipeline.kafka.writing.sequencer import Appended, BatchReusedError, GroupCommit, KnownCase
from pipeline.kafka.writing.sequencer import EventTooLargeError as WriterEventTooLargeError
from pipeline.kafka.writing.sequencer import SeqMismatchError as WriterSeqMismatchError
from pipeline.keys.store import CaseKeys
from pipeline.services.cluster import cluster_settings
from pipeline.services.contest import (
    DEFAULT_MAX_CALLS,
    ContestRefusedError,
    Found,
    contest_reasons,
    contested_of,
    read_contests,
)
from pipeline.services.contest import NotAdverseError as ServiceNotAdverseError
from pipeline.services.lookups import case_decisions, open_index, published_decision
from pipeline.services.read_outputs import PublishedOutputs
from pipeline.services.replay import LogChangedError, read_recorded_events, registry_backends, replay_one
from pipeline.services.tenants import topics_of
from pipeline.wire.audit import calls_in_order
from pipeline.wire.contest import Asker
from pipeline.wire.decision import DecisionRecord
from pipeline.wire.rejection import RejectedError
from pipeline.wire.sealing import CaseErasedError as WireCaseErasedError
from pipeline.wire.trajectory import case_event
from pipeline.wire.trigger import DecisionId, DecisionKey, DecisionRequest

DEFAULT_BUDGET_CHARS = 5352  # the memory budget `dpm trigger` asks for by default
CONNECT_TIMEOUT_S = 10.0  # how long a new client waits for a broker to answer before saying none does
_KEPT_DECISIONS = 1_024  # typed decisions a client keeps for calls that ask for them again
# Readers of cited events per events topic, each serving one call at a time; a decision cites a few
# events, so each reader seeks with two consumers rather than the worker's eight.
_EVENT_READERS, _POINT_READERS = 4, 2


# What a writer raises for an append, which append_failure turns into the client's errors.
APPEND_FAILURES = (KafkaAdapterError, WireCaseErasedError)


@dataclass(frozen=True)
class OpenedAppend:
    """An append's arguments, checked, before it is written (DecisionMemory.open_append)."""

    case: CaseRef
    items: list[tuple[str, str]]
    idempotency_key: str | None
    batch_id: str
    fingerprint: str | None
    expected_seq: int | None


@dataclass(frozen=True)
class OpenedRequest:
    """A decision request's arguments, checked, before the case's head is read (DecisionMemory.open_request)."""

    case: CaseRef
    spec: TaskSpec
    budget: int
    architecture: Architecture
    idempotency_key: str | None


@dataclass(frozen=True)
class PreparedRequest:
    """A decision request made ready to send; `sent_before`: a retry, sent again only after a retryable refusal."""

    decision_id: DecisionId
    request: DecisionRequest
    sent_before: bool = False


class DecisionMemory:
    """One tenant's cases: `append` their steps, `decide` them, read decisions back by id. Thread-safe.

    A context manager; `close()` stops its replies reader and its writers.
    """

    def __init__(self, tenant: str, *, settings: Settings | None = None,
                 connect_timeout: float = CONNECT_TIMEOUT_S) -> None:  # fmt: skip
        """A client for `tenant`, connected as every `dpm` command is (settings default: DPM_* variables).

        Raises ClusterUnavailableError when no broker answers within `connect_timeout` seconds, and
        TopicsMissingError when the pipeline's topics do not exist: each says what to run.
        """
        settings = cluster_settings(settings or Settings.from_env())
        CaseRef(tenant, "check")  # the tenant id is checked as every key segment is
        self.tenant = tenant
        self._settings = settings
        self._config = settings.kafka.client_config()
        self._topics = TopicFacts(self._config)  # the scope's topics, described together once
        self._names = _connected(settings, self._config, self._topics, tenant, connect_timeout)
        self._keys: CaseKeys = case_keys_from(settings, names=self._names)
        # The index's, the lookup keys' and the cited events' reads: one connection, made now in the background
        # while the rest is set up (a fresh client's first lookup waited for it).
        self._places = PlaceReader(self._config, self._topics)
        self._places.connect()
        sealing = self._keys if settings.keys.encryption else None
        commit = GroupCommit(settings.kafka.write_linger_ms / 1000, settings.kafka.write_max_records)
        self._writers = CaseWriters(self._config, self._names, sealing, settings.paths.home, commit)
        self._waiters = Waiters(self._names, tenant, self._keys)
        names = self._names
        self._replies = ReplyReader(self._config, (names.decisions, names.views, names.dlq), self._waiters.route)
        self._logs: dict[str, PooledLog] = {}  # by events topic (a growth makes a new generation's)
        self._logs_lock = threading.Lock()
        self._typed: OrderedDict[str, Decision] = OrderedDict()  # by id: later calls for a decision read nothing
        self._recent = RecentEvents()
        self._typed_lock = threading.Lock()
        self._max_positions = settings.worker.max_trigger_positions
        self._in_flight = InFlight()
        self._erasures = ErasureWatch(self._config, names.keys, tenant, self._forget_case)
        self._index: OutputIndex | None = None
        self._lookup_keys: CaseKeys | None = None
        self._index_lock = threading.Lock()

    def __enter__(self) -> DecisionMemory:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:  # fmt: skip
        self.close()

    # Appending

    def append(self, case_id: str, *, kind: str, text: str, idempotency_key: str | None = None,
               expected_seq: int | None = None, timeout: float = 60.0) -> EventPosition:  # fmt: skip
        """Appends one event after the case's last; returns its seq and position once the broker has it (acks=all).

        Raises ClusterUnavailableError after `timeout` seconds without
        the broker (nothing written, unless its message says the commit was sent and not answered:
        retry with the same idempotency key), InvalidEventError for an event that is not valid,
        EventTooLargeError for one too large for a record (nothing written).
        """
        return self.append_many(case_id, [(kind, text)], idempotency_key=idempotency_key, expected_seq=expected_seq,
                                timeout=timeout)[0]  # fmt: skip

    def append_many(self, case_id: str, events: Iterable[tuple[str, str]], *, idempotency_key: str | None = None,
                    expected_seq: int | None = None, timeout: float = 60.0) -> list[EventPosition]:  # fmt: skip
        """Appends (kind, text) events in order, all or none (one transaction); returns their positions.

        The same `idempotency_key` given again for the case with the same events returns the first
        call's positions and writes nothing (within the case's last 1,000 appends); with other
        events it raises IdempotencyKeyReusedError, and while the first call is still writing,
        IdempotencyKeyInFlightError (nothing written either way). A key is 1 to 200 visible ASCII
        characters (InvalidIdempotencyKeyError otherwise).

        `expected_seq`: the case's last seq as the caller last saw it (0 for a case with no events);
        when the case has moved on, SeqMismatchError with its current seq, nothing written. A retry
        with the same `idempotency_key` gets its first answer before the seq is compared.
        """
        opened = self.open_append(case_id, events, idempotency_key=idempotency_key, expected_seq=expected_seq)
        if not opened.items:
            return []
        try:
            self.refuse_erased(opened.case, timeout)
            with self.appending(opened):
                done = self._writers.append(opened.case, opened.items, batch_id=opened.batch_id,
                                            fingerprint=opened.fingerprint, expected_seq=opened.expected_seq,
                                            timeout_s=timeout)  # fmt: skip
        except APPEND_FAILURES as exc:
            raise self.append_failure(opened.case, exc) from exc
        return self.appended(opened, done)

    def open_append(self, case_id: str, events: Iterable[tuple[str, str]], *, idempotency_key: str | None,
                    expected_seq: int | None) -> OpenedAppend:  # fmt: skip
        """append_many's arguments checked (nothing blocks): the case, its events, the batch id."""
        case = CaseRef(self.tenant, case_id)
        items = list(events)
        if idempotency_key is not None:
            check_idempotency_key(idempotency_key)
        if expected_seq is not None and expected_seq < 0:
            raise ValueError(f"expected_seq must be a case's last seq (0 or more), got {expected_seq}")
        fingerprint = append_fingerprint(items) if idempotency_key is not None and items else None
        return OpenedAppend(case, items, idempotency_key, _batch_id(idempotency_key), fingerprint, expected_seq)

    def appending(self, opened: OpenedAppend) -> AbstractContextManager[None]:
        """Held while the append is written: the same key again meanwhile is IdempotencyKeyInFlightError."""
        return self._in_flight.hold(("append", opened.case, opened.idempotency_key))

    def append_soon(self, opened: OpenedAppend, timeout: float) -> Future[Appended]:
        """The append's answer to come (an asyncio caller waits for it without a thread); see append_many."""
        return self._writers.append_soon(opened.case, opened.items, batch_id=opened.batch_id,
                                         fingerprint=opened.fingerprint, expected_seq=opened.expected_seq,
                                         timeout_s=timeout)  # fmt: skip

    def sequencer_ready(self, case: CaseRef) -> bool:
        """Whether append_soon and known_soon for the case block on nothing (its partition's sequencer runs)."""
        return self._writers.running(case)

    def append_failure(self, case: CaseRef, exc: KafkaAdapterError | WireCaseErasedError) -> ClientError:
        """The client's error for an append the writer refused or could not write (one of APPEND_FAILURES)."""
        if isinstance(exc, WireCaseErasedError):  # erased while this append was being sealed
            return _erased(case)
        if isinstance(exc, BatchReusedError):
            return IdempotencyKeyReusedError(str(exc))
        if isinstance(exc, WriterSeqMismatchError):
            return SeqMismatchError(str(exc), current_seq=exc.current)
        if isinstance(exc, BrokerUnavailableError):
            return ClusterUnavailableError(str(exc))
        if isinstance(exc, WriterEventTooLargeError):
            return EventTooLargeError(str(exc), index=exc.index, size=exc.size, limit=exc.limit)
        return ClientError(f"case {case.key}: the append failed: {exc}")

    def appended(self, opened: OpenedAppend, done: Appended) -> list[EventPosition]:
        """The positions of a written (or earlier written) append; a written one's events kept for reads."""
        case, items = opened.case, opened.items
        if done.written:  # (an idempotent repeat's items may differ from what the first call wrote)
            self._recent.add(self._names.events, ((p, Event(case, done.first_seq + i, kind, text))
                                                  for i, (p, (kind, text)) in enumerate(zip(done.positions, items,
                                                                                            strict=True))))  # fmt: skip
        return [EventPosition(case.case_id, done.first_seq + i, p) for i, p in enumerate(done.positions)]

    def partition_of(self, case_id: str) -> tuple[str, int]:
        """The events topic and partition the case's steps go to (a door forwards an append to its owner by it)."""
        try:
            return self._writers.partition_of(CaseRef(self.tenant, case_id))
        except BrokerUnavailableError as exc:
            raise ClusterUnavailableError(str(exc)) from exc
        except KafkaAdapterError as exc:
            raise ClientError(f"the partitions of {self._names.events} could not be read: {exc}") from exc

    def known_partition_of(self, case_id: str) -> tuple[str, int] | None:
        """partition_of when it needs no broker (the partition counts read before); else None."""
        return self._writers.known_partition_of(CaseRef(self.tenant, case_id))

    # Erasure

    @property
    def erasures_known(self) -> bool:
        """Whether refuse_erased answers without waiting (the key topic was read once)."""
        return self._erasures.ready

    def refuse_erased(self, case: CaseRef, timeout: float) -> None:
        """CaseErasedError for an erased case: it takes no more events and its decisions are not read."""
        try:
            erased = self._erasures.erased(case, timeout_s=min(timeout, START_TIMEOUT_S))
        except BrokerUnavailableError as exc:
            raise ClusterUnavailableError(str(exc)) from exc
        if erased:
            raise _erased(case)

    def forget_erased(self, case_id: str) -> None:
        """Drops what this client keeps of a case this process just erased, and refuses the case from now on.

        Another process's erasure reaches the client's caches within about a second (kafka/keytopic/erasures.py).
        """
        self._erasures.note(CaseRef(self.tenant, case_id))

    def _forget_case(self, case: CaseRef) -> None:
        """The case was erased: its replies, typed decisions, recent events and writer go (on the watch's thread)."""
        self._waiters.erase(case, _erased(case))
        with self._typed_lock:
            for decision_id in [d for d, decision in self._typed.items() if decision.record.case == case]:
                del self._typed[decision_id]
        self._recent.forget_case(case)
        self._writers.forget(case)
        self._keys.sync()  # the ring reads the tombstone: no event is sealed, nor reply opened, under the old key

    # Deciding

    def decide(self, case_id: str, *, domain: str | None = None, task: TaskSpec | None = None,
               budget: int = DEFAULT_BUDGET_CHARS, architecture: str = "dpm", timeout: float = 60.0,
               idempotency_key: str | None = None) -> Decision:  # fmt: skip
        """Asks for a decision of the case as it stands and waits for it.

        The task is the domain's standing one unless given whole. Raises DecisionRefusedError when
        a worker refuses the request (its reason), DecisionTimeoutError after `timeout` seconds (the
        decision may still come: `decision(error.decision_id)` collects it). The same
        `idempotency_key` again never makes a second decision: it returns the first.
        """
        decision_id = self.request(case_id, domain=domain, task=task, budget=budget, architecture=architecture,
                                   idempotency_key=idempotency_key, timeout=timeout)  # fmt: skip
        return self.wait(decision_id, timeout)

    def request(self, case_id: str, *, domain: str | None = None, task: TaskSpec | None = None,
                budget: int = DEFAULT_BUDGET_CHARS, architecture: str = "dpm", idempotency_key: str | None = None,
                timeout: float = 60.0) -> str:  # fmt: skip
        """Sends the decision request (not waiting for the decision); returns the decision's id for `wait`.

        The request lists the case's events as this client knows them: its own appends, or, for a
        case it has not written, the events committed when asked. If the broker has not acknowledged
        the request within `timeout`, DecisionTimeoutError: it may still arrive and be decided.
        """
        with self.requesting(case_id, idempotency_key):
            prepared = self.prepare_request(case_id, domain=domain, task=task, budget=budget,
                                            architecture=architecture, idempotency_key=idempotency_key,
                                            timeout=timeout)  # fmt: skip
            if prepared.sent_before and self.look_up(prepared.decision_id):
                return str(prepared.decision_id)  # a retry: its decision (or refusal) is published or on its way
            sent = self.send_request(prepared.request)
            try:
                sent.result(timeout)
            except FutureTimeout:
                raise self.unconfirmed(prepared, timeout) from None
            except KafkaAdapterError as exc:
                raise self.unsent(prepared, exc) from exc
        return str(prepared.decision_id)

    def requesting(self, case_id: str, idempotency_key: str | None) -> AbstractContextManager[None]:
        """Held while a keyed decision request is being sent: the same key meanwhile is IdempotencyKeyInFlightError."""
        return self._in_flight.hold(("decision", CaseRef(self.tenant, case_id), idempotency_key))

    def prepare_request(self, case_id: str, *, domain: str | None = None, task: TaskSpec | None = None,
                        budget: int = DEFAULT_BUDGET_CHARS, architecture: str = "dpm",
                        idempotency_key: str | None = None, timeout: float = 60.0) -> PreparedRequest:  # fmt: skip
        """The first half of `request` (blocking: the case's head is read): the request, and whether sent before."""
        opened = self.open_request(case_id, domain=domain, task=task, budget=budget, architecture=architecture,
                                   idempotency_key=idempotency_key, timeout=timeout)  # fmt: skip
        with reading_errors("the case's events (nothing was requested)"):
            known = self._writers.known(opened.case, timeout_s=min(timeout, READ_TIMEOUT_S),
                                        requests=opened.idempotency_key is not None)  # fmt: skip
        return self.ready_request(opened, known)

    def open_request(self, case_id: str, *, domain: str | None, task: TaskSpec | None, budget: int,
                     architecture: str, idempotency_key: str | None, timeout: float) -> OpenedRequest:  # fmt: skip
        """prepare_request's start: the arguments checked, the case not erased, the replies' ends read."""
        spec = _task(domain, task)
        arch = Architecture(architecture)
        case = CaseRef(self.tenant, case_id)
        if idempotency_key is not None:
            check_idempotency_key(idempotency_key)
        self.refuse_erased(case, timeout)
        if not self._replies.started:
            # at the replies' ends before the request is sent: no reply can be missed
            with reading_errors("where the replies end (nothing was requested)"):
                self._replies.start(timeout_s=min(timeout, START_TIMEOUT_S))
        return OpenedRequest(case, spec, budget, arch, idempotency_key)

    @property
    def requests_ready(self) -> bool:
        """Whether open_request blocks on nothing: the erasures and the replies' ends were read before."""
        return self.erasures_known and self._replies.started

    def known_soon(self, opened: OpenedRequest, timeout: float) -> Future[KnownCase]:
        """The case's head as its sequencer will answer it (AsyncDecisionMemory waits for it without a thread)."""
        # A request without a key has a new trigger id: no request sent before can be it (see PartitionSequencer.known)
        return self._writers.known_soon(opened.case, timeout_s=min(timeout, READ_TIMEOUT_S),
                                        requests=opened.idempotency_key is not None)  # fmt: skip

    def ready_request(self, opened: OpenedRequest, known: KnownCase) -> PreparedRequest:
        """prepare_request's end, from the case's head: the request to send, or the one sent before (a retry)."""
        case, spec, arch = opened.case, opened.spec, opened.architecture
        if not known.positions:
            raise NoEventsError(f"case {case.key} has no events: append its steps before asking for a decision")
        trigger_id = _trigger_id(case, opened.idempotency_key)
        decision_id = DecisionId(trigger_id, arch)
        sent = known.triggers.get(trigger_id)
        if sent is not None and sent.fingerprint != decision_fingerprint(spec, opened.budget, (arch,)):
            raise IdempotencyKeyReusedError(f"case {case.key}: this idempotency key was used before for another "
                                            "decision request (task, budget or architecture); nothing was requested."
                                            " Ask again with the same request, or use a new key.")  # fmt: skip
        self._waiters.expect(decision_id)
        positions = known.positions
        listed = positions if len(positions) <= self._max_positions else None  # else the worker scans
        request = DecisionRequest(trigger_id, case, spec, opened.budget, (arch,), listed, len(positions))
        return PreparedRequest(decision_id, request, sent_before=sent is not None)

    def send_request(self, request: DecisionRequest) -> Future[LogPosition]:
        """The second half of `request`: sends it (not blocking); the future completes when the broker has it."""
        return self._writers.send_trigger(request)

    def unconfirmed(self, prepared: PreparedRequest, timeout: float) -> DecisionTimeoutError:
        """What a request not acknowledged in time raises: it may still arrive (and be decided)."""
        return DecisionTimeoutError(
            f"the broker did not acknowledge the request for decision {prepared.decision_id} within {timeout:g} s; "
            f"it may still arrive and be decided: collect it later with decision({str(prepared.decision_id)!r}), "
            "or ask again with the same idempotency key (never a second decision)",
            decision_id=str(prepared.decision_id))  # fmt: skip

    def unsent(self, prepared: PreparedRequest, error: KafkaAdapterError) -> ClientError:
        """What a request the broker refused or never took raises (nothing was written; nobody waits for it)."""
        self._waiters.forget(prepared.decision_id)
        if isinstance(error, BrokerUnavailableError):
            return ClusterUnavailableError(f"decision {prepared.decision_id} was not requested: {error}")
        return ClientError(f"decision {prepared.decision_id} was not requested: {error}")

    def wait(self, decision_id: str, timeout: float = 60.0) -> Decision:
        """Waits for a requested decision; DecisionRefusedError or DecisionTimeoutError as `decide` says."""
        try:
            reply = self.reply_future(decision_id).result(timeout)
        except FutureTimeout:
            self.stop_waiting(decision_id)
            raise self.not_in_time(decision_id, timeout) from None
        return self.typed(reply)

    def not_in_time(self, decision_id: str, timeout: float) -> DecisionTimeoutError:
        """What a decision waited for in vain raises: with what to run when no worker of its kind is in its group.

        Blocking (one request to the cluster, at most 2 s); a group it may not describe gives no hint.
        """
        waited = DecisionTimeoutError.of(decision_id, timeout)
        group = self._names.baseline_app if DecisionId.parse(decision_id).architecture is Architecture.SUMM else (
            f"{self._names.prefix}-projection")  # fmt: skip
        if group_members(self._config, group, timeout_s=2.0) != 0:
            return waited
        command = "dpm baseline" if group == self._names.baseline_app else "dpm worker"
        hint = f"No worker is running: consumer group {group} has no members; start one with `{command}`."
        return DecisionTimeoutError(f"{waited} {hint}", decision_id=decision_id, hint=hint)

    def reply_future(self, decision_id: str) -> Future[Reply]:
        """The future a requested decision's reply completes (shared by every call waiting for the id)."""
        return self._waiters.expect(DecisionId.parse(decision_id))

    def stop_waiting(self, decision_id: str) -> None:
        """Stops waiting for a decision (every call waiting for it times out or has it)."""
        self._waiters.forget(DecisionId.parse(decision_id))

    def decision(self, decision_id: str) -> Decision:
        """A published decision of this tenant by id (it reads the output topics); DecisionNotFoundError if none."""
        parsed = DecisionId.parse(decision_id)
        with reading_errors("the output topics"):
            found = self._published(parsed)
        if found is None:
            raise DecisionNotFoundError(f"no decision {decision_id} of tenant {self.tenant} is published")
        if isinstance(found, Exception):
            raise found
        return self.typed(found)

    def explain(self, decision_id: str) -> Explanation:
        """A decision with its facts checked against its events as read now (what the auditor's page shows).

        For an erased case the decision's content cannot be opened: CaseErasedError.
        """
        decision = self.decision(decision_id)
        record = decision.record
        try:
            trajectory = self._recorded_events(record)
        except LogChangedError as exc:
            return Explanation(decision, tuple(fact_rows(decision.view.view, None)), f"log changed: {exc.detail}")
        status = None if trajectory is not None else "erased"
        return Explanation(decision, tuple(fact_rows(decision.view.view, trajectory)), status)

    def replay(self, decision_id: str, *, backend: str | None = None) -> ReplayReport:
        """Re-runs a decision from its recorded offsets and verifies it by hash, as `dpm replay` does.

        The recorded backend unless `backend` names another (model calls are made again: a hosted
        model's cost is paid again). Reads the output topics (the decision, its view, its audits).
        """
        key = DecisionKey(self.tenant, DecisionId.parse(decision_id))
        with reading_errors("the output topics"):
            outputs = published_decision(self._lookups(), key.decision_id, self.tenant, self._opening())
        record = outputs.decisions.get(key)
        if record is None:
            raise _unpublished(outputs, key)
        log = self._events_log(record.events_topic or self._names.events)
        with reading_errors("the decision's events"):
            return replay_one(record, outputs.views.get(key), outputs.audits.get(key, []), log,
                              registry_backends(self._settings.model, backend), recorded_only=False,
                              cipher=self._opening())  # fmt: skip

    def reasons(self, decision_id: str, *, max_calls: int = DEFAULT_MAX_CALLS) -> AdverseReasons:
        """The principal reasons of an adverse decision, weightiest first, as `dpm explain --reasons` finds them.

        Each fact's cited events are left out in turn and the decision re-made with its recorded backend
        (at most `max_calls` new model calls; answers the decision recorded are reused). Computed, not
        recorded: an auditor records them with `dpm explain --reasons`. NotAdverseError for a decision its
        domain does not mark adverse; DecisionNotFoundError for one this tenant cannot read; CaseErasedError
        for one of an erased case.
        """
        try:
            found = self._found(decision_id)
            reasons, _ = contest_reasons(self._settings, found, Asker(f"client:{self.tenant}", 0), max_calls)
        except ServiceNotAdverseError as exc:
            raise NotAdverseError(str(exc)) from exc
        except (LogChangedError, ContestRefusedError, ContestError) as exc:
            raise ReasonsUnavailableError(f"the reasons of {decision_id} cannot be found: {exc}") from exc
        return reasons

    def contests(self, decision_id: str) -> list[Contest]:
        """The published contests of a decision of this tenant, oldest first, each replayed from its record.

        Only the decision's records and its contests are read (through the lookup index); the replays
        use the recorded answers (no model call). DecisionNotFoundError for a decision this tenant
        cannot read; CaseErasedError for one of an erased case.
        """
        try:
            found = self._found(decision_id)
        except LogChangedError as exc:
            raise ClientError(f"the contests of {decision_id} cannot be replayed: {exc}") from exc
        with reading_errors("the contests topic"):
            lines = read_contests(self._lookups(), found, self._opening())
        return [Contest(line.contest_id, None if line.kind is None else line.kind.value, line.report.status.value,
                        line.report.detail) for line in lines]  # fmt: skip

    def _found(self, decision_id: str) -> Found:
        """The tenant's decision as a contest takes it: record, view, recorded calls and the events it read.

        DecisionNotFoundError, CaseErasedError; LogChangedError when its recorded offsets hold other events.
        """
        key = DecisionKey(self.tenant, DecisionId.parse(decision_id))
        with reading_errors("the output topics"):
            outputs = published_decision(self._lookups(), key.decision_id, self.tenant, self._opening())
        record, view = outputs.decisions.get(key), outputs.views.get(key)
        if record is None or view is None:
            raise _unpublished(outputs, key)
        trajectory = self._recorded_events(record)
        if trajectory is None:
            raise _erased(record.case)
        return Found(self._names, record, contested_of(record, view.view, trajectory),
                     tuple(calls_in_order(outputs.audits.get(key, []))))  # fmt: skip

    def _recorded_events(self, record: DecisionRecord) -> Trajectory | None:
        """The events at the decision's recorded offsets (None: erased); LogChangedError when they are not."""
        with reading_errors("the decision's events"):
            return read_recorded_events(record, self._events_log(record.events_topic or self._names.events),
                                        self._opening())  # fmt: skip

    def decisions_of(self, case_id: str, *, after: str | None = None, limit: int | None = None) -> list[str]:
        """The ids of the case's published decisions, oldest first (from the lookup index, brought up to date).

        In pages: those after the decision id `after` (the last of the page before), at most `limit`.
        """
        case = CaseRef(self.tenant, case_id)
        self.refuse_erased(case, START_TIMEOUT_S)
        if limit is not None and limit < 1:
            raise ClientError(f"limit {limit}: a page holds at least one decision")
        with reading_errors("the output topics"):
            page = case_decisions(self._lookups(), case, after, limit)
        if page is None:
            raise UnknownCursorError(f"after={after!r} is none of case {case_id}'s decisions: nothing to start after")
        return [entry.decision_id for entry in page]

    def look_up(self, decision_id: DecisionId) -> bool:
        """Completes the calls waiting for a decision from what is published already (a retried request).

        False when what is published is a retryable refusal (`key-service-unavailable`): the request is
        to be sent again, and its calls wait for what that one gets.
        """
        with reading_errors("the output topics"):
            found = self._published(decision_id)
        if isinstance(found, DecisionRefusedError) and found.retryable:
            return False
        if found is not None:
            self._waiters.complete(decision_id, found)
        return True

    def _published(self, decision_id: DecisionId) -> Reply | Exception | None:
        """The decision and view published under the id, the trigger's refusal, or None (read through the index)."""
        index = self._lookups()
        outputs = published_decision(index, decision_id, self.tenant, self._opening(), with_audits=False)
        key = DecisionKey(self.tenant, decision_id)
        record, view = outputs.decisions.get(key), outputs.views.get(key)
        if record is not None and view is not None:
            return Reply(record, view)
        if key in outputs.erased:
            return _erased(outputs.erased[key])
        letter = index.refusal(decision_id.trigger_id, self.tenant)
        refusal = None if letter is None else trigger_refusal(self._names, self.tenant, letter)
        return None if refusal is None else refusal.error(decision_id)

    def _lookups(self) -> OutputIndex:
        """The lookup index of this tenant's output topics, opened on first use (it asks the cluster for a topic id)."""
        with self._index_lock:
            if self._index is None:
                self._index = open_index(self._settings, self._names, self._config, self._places)
            return self._index

    def keep_index_current(self) -> None:
        """Keeps this host's lookup index of the tenant's topics current from a thread (a door's client does).

        Lookups then find a decision published a moment ago without catching up themselves, and so does
        any later process on the host that shares the index file (a CLI command, a restarted replica).
        """
        with reading_errors("the output topics"):
            self._lookups().keep_current()

    def _opening(self) -> CaseKeys:
        """The case keys lookups open records with: each case's key read by its place (kafka/keytopic/keystore.py).

        Not the writers' keys, which follow every case's: a fresh client that looks one decision up
        reads that case's key, not the whole key topic.
        """
        with self._index_lock:
            if self._lookup_keys is None:
                self._lookup_keys = case_keys_from(self._settings, names=self._names, by_case=True,
                                                   reader=self._places)  # fmt: skip
            return self._lookup_keys

    def typed(self, reply: Reply) -> Decision:
        """The typed decision of a reply, its cited events read back from the log (blocking; kept for later calls)."""
        return self._typed_decision(reply, read=True)

    def typed_now(self, reply: Reply) -> Decision | None:
        """`typed` if it needs no read (every cited event appended by this client, or typed before), else None."""
        return self._typed_decision(reply, read=False)

    @overload
    def _typed_decision(self, reply: Reply, *, read: Literal[True]) -> Decision: ...

    @overload
    def _typed_decision(self, reply: Reply, *, read: Literal[False]) -> Decision | None: ...

    def _typed_decision(self, reply: Reply, *, read: bool) -> Decision | None:
        key = str(reply.record.decision_id)
        with self._typed_lock:
            if key in self._typed:
                return self._typed[key]
        record = reply.record
        topic = record.events_topic or self._names.events
        cited: dict[int, Event] = {}
        unread: dict[int, LogPosition] = {}
        for index in cited_indexes(reply.view, len(record.positions)):
            position = record.positions[index - 1]
            known = self._recent.get(topic, position)
            if known is not None and known.case == record.case:
                cited[index] = known
            else:
                unread[index] = position
        if unread:
            if not read:
                return None
            cited.update(self._read_events(record, topic, unread))  # outside the lock: reads run side by side
        with self._typed_lock:
            decision = self._typed.setdefault(key, Decision.of(record, reply.view, cited))
            while len(self._typed) > _KEPT_DECISIONS:
                self._typed.popitem(last=False)
            return decision

    def _read_events(self, record: DecisionRecord, topic: str, wanted: dict[int, LogPosition]) -> dict[int, Event]:
        """The cited events at their positions, read as lookups read (a few records: no pool of readers opened)."""
        try:
            read = self._places.read((topic, place(p.partition, p.offset)) for p in wanted.values())
            by_position = {r.position: r for r in read.values()}
            return {index: case_event(by_position[position], record.case, self._opening(), self._names.tenant)
                    for index, position in wanted.items() if position in by_position}  # fmt: skip
        except (RejectedError, KafkaAdapterError) as exc:
            raise ClientError(f"decision {record.decision_id}: its cited events could not be read: {exc}") from exc

    def _events_log(self, topic: str) -> PooledLog:
        with self._logs_lock:
            if topic not in self._logs:
                self._logs[topic] = PooledLog([KafkaEventLog(self._config, topic, point_readers=_POINT_READERS)
                                               for _ in range(_EVENT_READERS)])  # fmt: skip
            return self._logs[topic]

    @property
    def waiting(self) -> int:
        """How many decisions this client's calls wait for now (one however many calls wait for the same)."""
        return len(self._waiters)

    def close(self) -> None:
        self._erasures.close()
        self._replies.close()
        self._writers.close()
        with self._logs_lock:
            for log in self._logs.values():
                log.close()
            self._logs.clear()
        with self._index_lock:
            for opened in (self._index, self._lookup_keys):
                if opened is not None:
                    opened.close()
            self._places.close()
        self._keys.close()


def _connected(settings: Settings, config: dict[str, str], topics: TopicFacts, tenant: str,
               timeout_s: float) -> TopicNames:  # fmt: skip
    """The tenant's topics, once a broker answered and they exist; else an error naming the cause and the fix.

    The keys, audit and contests topics are described in the same request, for the lookups to come;
    a deployment may lack the contests topic or refuse this principal the audit one, so only the
    topics every call needs are required.
    """
    try:
        ensure_reachable(config, timeout_s)
        names = topics_of(settings, tenant)
        required = [names.events, names.triggers, names.decisions, names.views, names.dlq]
        survey = topics.survey([*required, names.keys, names.audit, names.contests], timeout_s)
        missing = [t for t in survey.missing if t in required]
        refused = [t for t in survey.refused if t in required]
    except BrokerUnavailableError as exc:
        raise ClusterUnavailableError(str(exc)) from exc
    except KafkaAdapterError as exc:
        raise ClientError(f"connecting to the cluster failed: {exc}") from exc
    if refused:
        raise TopicsRefusedError(f"the cluster refuses the principal of DPM_KAFKA_CONFIG the tenant {tenant!r}'s "
                                 f"topics ({', '.join(refused)}): use that tenant's own credentials, or grant them "
                                 f"with `dpm acl apply` (a cluster refuses topics that do not exist alike: "
                                 f"`dpm tenants add {tenant}` makes them)")  # fmt: skip
    if missing:
        fix = f"`dpm tenants add {tenant}`" if names.tenant else "`dpm topics create`"
        raise TopicsMissingError(f"the pipeline's topics do not exist ({', '.join(missing)}): create them with {fix} "
                                 f"(DPM_TOPIC_PREFIX={names.prefix})")  # fmt: skip
    return names


def _erased(case: CaseRef) -> CaseErasedError:
    return CaseErasedError(f"case {case.key} was erased: its decisions cannot be read and it takes no more events; "
                           "a subject who comes back is a new case id")  # fmt: skip


def _unpublished(outputs: PublishedOutputs, key: DecisionKey) -> ClientError:
    """Why a decision is not among the published ones: its case was erased, or no such decision is published."""
    if key in outputs.erased:
        return _erased(outputs.erased[key])
    return DecisionNotFoundError(f"no decision {key.decision_id} of tenant {key.tenant} is published")


class InFlight:
    """The keyed requests a client is writing now: a second one with the same key is refused, not queued.

    The draft's 409: a retry sent while the first attempt is still being written would otherwise
    wait for it and then answer with its result, which a caller cannot tell from a fresh write.
    Unkeyed requests are never in flight to each other. Per client; across processes the case's
    partition sequencer answers a keyed retry from the case's head once the first is committed.
    """

    def __init__(self) -> None:
        self._held: set[tuple[str, CaseRef, str]] = set()
        self._lock = threading.Lock()

    @contextmanager
    def hold(self, request: tuple[str, CaseRef, str | None]) -> Iterator[None]:
        kind, case, key = request
        if key is None:
            yield
            return
        with self._lock:
            if (kind, case, key) in self._held:
                raise IdempotencyKeyInFlightError(f"case {case.key}: a {kind} request with this idempotency key is "
                                                  "still being written; nothing of this one was. Retry once it "
                                                  "has answered.")  # fmt: skip
            self._held.add((kind, case, key))
        try:
            yield
        finally:
            with self._lock:
                self._held.discard((kind, case, key))


@contextmanager
def reading_errors(what: str) -> Iterator[None]:
    """The Kafka layer's errors of a read as the client's: the cluster away, or the read failed (nothing changed)."""
    try:
        yield
    except BrokerUnavailableError as exc:
        raise ClusterUnavailableError(f"reading {what}: {exc}") from exc
    except KafkaAdapterError as exc:
        raise ClientError(f"reading {what} failed: {exc}") from exc


def _task(domain: str | None, task: TaskSpec | None) -> TaskSpec:
    if task is not None:
        return task
    if domain is None:
        raise ClientError("give the decision's domain (its standing task) or its task whole")
    return domain_task(domain)


def _batch_id(idempotency_key: str | None) -> str:
    """An append's batch id: derived from the caller's idempotency key, else new."""
    if idempotency_key is None:
        return uuid.uuid4().hex
    return "k-" + hashlib.sha256(idempotency_key.encode("utf-8")).hexdigest()[:32]


def _trigger_id(case: CaseRef, idempotency_key: str | None) -> str:
    """A decision request's trigger id: derived from the case and the caller's idempotency key, else new."""
    if idempotency_key is None:
        return f"c-{uuid.uuid4().hex}"
    digest = hashlib.sha256(f"{case.key}\n{idempotency_key}".encode()).hexdigest()[:32]
    return f"k-{digest}"
