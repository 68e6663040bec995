"""The auditor's index: published decisions, their views and where their audit records are, in memory.

Built by following the output topics (each record read once; the auditor service refreshes it from
a thread of its own), so a page never re-reads a topic: a decision page reads only its own audit records (by offset)
and its case's recorded events.

Memory is bounded by `capacity` decisions, newest kept: each holds its decision record (with one
position per event read), its view (at most its budget in characters) and one position per audit
record; audit records themselves (prompts and raw answers) stay in Kafka. Measured with tracemalloc:
about 10 KB per decision of a 10-event case and 19 KB of a 90-event case, with 900-character views.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.core.event_log import EventLog
from pipeline.core.events import CaseRef, LogPosition
from pipeline.core.task import Architecture
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.reading.follow import TopicFollower
from pipeline.keys.store import CaseKeys
from pipeline.services.read_outputs import Opened, OutputRecord, PublishedOutputs, decoded
from pipeline.wire.audit import AuditRecord
from pipeline.wire.decision import DecisionRecord
from pipeline.wire.trigger import DecisionId, DecisionKey
from pipeline.wire.view import ViewRecord


@dataclass
class IndexedDecision:
    """A decision as the pages show it; `audit_positions` maps call index to where its audit record is."""

    record: DecisionRecord
    decided_ms: int
    sealed: bool
    view: ViewRecord | None = None
    audit_positions: dict[int, LogPosition] = field(default_factory=dict)

    @property
    def decision_id(self) -> DecisionId:
        return self.record.decision_id

    @property
    def case(self) -> CaseRef:
        return self.record.case


@dataclass(frozen=True)
class ErasedDecision:
    """A decision of an erased case: its id and case, nothing of its content."""

    decision_id: DecisionId
    case: CaseRef
    decided_ms: int


Listed = IndexedDecision | ErasedDecision


@dataclass(frozen=True)
class DecisionFilter:
    """What a list shows: every field None matches all; `label` matches no erased decision."""

    tenant: str | None = None
    case_id: str | None = None
    architecture: Architecture | None = None
    label: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None

    def matches(self, item: Listed) -> bool:
        if self.tenant is not None and item.case.tenant != self.tenant:
            return False
        if self.case_id is not None and item.case.case_id != self.case_id:
            return False
        if self.architecture is not None and item.decision_id.architecture is not self.architecture:
            return False
        if self.since_ms is not None and item.decided_ms < self.since_ms:
            return False
        if self.until_ms is not None and item.decided_ms > self.until_ms:
            return False
        return self.label is None or (isinstance(item, IndexedDecision) and item.record.outcome.label == self.label)


@dataclass(frozen=True)
class Page:
    items: tuple[Listed, ...]
    number: int  # 1-based
    pages: int
    total: int


class DecisionIndex:
    """The newest `capacity` decisions (and erased ones), with views and audit positions; thread-safe.

    The first committed decision of a tenant's id is kept, as every reader keeps it; views and audit
    records that arrive before their decision wait for it in bounded maps.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[DecisionKey, Listed] = OrderedDict()
        self._early_views: OrderedDict[DecisionKey, ViewRecord] = OrderedDict()
        self._early_audits: OrderedDict[DecisionKey, dict[int, LogPosition]] = OrderedDict()
        self._lock = threading.Lock()
        self.duplicates = 0
        self.dropped = 0  # evicted as the oldest beyond capacity

    def __len__(self) -> int:
        return len(self._items)

    def add_decision(self, record: DecisionRecord, decided_ms: int, *, sealed: bool) -> None:
        key = record.key
        with self._lock:
            if key in self._items:
                self.duplicates += 1
                return
            item = IndexedDecision(record, decided_ms, sealed, self._early_views.pop(key, None),
                                   self._early_audits.pop(key, {}))  # fmt: skip
            self._insert(key, item)

    def add_erased(self, key: DecisionKey, case: CaseRef, decided_ms: int) -> None:
        with self._lock:
            if key not in self._items:
                self._insert(key, ErasedDecision(key.decision_id, case, decided_ms))

    def add_view(self, view: ViewRecord) -> None:
        key = view.key
        with self._lock:
            item = self._items.get(key)
            if isinstance(item, IndexedDecision):
                item.view = item.view or view
            elif item is None:
                self._early(self._early_views, key, view)

    def add_audit(self, audit: AuditRecord, position: LogPosition) -> None:
        key = audit.key
        with self._lock:
            item = self._items.get(key)
            if isinstance(item, IndexedDecision):
                item.audit_positions.setdefault(audit.call_index, position)
            elif item is None:
                positions = self._early_audits.get(key) or {}
                positions.setdefault(audit.call_index, position)
                self._early(self._early_audits, key, positions)

    def _early(self, waiting: OrderedDict[DecisionKey, Any], key: DecisionKey, value: object) -> None:
        waiting[key] = value
        while len(waiting) > self.capacity:
            waiting.popitem(last=False)

    def _insert(self, key: DecisionKey, item: Listed) -> None:
        self._items[key] = item
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)
            self.dropped += 1

    def erase_case(self, case: CaseRef) -> int:
        """Drops the content of the case's decisions, keeping them listed as erased; returns how many."""
        with self._lock:
            keys = [k for k, i in self._items.items() if isinstance(i, IndexedDecision) and i.case == case]
            for key in keys:
                self._items[key] = ErasedDecision(key.decision_id, case, self._items[key].decided_ms)
            return len(keys)

    def get(self, tenant: str, decision_id: DecisionId) -> Listed | None:
        with self._lock:
            return self._items.get(DecisionKey(tenant, decision_id))

    def query(self, wanted: DecisionFilter, number: int = 1, per_page: int = 50) -> Page:
        """The matching decisions, newest first, one page of them."""
        with self._lock:
            matching = [i for i in self._items.values() if wanted.matches(i)]
        matching.sort(key=lambda i: (i.decided_ms, str(i.decision_id)), reverse=True)
        pages = max(1, -(-len(matching) // per_page))
        number = min(max(1, number), pages)
        start = (number - 1) * per_page
        return Page(tuple(matching[start : start + per_page]), number, pages, len(matching))

    def labels(self, tenant: str | None) -> list[str]:
        """The labels decided so far (of one tenant, or all), for the list's filter."""
        with self._lock:
            return sorted({i.record.outcome.label for i in self._items.values() if isinstance(i, IndexedDecision)
                           and i.record.outcome.label and tenant in (None, i.case.tenant)})  # fmt: skip


class LiveIndex:
    """Fills a DecisionIndex from the output topics; each refresh reads what was published since the last.

    Erasure reaches the index at the next refresh: a case the key topic says erased (a tombstone or
    an erased marker, with encryption off too) or whose sealed decisions' key is gone keeps its
    decisions listed as erased, their content dropped from memory. The pages do not wait for it:
    they ask `erased` before they show a decision's content.
    """

    def __init__(
        self, client_config: dict[str, str], names: TopicNames, keys: CaseKeys | None, index: DecisionIndex
    ) -> None:
        """Follows `names`' output topics into `index`, which the output topics of other tenants may fill too."""
        self.index = index
        self._keys = keys
        # The cases of the sealed decisions this follower indexed: its keys know those only (another
        # scope's cases, the shared topics' beside a tenant's own, are another follower's to erase).
        self._sealed: set[CaseRef] = set()
        self._cases: set[CaseRef] = set()  # of every decision indexed, sealed or not
        self._decisions = TopicFollower(client_config, names.decisions)
        self._views = TopicFollower(client_config, names.views)
        self._audits = TopicFollower(client_config, names.audit)

    def refresh(self) -> None:
        """Reads what was published since the last refresh and applies erasures."""
        sink = PublishedOutputs()  # erased and unreadable records land here
        if self._keys is not None:
            self._keys.sync()
        for decision in self._decoded(self._decisions, DecisionRecord.from_wire, sink):
            self.index.add_decision(decision.record, decision.raw.timestamp_ms or 0, sealed=decision.sealed)
            self._cases.add(decision.record.case)
            if decision.sealed:
                self._sealed.add(decision.record.case)
        for view in self._decoded(self._views, ViewRecord.from_wire, sink):
            self.index.add_view(view.record)
        for audit in self._decoded(self._audits, AuditRecord.from_wire, sink):
            self.index.add_audit(audit.record, audit.raw.position)
        for key, case in sink.erased.items():
            self.index.add_erased(key, case, sink.erased_ms.get(key, 0))
        for case in [c for c in self._cases if self._gone(c, sealed=c in self._sealed)]:
            self.index.erase_case(case)
            self._cases.discard(case)
            self._sealed.discard(case)

    def erased(self, items: Iterable[IndexedDecision]) -> set[CaseRef]:
        """The cases of `items` erased, as the key topic says now (read first); raises KafkaAdapterError."""
        if self._keys is None:
            return set()
        self._keys.sync()
        return {item.case for item in items if self._gone(item.case, sealed=item.sealed)}

    def _gone(self, case: CaseRef, *, sealed: bool) -> bool:
        """Erased as far as the keys last read: an erasure read, or the key of its sealed decisions gone."""
        return self._keys is not None and (self._keys.erased(case) or (sealed and not self._keys.knows(case)))

    def _decoded(self, follower: TopicFollower, decode: Callable[[Mapping[str, Any]], OutputRecord],
                 sink: PublishedOutputs) -> Iterator[Opened[OutputRecord]]:  # fmt: skip
        return decoded(follower.new_records(), follower.topic, decode, sink, self._keys)

    def close(self) -> None:
        for follower in (self._decisions, self._views, self._audits):
            follower.close()


def read_audits(item: IndexedDecision, log: EventLog, keys: CaseKeys | None, topic: str) -> list[AuditRecord]:
    """A decision's audit records, in call order, read by their positions in the audit topic."""
    positions: Sequence[LogPosition] = [item.audit_positions[i] for i in sorted(item.audit_positions)]
    sink = PublishedOutputs()
    return [opened.record for opened in decoded(log.read(positions).records, topic, AuditRecord.from_wire, sink, keys)]
