"""What the auditor's pages read through: the live index, a decision's events and audit records, replay, contests."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.config.settings import Settings
from pipeline.core.errors import DpmError
from pipeline.core.events import CaseRef, LogPosition, Trajectory
from pipeline.core.verification import ReplayReport
from pipeline.kafka.cluster.layout import current_generation
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.errors import KafkaAdapterError
from pipeline.kafka.keytopic.keystore import case_keys_from
from pipeline.kafka.reading.index_store import unplace
from pipeline.kafka.reading.output_index import OutputIndex
from pipeline.kafka.reading.reader import KafkaEventLog, PooledLog
from pipeline.keys.store import CaseKeys
from pipeline.services.audit_index import (
    DecisionIndex,
    ErasedDecision,
    IndexedDecision,
    Listed,
    LiveIndex,
    read_audits,
)
from pipeline.services.contest import (
    ContestAsk,
    ContestDone,
    ContestRefusedError,
    Found,
    contested_of,
    publish_contest,
    require_contests_topic,
    run_contest,
)
from pipeline.services.lookups import open_index, published
from pipeline.services.replay import LogChangedError, read_recorded_events, registry_backends, replay_one
from pipeline.services.tenants import topic_scopes
from pipeline.wire.audit import AuditRecord, calls_in_order
from pipeline.wire.decision import DecisionRecord
from pipeline.wire.trigger import DecisionId, DecisionKey

_LOG = logging.getLogger("pipeline.services.auditor")


@dataclass(frozen=True)
class CaseEvents:
    """A decision's recorded events as read now: the trajectory, or why there is none."""

    trajectory: Trajectory | None
    problem: str | None = None  # "erased", or what changed at the recorded offsets


class _Scope:
    """One set of output topics (the shared ones, or a tenant's own), followed into the index, and its readers."""

    def __init__(self, settings: Settings, names: TopicNames, index: DecisionIndex, readers: int) -> None:
        config = settings.kafka.client_config()
        self.names = names
        self.keys = case_keys_from(settings, client_config=config, names=names)
        self.live = LiveIndex(config, names, self.keys, index)
        self._config, self._readers = config, readers
        self._events: dict[str, PooledLog] = {}  # events topic (one per generation) -> its readers, opened on use
        self._events_lock = threading.Lock()
        self.audit_log = PooledLog([KafkaEventLog(config, names.audit) for _ in range(readers)])
        self._settings = settings
        self._lookups: OutputIndex | None = None  # the lookup index, opened on first use
        self._lookup_keys: CaseKeys | None = None  # its case keys, each case's read by its place
        self._lookups_lock = threading.Lock()

    def looked_up(self, tenant: str, decision_id: DecisionId) -> Listed | None:
        """The tenant's decision of this id through the lookup index: any published, oldest included."""
        with self._lookups_lock:
            if self._lookup_keys is None:
                self._lookup_keys = case_keys_from(self._settings, client_config=self._config, names=self.names,
                                                   by_case=True)  # fmt: skip
            if self._lookups is None:
                self._lookups = open_index(self._settings, self.names, self._config)
                self._lookups.keep_current()
        index, keys = self._lookups, self._lookup_keys
        entries = index.entries(str(decision_id), tenant)
        if not entries:
            return None
        entry = entries[0]
        outputs = published(index, [entry], keys, with_audits=False)
        key = DecisionKey(tenant, decision_id)
        if key in outputs.erased:
            return ErasedDecision(decision_id, outputs.erased[key], entry.at_ms or 0)
        record = outputs.decisions.get(key)
        if record is None:
            return None
        positions = {call: LogPosition(*unplace(where)) for call, where in entry.audits}
        return IndexedDecision(record, entry.at_ms or 0, key in outputs.sealed, outputs.views.get(key), positions)

    def events_of(self, record: DecisionRecord) -> PooledLog:
        """The readers of the events topic the decision read (v1 records: the first generation's)."""
        topic = record.events_topic or self.names.of_generation(1).events
        with self._events_lock:
            if topic not in self._events:
                self._events[topic] = PooledLog([KafkaEventLog(self._config, topic) for _ in range(self._readers)])
            return self._events[topic]

    def close(self) -> None:
        with self._lookups_lock:
            for opened in (self._lookups, self._lookup_keys):
                if opened is not None:
                    opened.close()
        self.live.close()
        with self._events_lock:
            for log in self._events.values():
                log.close()
        self.audit_log.close()
        self.keys.close()


