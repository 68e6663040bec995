"""What the auditor's pages list and show: decisions as found through the host's lookup index.

The pages hold no topic in memory: a list page is one page of the lookup index (newest first, by
cursor: services/auditor.py), whose decisions are read at their places; a decision page reads
its own records, its audit records by offset and its case's recorded events.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass, field

import orjson

from pipeline.core.event_log import EventLog
from pipeline.core.events import CaseRef, LogPosition
from pipeline.core.task import Architecture
from pipeline.keys.store import CaseKeys
from pipeline.services.read_outputs import PublishedOutputs, decoded
from pipeline.wire.audit import AuditRecord
from pipeline.wire.decision import DecisionRecord
from pipeline.wire.trigger import DecisionId
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


Cursor = tuple[int, str, str]  # where a decision is in a list: (publish time, decision id, tenant)


@dataclass(frozen=True)
class ListPage:
    """One page of a list, newest first, with the cursors of the pages beside it (None: there is none)."""

    items: tuple[Listed, ...]
    newer: Cursor | None  # the list goes on after (newer than) this: the page before
    older: Cursor | None  # the list goes on before (older than) this: the page after


def page_token(cursor: Cursor) -> str:
    """A cursor as a URL's query parameter (opaque to the reader)."""
    return base64.urlsafe_b64encode(orjson.dumps(list(cursor))).decode().rstrip("=")


def page_cursor(token: str) -> Cursor:
    """The cursor of a `page_token`; ValueError for one that is none."""
    try:
        return _cursor(orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))))
    except (binascii.Error, orjson.JSONDecodeError, TypeError, ValueError) as exc:
        raise ValueError(f"{token!r} is no page of this list") from exc


def _cursor(value: object) -> Cursor:
    match value:
        case [int() as at_ms, str() as decision_id, str() as tenant] if not isinstance(at_ms, bool):
            return at_ms, decision_id, tenant
    raise TypeError(f"not a cursor: {value!r}")


def read_audits(item: IndexedDecision, log: EventLog, keys: CaseKeys | None, topic: str) -> list[AuditRecord]:
    """A decision's audit records, in call order, read by their positions in the audit topic."""
    positions: Sequence[LogPosition] = [item.audit_positions[i] for i in sorted(item.audit_positions)]
    sink = PublishedOutputs()
    return [opened.record for opened in decoded(log.read(positions).records, topic, AuditRecord.from_wire, sink, keys)]
