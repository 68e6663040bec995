"""What the client returns: where an event was appended, and a decision with its facts resolved to their events."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.core.events import Event, LogPosition
from pipeline.core.explanation import FactRow
from pipeline.wire.decision import DecisionRecord
from pipeline.wire.view import ViewRecord


@dataclass(frozen=True)
class EventPosition:
    """Where an appended event is: its seq in the case, and its place in the events topic."""

    case_id: str
    seq: int
    position: LogPosition


@dataclass(frozen=True)
class CitedEvent:
    """An event a fact cites, as the log holds it."""

    seq: int
    kind: str
    text: str
    position: LogPosition


@dataclass(frozen=True)
class Fact:
    """One fact of the decision's memory view and the events it cites (an index the case does not have is dropped)."""

    text: str
    cites: tuple[CitedEvent, ...]


@dataclass(frozen=True)
class ModelUsage:
    """The model calls a decision made and what they cost, as its record says."""

    backend: str
    model: str
    calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float


@dataclass(frozen=True)
class Decision:
    """A published decision: its label and rationale, its memory view (facts with their events), its calls."""

    decision_id: str
    tenant: str
    case_id: str
    label: str | None  # None: the model's answer named no label of the task's
    rationale: str
    facts: tuple[Fact, ...]
    reasoning: tuple[str, ...]
    compliance: tuple[str, ...]
    usage: ModelUsage
    record: DecisionRecord  # everything replay needs (positions, digests, window)
    view: ViewRecord

    def to_json(self) -> dict[str, Any]:
        """The decision as the HTTP API and the MCP tools give it (no record internals)."""
        return {
            "decision_id": self.decision_id,
            "case_id": self.case_id,
            "label": self.label,
            "rationale": self.rationale,
            "facts": [{"text": f.text, "cites": [{"seq": c.seq, "kind": c.kind, "text": c.text,
                                                  "partition": c.position.partition, "offset": c.position.offset}
                                                 for c in f.cites]} for f in self.facts],
            "reasoning": list(self.reasoning),
            "compliance": list(self.compliance),
            "usage": {"backend": self.usage.backend, "model": self.usage.model, "calls": self.usage.calls,
                      "input_tokens": self.usage.input_tokens, "output_tokens": self.usage.output_tokens,
                      "cost_usd": self.usage.cost_usd},
            "replay_command": self.replay_command,
        }  # fmt: skip

    @property
    def replay_command(self) -> str:
        """The command that replays this decision from its recorded offsets and verifies it by hash."""
        return f"dpm replay --tenant {shlex.quote(self.tenant)} --decision {shlex.quote(self.decision_id)}"

    @classmethod
    def of(cls, record: DecisionRecord, view: ViewRecord, cited: Mapping[int, Event]) -> Decision:
        """The decision of a record and its view; `cited` holds the cited events by their 1-based index in the case."""

        def event(index: int) -> CitedEvent:
            found = cited[index]
            return CitedEvent(found.seq, found.kind, found.text, record.positions[index - 1])

        facts = tuple(Fact(f.text, tuple(event(i) for i in f.citations if i in cited)) for f in view.view.facts)
        usage = ModelUsage(record.backend, record.model, record.llm_calls, record.usage.input_tokens,
                           record.usage.output_tokens, record.cost_usd)  # fmt: skip
        return cls(str(record.decision_id), record.case.tenant, record.case.case_id, record.outcome.label,
                   record.outcome.rationale, facts, view.view.reasoning, view.view.compliance, usage, record,
                   view)  # fmt: skip


@dataclass(frozen=True)
class Explanation:
    """A decision and its facts checked against its events as read now: citations exist, figures are in them."""

    decision: Decision
    facts: tuple[FactRow, ...]
    events_unreadable: str | None = None  # why the checks could not be made ("erased", "log changed: ...")


def cited_indexes(view: ViewRecord, events_count: int) -> list[int]:
    """The 1-based event indexes the view's facts cite that the case has, in order, each once."""
    return sorted({i for fact in view.view.facts for i in fact.citations if 1 <= i <= events_count})


@dataclass(frozen=True)
class Contest:
    """A published contest of a decision (a what-if, a decisive analysis, its reasons), replayed from its record.

    `kind` is None when its content cannot be read (its case is erased); `replay` is MATCH when every
    re-decision it records reproduces from its recorded answers (no model call).
    """

    contest_id: str
    kind: str | None
    replay: str
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"contest_id": self.contest_id, "kind": self.kind, "replay": self.replay, "detail": self.detail}