class KafkaAuditor:
    """The index, followed live from the output topics, and reads by offset for one decision at a time.

    Reads go through pools of DPM_UI_CONCURRENCY Kafka readers (one for events, one for audit
    records): that many pages read at once, and a page holds a reader only while it reads. The case keys are
    thread-safe; the index has its own lock and is refreshed by one thread. List pages read the
    index only. With tenancy by topic the shared topics (where they exist) and every tenant's own are
    followed into the one index (tenants onboarded later are found at the next look, every
    TENANTS_EVERY_S); each then has one reader of each kind, since its readers hold consumers. A
    decision is read back from the scope that owns the events topic it read: a tenant decided on the
    shared topics before it got its own is audited in both.
    """

    TENANTS_EVERY_S = 10.0

    def __init__(self, settings: Settings, names: TopicNames | None = None) -> None:
        self._settings = settings
        self._by_topic = settings.kafka.tenancy == "topics" and names is None
        base = TopicNames(settings.kafka.topic_prefix)
        self.names = names or (base if self._by_topic else current_generation(settings.kafka.client_config(), base))
        self._index = DecisionIndex(settings.ui.max_decisions)
        self._scopes: dict[str | None, _Scope] = {}
        if not self._by_topic:
            self._scopes[None] = _Scope(settings, self.names, self._index, settings.ui.concurrency)
        self._tenants_looked_at = -math.inf
        self._backends = registry_backends(settings.model, None)
        self._refresh_lock = threading.Lock()
        self._scopes_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.refresh_failures = 0

    @property
    def index(self) -> DecisionIndex:
        return self._index

    def refresh(self) -> None:
        with self._refresh_lock:
            if self._by_topic and time.monotonic() - self._tenants_looked_at >= self.TENANTS_EVERY_S:
                self._add_new_tenants()
            with self._scopes_lock:
                scopes = list(self._scopes.values())
            for scope in scopes:
                scope.live.refresh()

    def _add_new_tenants(self) -> None:
        self._tenants_looked_at = time.monotonic()
        for scope in topic_scopes(self._settings):
            if scope.tenant not in self._scopes:
                opened = _Scope(self._settings, scope, self._index, readers=1)
                with self._scopes_lock:
                    self._scopes[scope.tenant] = opened

    def lookup(self, tenant: str, decision_id: DecisionId) -> Listed | None:
        """The tenant's decision of this id: from the index of the newest, else through the lookup index.

        The in-memory index holds the newest DPM_UI_MAX_DECISIONS; any older one (last year's) is found
        through the host's lookup index and read at its places. Raises DpmError when it cannot be read.
        """
        found = self._index.get(tenant, decision_id)
        if found is not None:
            return found
        with self._scopes_lock:
            scopes = [s for s in (self._scopes.get(tenant) if self._by_topic else None, self._scopes.get(None)) if s]
        for scope in scopes:
            item = scope.looked_up(tenant, decision_id)
            if item is not None:
                return item
        return None

    def _scope(self, item: IndexedDecision) -> _Scope:
        with self._scopes_lock:
            own = self._scopes.get(item.case.tenant) if self._by_topic else None
            shared = self._scopes.get(None)
            read_from = item.record.events_topic  # None: a record older than tenancy by topic
            on_own = own is not None and (read_from is None or own.names.is_events(read_from))
            chosen = own if on_own and (shared is None or read_from is not None) else shared
            if chosen is None:
                raise DpmError(f"no topics of {item.case.tenant} hold decision {item.decision_id}")
            return chosen

    def start(self, interval_s: float) -> None:
        """Reads every output so far (failing loudly), then follows new ones every `interval_s`."""
        self.refresh()
        self._thread = threading.Thread(target=self._follow, args=(interval_s,), name="ui-index", daemon=True)
        self._thread.start()

    def _follow(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                self.refresh()
            except KafkaAdapterError as exc:
                self.refresh_failures += 1
                _LOG.warning("new outputs could not be read (next try in %.1f s): %s", interval_s, exc)

    def erased(self, items: Sequence[IndexedDecision]) -> set[CaseRef]:
        """The cases of `items` erased, as their scopes' key topics say now (each read once); KafkaAdapterError."""
        by_scope: dict[int, tuple[_Scope, list[IndexedDecision]]] = {}
        for item in items:
            scope = self._scope(item)
            by_scope.setdefault(id(scope), (scope, []))[1].append(item)
        return {case for scope, its in by_scope.values() for case in scope.live.erased(its)}

    def events(self, item: IndexedDecision) -> CaseEvents:
        scope = self._scope(item)
        try:
            trajectory = read_recorded_events(item.record, scope.events_of(item.record), scope.keys)
        except LogChangedError as exc:
            return CaseEvents(None, f"the recorded offsets now hold other records: {exc.detail}")
        return CaseEvents(trajectory, None if trajectory is not None else "erased: the case's data key is destroyed")

    def audits(self, item: IndexedDecision) -> list[AuditRecord]:
        scope = self._scope(item)
        return read_audits(item, scope.audit_log, scope.keys, scope.names.audit)

    def replay(self, item: IndexedDecision, audits: list[AuditRecord]) -> ReplayReport:
        """Re-reads the recorded offsets and re-runs the recorded backend, as `dpm replay --decision` does.

        `audits` are the decision's audit records (`audits(item)`). Raises DpmError when it cannot
        run (the broker or the model unreachable). Other pages are served meanwhile: only the read
        holds a Kafka reader, not the model calls.
        """
        scope = self._scope(item)
        return replay_one(item.record, item.view, audits, scope.events_of(item.record), self._backends,
                          recorded_only=False, cipher=scope.keys)  # fmt: skip

    def contest(self, item: IndexedDecision, audits: list[AuditRecord], events: CaseEvents,
                ask: ContestAsk) -> ContestDone:  # fmt: skip
        """Contests the decision as `dpm whatif` / `dpm explain` do, from what its page read, and publishes the record.

        Raises DpmError when it cannot (an erased case, a changed log, the model or the broker unreachable).
        """
        if item.view is None:
            raise ContestRefusedError(f"the view of {item.decision_id} has not been read yet")
        scope = self._scope(item)
        contested = contested_of(item.record, item.view.view, events.trajectory)
        found = Found(scope.names, item.record, contested, tuple(calls_in_order(audits)))
        require_contests_topic(self._settings, scope.names)  # refused before any model call
        done = run_contest(self._settings, found, ask)
        publish_contest(self._settings, found, done.record, scope.keys)
        return done

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        with self._refresh_lock, self._scopes_lock:
            for scope in self._scopes.values():
                scope.close()
            self._scopes.clear()
