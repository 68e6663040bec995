"""DecisionMemory: a tenant's door to the pipeline — append a case's steps, ask for a decision, get it back.

Connected the way every `dpm` command is (DPM_* settings, the local broker recorded under DPM_HOME,
a role's client properties on a secured cluster), with one tenant's rights: its events are sealed
under its cases' data keys, its decisions opened with them. Appends go through one writer per case
(kafka/case_writer.py: sequence numbers, fencing, one transaction per call); decisions are waited
for by one replies reader per client (kafka/replies.py) that serves every waiting call.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from types import TracebackType

from pipeline.client.errors import (
    CaseConflictError,
    ClientError,
    ClusterUnavailableError,
    DecisionNotFoundError,
    DecisionTimeoutError,
    NoEventsError,
)
from pipeline.client.replies import Reply, Waiters, trigger_refusal
from pipeline.client.results import Decision, EventPosition, Explanation, cited_indexes
from pipeline.config.settings import Settings
from pipeline.core.domains import domain_task
from pipeline.core.events import CaseRef, Event
from pipeline.core.explanation import fact_rows
from pipeline.core.task import Architecture, TaskSpec
from pipeline.core.verification import ReplayReport
from pipeline.kafka.case_writer import CaseWriter, CaseWriterConflictError, CaseWriters
from pipeline.kafka.errors import BrokerUnavailableError, KafkaAdapterError
from pipeline.kafka.keystore import case_keys_from
from pipeline.kafka.range_reads import read_topic
from pipeline.kafka.reader import KafkaEventLog
from pipeline.kafka.replies import ReplyReader
from pipeline.keys.store import CaseKeys
from pipeline.services.cluster import cluster_settings
from pipeline.services.read_outputs import load_outputs
from pipeline.services.replay import LogChangedError, read_recorded_events, registry_backends, replay_one
from pipeline.services.tenants import topics_of
from pipeline.wire.rejection import RejectedError
from pipeline.wire.trajectory import case_event
from pipeline.wire.trigger import DecisionId, DecisionKey, DecisionRequest

DEFAULT_BUDGET_CHARS = 5352  # the memory budget `dpm trigger` asks for by default
_KEPT_DECISIONS = 1_024  # typed decisions a client keeps for calls that ask for them again


class DecisionMemory:
    """One tenant's cases: `append` their steps, `decide` them, read decisions back by id. Thread-safe.

    A context manager; `close()` stops its replies reader and its writers.
    """

    def __init__(self, tenant: str, *, settings: Settings | None = None, max_writers: int = 64) -> None:
        """A client for `tenant`, connected as every `dpm` command is (settings default: DPM_* variables).

        `max_writers`: cases whose writers this client keeps registered (least recently used closed first).
        """
        settings = cluster_settings(settings or Settings.from_env())
        CaseRef(tenant, "check")  # the tenant id is checked as every key segment is
        self.tenant = tenant
        self._settings = settings
        self._config = settings.kafka.client_config()
        self._names = topics_of(settings, tenant)
        self._keys: CaseKeys = case_keys_from(settings, names=self._names)
        sealing = self._keys if settings.keys.encryption else None
        self._writers = CaseWriters(self._config, self._names, sealing, capacity=max_writers)
        self._writers_lock = threading.Lock()
        self._waiters = Waiters(self._names, tenant, self._keys)
        names = self._names
        self._replies = ReplyReader(self._config, (names.decisions, names.views, names.dlq), self._waiters.route)
        self._logs: dict[str, KafkaEventLog] = {}  # by events topic (a growth makes a new generation's)
        self._logs_lock = threading.Lock()
        # Typed decisions by id: many calls waiting for one decision read its cited events once. The lock
        # also keeps the event logs' consumers to one reader at a time.
        self._typed: OrderedDict[str, Decision] = OrderedDict()
        self._typed_lock = threading.Lock()
        self._max_positions = settings.worker.max_trigger_positions

    def __enter__(self) -> DecisionMemory:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:  # fmt: skip
        self.close()

    # Appending

    def append(self, case_id: str, *, kind: str, text: str, idempotency_key: str | None = None,
               timeout: float = 60.0) -> EventPosition:  # fmt: skip
        """Appends one event after the case's last; returns its seq and position once the broker has it (acks=all).

        Raises CaseConflictError when another writer took the case over (nothing written; appending
        again continues after its events), ClusterUnavailableError after `timeout` seconds without
        the broker (nothing written), InvalidEventError for an event that is not valid.
        """
        return self.append_many(case_id, [(kind, text)], idempotency_key=idempotency_key, timeout=timeout)[0]

    def append_many(self, case_id: str, events: Iterable[tuple[str, str]], *, idempotency_key: str | None = None,
                    timeout: float = 60.0) -> list[EventPosition]:  # fmt: skip
        """Appends (kind, text) events in order, all or none (one transaction); returns their positions.

        The same `idempotency_key` given again for the case returns the first call's positions and
        writes nothing (within the case's last 1,000 appends).
        """
        case = CaseRef(self.tenant, case_id)
        items = list(events)
        if not items:
            return []
        batch = _batch_id(idempotency_key)
        try:
            done = self._writer(case).append(items, batch_id=batch, timeout_s=timeout)
        except CaseWriterConflictError as exc:
            raise CaseConflictError(str(exc)) from exc
        except BrokerUnavailableError as exc:
            raise ClusterUnavailableError(str(exc)) from exc
        return [EventPosition(case_id, done.first_seq + i, p) for i, p in enumerate(done.positions)]

    def _writer(self, case: CaseRef) -> CaseWriter:
        with self._writers_lock:
            return self._writers(case)

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
        """Sends the decision request (not waiting for the decision); returns the decision's id for `wait`."""
        spec = _task(domain, task)
        arch = Architecture(architecture)
        case = CaseRef(self.tenant, case_id)
        writer = self._writer(case)
        try:
            positions = writer.positions()
            if not positions:
                raise NoEventsError(f"case {case.key} has no events: append its steps before asking for a decision")
            trigger_id = _trigger_id(case, idempotency_key)
            decision_id = DecisionId(trigger_id, arch)
            self._replies.start()  # at the replies' ends before the request is sent: no reply can be missed
            self._waiters.expect(decision_id)
            sent_before = trigger_id in writer.head.triggers
            listed = positions if len(positions) <= self._max_positions else None  # else the worker scans
            request = DecisionRequest(trigger_id, case, spec, budget, (arch,), listed, len(positions))
            writer.trigger(request, timeout_s=timeout)
        except CaseWriterConflictError as exc:
            raise CaseConflictError(str(exc)) from exc
        except BrokerUnavailableError as exc:
            raise ClusterUnavailableError(str(exc)) from exc
        if sent_before:  # a retry: the decision (or the refusal) may be published already
            self._look_up(decision_id)
        return str(decision_id)

    def wait(self, decision_id: str, timeout: float = 60.0) -> Decision:
        """Waits for a requested decision; DecisionRefusedError or DecisionTimeoutError as `decide` says."""
        try:
            reply = self.reply_future(decision_id).result(timeout)
        except FutureTimeout:
            self.stop_waiting(decision_id)
            raise DecisionTimeoutError.of(decision_id, timeout) from None
        return self.typed(reply)

    def reply_future(self, decision_id: str) -> Future[Reply]:
        """The future a requested decision's reply completes (shared by every call waiting for the id)."""
        return self._waiters.expect(DecisionId.parse(decision_id))

    def stop_waiting(self, decision_id: str) -> None:
        """Stops waiting for a decision (every call waiting for it times out or has it)."""
        self._waiters.forget(DecisionId.parse(decision_id))

    def decision(self, decision_id: str) -> Decision:
        """A published decision of this tenant by id (it reads the output topics); DecisionNotFoundError if none."""
        parsed = DecisionId.parse(decision_id)
        found = self._published(parsed)
        if found is None:
            raise DecisionNotFoundError(f"no decision {decision_id} of tenant {self.tenant} is published")
        if isinstance(found, Exception):
            raise found
        return self.typed(found)

    def explain(self, decision_id: str) -> Explanation:
        """A decision with its facts checked against its events as read now (what the auditor's page shows).

        For an erased case the decision's content cannot be opened: DecisionNotFoundError, as for any
        decision this tenant cannot read.
        """
        decision = self.decision(decision_id)
        record = decision.record
        try:
            trajectory = read_recorded_events(record, self._events_log(record.events_topic or self._names.events),
                                              self._keys)  # fmt: skip
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
        outputs = load_outputs(self._config, self._names, cipher=self._keys, with_triggers=False)
        record = outputs.decisions.get(key)
        if record is None:
            raise DecisionNotFoundError(f"no decision {decision_id} of tenant {self.tenant} is published")
        log = self._events_log(record.events_topic or self._names.events)
        with self._typed_lock:  # the event log's consumers: one reader at a time
            return replay_one(record, outputs.views.get(key), outputs.audits.get(key, []), log,
                              registry_backends(self._settings.model, backend), recorded_only=False,
                              cipher=self._keys)  # fmt: skip

    def decisions_of(self, case_id: str) -> list[str]:
        """The ids of the case's published decisions, oldest first (it reads the output topics)."""
        case = CaseRef(self.tenant, case_id)
        outputs = load_outputs(self._config, self._names, cipher=self._keys, with_audits=False, with_triggers=False)
        return [str(k.decision_id) for k, record in outputs.decisions.items() if record.case == case]

    def _look_up(self, decision_id: DecisionId) -> None:
        """Completes a waiting call from what is published already (a retried request)."""
        found = self._published(decision_id)
        if found is not None:
            self._waiters.complete(decision_id, found)

    def _published(self, decision_id: DecisionId) -> Reply | Exception | None:
        """The decision and view published under the id, the trigger's refusal, or None (cost: the output topics)."""
        outputs = load_outputs(self._config, self._names, cipher=self._keys, with_audits=False, with_triggers=False)
        key = DecisionKey(self.tenant, decision_id)
        record, view = outputs.decisions.get(key), outputs.views.get(key)
        if record is not None and view is not None:
            return Reply(record, view)
        for letter in read_topic(self._config, self._names.dlq):
            refusal = trigger_refusal(self._names, self.tenant, letter)
            if refusal is not None and refusal.trigger_id == decision_id.trigger_id:
                return refusal.error(decision_id)
        return None

    def typed(self, reply: Reply) -> Decision:
        """The typed decision of a reply, its cited events read back from the log (blocking; kept for later calls)."""
        key = str(reply.record.decision_id)
        with self._typed_lock:
            if key in self._typed:
                return self._typed[key]
            decision = self._read_cited(reply)
            self._typed[key] = decision
            while len(self._typed) > _KEPT_DECISIONS:
                self._typed.popitem(last=False)
            return decision

    def _read_cited(self, reply: Reply) -> Decision:
        record = reply.record
        wanted = cited_indexes(reply.view, len(record.positions))
        positions = [record.positions[i - 1] for i in wanted]
        log = self._events_log(record.events_topic or self._names.events)
        try:
            read = log.read(positions)
            by_position = {r.position: r for r in read.records}
            cited: dict[int, Event] = {}
            for index, position in zip(wanted, positions, strict=True):
                raw = by_position.get(position)
                if raw is not None:
                    cited[index] = case_event(raw, record.case, self._keys, self._names.tenant)
        except (RejectedError, KafkaAdapterError) as exc:
            raise ClientError(f"decision {record.decision_id}: its cited events could not be read: {exc}") from exc
        return Decision.of(record, reply.view, cited)

    def _events_log(self, topic: str) -> KafkaEventLog:
        with self._logs_lock:
            if topic not in self._logs:
                self._logs[topic] = KafkaEventLog(self._config, topic)
            return self._logs[topic]

    @property
    def waiting(self) -> int:
        """How many decisions this client's calls wait for now (one however many calls wait for the same)."""
        return len(self._waiters)

    def close(self) -> None:
        self._replies.close()
        with self._writers_lock:
            self._writers.close()
        with self._logs_lock:
            for log in self._logs.values():
                log.close()
            self._logs.clear()
        self._keys.close()


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
