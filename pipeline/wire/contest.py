"""The contest record (dpm.contest.v1): a what-if, a decisive-event analysis or an adverse decision's reasons.

One record per contest, on the scope's contests topic, keyed `tenant/case/contest id` and sealed under the
case's data key like the outputs (erasing the case erases it). It keeps every re-decision it made (`runs`:
the events left out or replaced, the label and the view's digest) and the model calls it asked anew, so
that with the contested decision's own audit records it replays by hash (services/contest.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from pipeline.core.contest import AdverseReasons, Decisive, EventChange, WhatIf
from pipeline.core.events import CaseRef
from pipeline.core.hashing import json_digest, text_digest
from pipeline.core.run import ModelCall
from pipeline.core.view import Fact
from pipeline.wire.audit import call_from_wire, call_to_wire
from pipeline.wire.rejection import RejectedError, Rejection
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.sealing import CaseCipher, opened_record, seal_body
from pipeline.wire.trigger import DecisionId


class ContestKind(StrEnum):
    WHATIF = "whatif"
    DECISIVE = "decisive"
    REASONS = "reasons"


@dataclass(frozen=True)
class Run:
    """One re-decision a contest made: which events it left out or replaced, and what came of it."""

    left_out: tuple[int, ...]
    replaced: tuple[int, ...]
    label: str | None
    view_sha256: str

    @classmethod
    def of(cls, outcome: WhatIf) -> Run:
        left = tuple(sorted(c.index for c in outcome.changes if c.left_out))
        replaced = tuple(sorted(c.index for c in outcome.changes if not c.left_out))
        return cls(left, replaced, outcome.label, text_digest(outcome.result.view_text))

    def wire(self) -> dict[str, Any]:
        return {"left_out": list(self.left_out), "replaced": list(self.replaced), "label": self.label,
                "view_sha256": self.view_sha256}  # fmt: skip


@dataclass(frozen=True)
class Asker:
    """Who asked for a contest, when, and why (the reason is case content: it is sealed)."""

    who: str
    at_ms: int
    why: str = ""


@dataclass(frozen=True)
class ContestRecord:
    """A contest of one published decision, as published and read back."""

    contest_id: str
    kind: ContestKind
    case: CaseRef
    decision_id: DecisionId
    asker: Asker
    backend: str
    model: str
    changes: tuple[EventChange, ...]
    runs: tuple[Run, ...]
    calls: tuple[ModelCall, ...]
    outcome: Mapping[str, Any]
    usage: Mapping[str, int | None]

    @property
    def record_key(self) -> bytes:
        """`tenant/case/contest id`: erasure finds a case's contests by its prefix, as it finds its other records."""
        return f"{self.case.key}/{self.contest_id}".encode()

    @property
    def runs_sha256(self) -> str:
        return json_digest([r.wire() for r in self.runs])

    def to_wire(self) -> dict[str, Any]:
        return {
            "schema": SchemaId.CONTEST.value, "contest_id": self.contest_id, "kind": self.kind.value,
            "tenant": self.case.tenant, "case_id": self.case.case_id, "decision_id": str(self.decision_id),
            "architecture": self.decision_id.architecture.value, "asked_by": self.asker.who,
            "asked_at_ms": self.asker.at_ms, "backend": self.backend, "model": self.model, "why": self.asker.why,
            "changes": [_change_wire(c) for c in self.changes], "runs": [r.wire() for r in self.runs],
            "calls": [call_to_wire(c) for c in self.calls], "outcome": dict(self.outcome), "usage": dict(self.usage),
            "runs_sha256": self.runs_sha256,
        }  # fmt: skip

    def encode(self, cipher: CaseCipher | None) -> bytes:
        return orjson.dumps(seal_body(self.to_wire(), cipher))

    @classmethod
    def decode(cls, data: bytes | None, cipher: CaseCipher | None) -> ContestRecord:
        """The record, opened and checked; raises RejectedError (CaseErasedError once the case is erased)."""
        body = opened_record(data, cipher, SchemaId.CONTEST, "contest record")
        record = cls(
            contest_id=body["contest_id"], kind=ContestKind(body["kind"]),
            case=CaseRef(body["tenant"], body["case_id"]), decision_id=DecisionId.parse(body["decision_id"]),
            asker=Asker(body["asked_by"], int(body["asked_at_ms"]), body["why"]), backend=body["backend"],
            model=body["model"], changes=tuple(_change_from_wire(c) for c in body["changes"]),
            runs=tuple(Run(tuple(r["left_out"]), tuple(r["replaced"]), r["label"], r["view_sha256"])
                       for r in body["runs"]),
            calls=tuple(call_from_wire(c) for c in body["calls"]), outcome=body["outcome"], usage=body["usage"],
        )  # fmt: skip
        if record.runs_sha256 != body["runs_sha256"]:
            raise RejectedError(Rejection.SCHEMA, "the contest's runs do not match their digest")
        return record


def new_contest_id() -> str:
    """A fresh contest id: 32 hex digits."""
    return uuid.uuid4().hex


def _change_wire(change: EventChange) -> dict[str, Any]:
    if change.left_out:
        return {"index": change.index, "action": "leave-out"}
    return {"index": change.index, "action": "replace", "kind": change.kind, "text": change.text}


def _change_from_wire(value: Mapping[str, Any]) -> EventChange:
    if value["action"] == "leave-out":
        return EventChange(int(value["index"]))
    return EventChange(int(value["index"]), str(value["kind"]), str(value["text"]))


def facts_wire(facts: Sequence[Fact]) -> list[dict[str, Any]]:
    """Facts as a contest's outcome lists them: text and citations."""
    return [{"text": f.text, "citations": list(f.citations)} for f in facts]


def whatif_outcome(outcome: WhatIf) -> dict[str, Any]:
    """A what-if's outcome field: both labels, the new view, the facts it added and removed."""
    return {"original_label": outcome.original_label, "label": outcome.label, "changed": outcome.changed,
            "view": outcome.result.view_text, "facts_added": facts_wire(outcome.facts_added),
            "facts_removed": facts_wire(outcome.facts_removed)}  # fmt: skip


def decisive_outcome(decisive: Decisive) -> dict[str, Any]:
    """A decisive analysis's outcome field: the label, the decisive groups, whether every candidate was tried."""
    return {"original_label": decisive.label, "decisive": [list(g) for g in decisive.groups],
            "complete": decisive.complete}  # fmt: skip


def reasons_outcome(reasons: AdverseReasons) -> dict[str, Any]:
    """An adverse decision's reasons as its contest records them."""
    rows = [{"rank": r.rank, "fact": r.fact.text, "citations": list(r.fact.citations),
             "changes_decision": r.changes_decision, "in_notice": r.in_notice} for r in reasons.reasons]  # fmt: skip
    return {"original_label": reasons.label, "heading": reasons.heading, "reasons": rows,
            "complete": reasons.complete}  # fmt: skip


def usage_of(runs: Sequence[WhatIf], calls: Sequence[ModelCall], reused: int, max_calls: int | None) -> dict[str, Any]:
    """What a contest cost (`calls` asked anew) beside what its re-decisions would have cost from scratch."""
    return {"calls": len(calls),
            "tokens": sum(c.response.usage.input_tokens + c.response.usage.output_tokens for c in calls),
            "reused_calls": reused, "from_scratch_calls": sum(r.from_scratch_calls for r in runs),
            "from_scratch_tokens": sum(r.from_scratch_tokens for r in runs), "max_calls": max_calls}  # fmt: skip
