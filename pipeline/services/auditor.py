"""What the auditor's pages read through: the lookup index, a decision's events and audit records, replay, contests."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.config.settings import Settings
from pipeline.core.domains import DOMAINS
from pipeline.core.errors import DpmError
from pipeline.core.events import CaseRef, LogPosition, Trajectory
from pipeline.core.verification import ReplayReport
from pipeline.kafka.cluster.layout import current_generation
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.errors import KafkaAdapterError
from pipeline.kafka.keytopic.keystore import case_keys_from
from pipeline.kafka.reading.index_store import Entry, Listing, cursor_of, unplace
from pipeline.kafka.reading.places import PlaceReader
from pipeline.kafka.reading.reader import KafkaEventLog, PooledLog
from pipeline.services.audit_index import (
    Cursor,
    DecisionFilter,
    ErasedDecision,
    IndexedDecision,
    Listed,
    ListPage,
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
    """One set of output topics (the shared ones, or a tenant's own): its lookup index, kept current, and readers."""

    def __init__(self, settings: Settings, names: TopicNames, readers: int) -> None:
        config = settings.kafka.client_config()
        self.names = names
        self._places = PlaceReader(config)  # the index's reads and the case keys': one connection
        self.keys = case_keys_from(settings, client_config=config, names=names, by_case=True, reader=self._places)
        try:
            self.index = open_index(settings, names, config, self._places)
        except DpmError:
            self.keys.close()  # nothing of a scope that cannot be opened is left open
            self._places.close()
            raise
        self._config, self._readers = config, readers
        self._events: dict[str, PooledLog] = {}  # events topic (one per generation) -> its readers, opened on use
        self._events_lock = threading.Lock()
        self.audit_log = PooledLog([KafkaEventLog(config, names.audit) for _ in range(readers)])

    def start(self) -> None:
        """Brings the index up to date (what was published since this host last read), then keeps it current."""
        self.index.catch_up()
        self.index.keep_current()

    def entries(self, wanted: Listing, limit: int) -> list[tuple[Entry, _Scope]]:
        return [(entry, self) for entry in self.index.store.listing(wanted, limit)]

    def items(self, entries: Sequence[Entry]) -> dict[DecisionKey, Listed]:
        """The decisions of `entries`, read at their places and opened (erased ones as such); unreadable ones not."""
        outputs = published(self.index, entries, self.keys, with_audits=False)
        found: dict[DecisionKey, Listed] = {}
        for entry in entries:
            key = DecisionKey(entry.tenant, DecisionId.parse(entry.decision_id))
            if key in outputs.erased:
                found[key] = ErasedDecision(key.decision_id, outputs.erased[key], entry.at_ms or 0)
            elif (record := outputs.decisions.get(key)) is not None:
                positions = {call: LogPosition(*unplace(where)) for call, where in entry.audits}
                found[key] = IndexedDecision(record, entry.at_ms or 0, key in outputs.sealed, outputs.views.get(key),
                                             positions)  # fmt: skip
        return found

    def looked_up(self, tenant: str, decision_id: DecisionId) -> Listed | None:
        """The tenant's decision of this id through the lookup index: any published, oldest included."""
        entries = self.index.entries(str(decision_id), tenant)
        return self.items(entries[:1]).get(DecisionKey(tenant, decision_id)) if entries else None

    def erased(self, items: Sequence[IndexedDecision]) -> set[CaseRef]:
        """The cases of `items` erased as the key topic says now (read first), marked so in the index."""
        self.keys.sync()
        gone = {i.case for i in items if self.keys.erased(i.case) or (i.sealed and not self.keys.knows(i.case))}
        for tenant in {case.tenant for case in gone}:
            self.index.mark_erased(tenant, [case.case_id for case in gone if case.tenant == tenant])
        return gone

    def events_of(self, record: DecisionRecord) -> PooledLog:
        """The readers of the events topic the decision read (v1 records: the first generation's)."""
        topic = record.events_topic or self.names.of_generation(1).events
        with self._events_lock:
            if topic not in self._events:
                self._events[topic] = PooledLog([KafkaEventLog(self._config, topic) for _ in range(self._readers)])
            return self._events[topic]

    def close(self) -> None:
        self.index.close()
        self.keys.close()
        self._places.close()
        with self._events_lock:
            for log in self._events.values():
                log.close()
        self.audit_log.close()


class KafkaAuditor:
    """The host's lookup index of the output topics, kept current, and reads by offset for one decision at a time.

    Nothing of the topics is held in memory: a list page is one page of the index (by cursor), whose
    decisions are read at their places; a decision page reads its own records. Reads go through pools
    of DPM_UI_CONCURRENCY Kafka readers (one for events, one for audit records): that many pages
    read at once, and a page holds a reader only while it reads. With tenancy by topic the shared
    topics (where they exist) and every tenant's own are indexed, each in its own file (tenants
    onboarded later are found at the next look, every TENANTS_EVERY_S), and a list merges them; each
    then has one reader of each kind. A decision is read back from the scope that owns the events
    topic it read: a tenant decided on the shared topics before it got its own is audited in both.
    """

    TENANTS_EVERY_S = 10.0

    def __init__(self, settings: Settings, names: TopicNames | None = None) -> None:
        self._settings = settings
        self._by_topic = settings.kafka.tenancy == "topics" and names is None
        base = TopicNames(settings.kafka.topic_prefix)
        self.names = names or (base if self._by_topic else current_generation(settings.kafka.client_config(), base))
        self._scopes: dict[str | None, _Scope] = {}
        if not self._by_topic:
            self._scopes[None] = _Scope(settings, self.names, settings.ui.concurrency)
        self._tenants_looked_at = -math.inf
        self._backends = registry_backends(settings.model, None)
        self._refresh_lock = threading.Lock()
        self._scopes_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.refresh_failures = 0

    def refresh(self) -> None:
        """Opens the scopes of tenants onboarded since the last look and brings every scope's index up to date."""
        with self._refresh_lock:
            self._add_new_tenants()
            for scope in self._all():
                scope.index.catch_up()

    def _add_new_tenants(self) -> list[_Scope]:
        """The scopes of tenants onboarded since the last look (tenancy by topic), opened; at most every 10 s.

        A tenant whose topics cannot be opened yet (made a moment ago, or half made) is logged and
        looked at again next time; the others are opened all the same.
        """
        if not self._by_topic or time.monotonic() - self._tenants_looked_at < self.TENANTS_EVERY_S:
            return []
        self._tenants_looked_at = time.monotonic()
        opened = []
        for names in topic_scopes(self._settings):
            if names.tenant in self._scopes:
                continue
            try:
                scope = _Scope(self._settings, names, readers=1)
            except DpmError as exc:
                _LOG.warning("the topics of tenant %s cannot be indexed yet (looked at again in %.0f s): %s",
                             names.tenant, self.TENANTS_EVERY_S, exc)  # fmt: skip
                continue
            with self._scopes_lock:
                self._scopes[names.tenant] = scope
            opened.append(scope)
        return opened

    def _all(self) -> list[_Scope]:
        with self._scopes_lock:
            return list(self._scopes.values())

    def _of(self, tenant: str | None) -> list[_Scope]:
        """The scopes that may hold `tenant`'s decisions (every scope for None: an admin's list)."""
        if tenant is None or not self._by_topic:
            return self._all()
        with self._scopes_lock:
            return [s for s in (self._scopes.get(tenant), self._scopes.get(None)) if s is not None]

    def listing(self, wanted: DecisionFilter, limit: int, *, before: Cursor | None = None,
                after: Cursor | None = None) -> ListPage:  # fmt: skip
        """One page of the decisions `wanted`, newest first: the first, or the one before `before` or after `after`.

        Each scope's index gives its page; they are merged by time. A label is checked on the opened
        decisions of a sealed pipeline (the index holds no sealed label), so such a page may hold fewer
        than `limit`: its cost stays one page's. Raises DpmError when a page's records cannot be read.
        """
        architecture = None if wanted.architecture is None else wanted.architecture.value
        asked = Listing(wanted.tenant, wanted.case_id, architecture, wanted.label, wanted.since_ms, wanted.until_ms,
                        before, after)  # fmt: skip
        found = sorted((pair for scope in self._of(wanted.tenant) for pair in scope.entries(asked, limit + 1)),
                       key=lambda pair: cursor_of(pair[0]), reverse=True)  # fmt: skip
        more = len(found) > limit
        chosen = found[-limit:] if after is not None else found[:limit]  # the nearest to the cursor
        by_scope: dict[int, tuple[_Scope, list[Entry]]] = {}
        for entry, scope in chosen:
            by_scope.setdefault(id(scope), (scope, []))[1].append(entry)
        items = {key: item for scope, entries in by_scope.values() for key, item in scope.items(entries).items()}
        in_order = (items.get(DecisionKey(e.tenant, DecisionId.parse(e.decision_id))) for e, _ in chosen)
        listed = tuple(item for item in in_order if item is not None and _labelled(item, wanted.label))
        first, last = (cursor_of(chosen[0][0]), cursor_of(chosen[-1][0])) if chosen else (None, None)
        newer = first if (after is not None and more) or (after is None and before is not None) else None
        older = last if (after is None and more) or after is not None else None
        return ListPage(listed, newer, older)

    def decided(self) -> int:
        """How many decision records the scopes' indexes hold (what /healthz says)."""
        return sum(scope.index.store.decided() for scope in self._all())

    def labels(self, tenant: str | None) -> list[str]:
        """The labels to filter by: the known domains', and those of decisions indexed in clear (of `tenant`)."""
        known = {label for rules in DOMAINS.values() for label in rules.label_space}
        return sorted(known | {label for scope in self._of(tenant) for label in scope.index.store.labels(tenant)})

    def lookup(self, tenant: str, decision_id: DecisionId) -> Listed | None:
        """The tenant's decision of this id, any ever published, through the lookup index.

        Raises DpmError when it cannot be read.
        """
        for scope in self._of(tenant):
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
        """Brings every scope's index up to date (failing loudly), then keeps them current from threads of their own.

        Every `interval_s` (and at most every TENANTS_EVERY_S) it looks for tenants onboarded since
        (tenancy by topic).
        """
        self.refresh()
        for scope in self._all():
            scope.start()
        self._thread = threading.Thread(target=self._follow, args=(interval_s,), name="ui-tenants", daemon=True)
        self._thread.start()

    def _follow(self, interval_s: float) -> None:
        """Opens and starts the scopes of tenants onboarded since (each scope's own thread keeps its index current)."""
        while not self._stop.wait(interval_s):
            try:
                with self._refresh_lock:
                    for scope in self._add_new_tenants():
                        scope.start()
            except KafkaAdapterError as exc:
                self.refresh_failures += 1
                _LOG.warning("new tenants' outputs could not be read (next try in %.1f s): %s", interval_s, exc)

    def erased(self, items: Sequence[IndexedDecision]) -> set[CaseRef]:
        """The cases of `items` erased, as their scopes' key topics say now (each read once), marked in the index.

        Raises KafkaAdapterError.
        """
        by_scope: dict[int, tuple[_Scope, list[IndexedDecision]]] = {}
        for item in items:
            scope = self._scope(item)
            by_scope.setdefault(id(scope), (scope, []))[1].append(item)
        return {case for scope, its in by_scope.values() for case in scope.erased(its)}

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


def _labelled(item: Listed, label: str | None) -> bool:
    """Whether `item` has `label` (any for None); an erased decision has none."""
    return label is None or (isinstance(item, IndexedDecision) and item.record.outcome.label == label)
