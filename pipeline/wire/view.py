"""The memory view record (dpm.view.v1): the view's text, its sections and its digest."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from pipeline.core.events import CaseRef
from pipeline.core.hashing import text_digest
from pipeline.core.run import RunResult
from pipeline.core.view import Fact, MemoryView
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.trigger import DecisionId, DecisionKey


@dataclass(frozen=True)
class ViewRecord:
    decision_id: DecisionId
    case: CaseRef
    view_sha256: str
    text: str
    view: MemoryView

    @property
    def key(self) -> DecisionKey:
        return DecisionKey(self.case.tenant, self.decision_id)

    @classmethod
    def from_run(cls, result: RunResult, case: CaseRef, decision_id: DecisionId) -> ViewRecord:
        return cls(decision_id, case, text_digest(result.view_text), result.view_text, result.view)

    def to_wire(self) -> dict[str, Any]:
        return {
            "schema": SchemaId.VIEW.value,
            "decision_id": str(self.decision_id),
            "tenant": self.case.tenant,
            "case_id": self.case.case_id,
            "architecture": self.decision_id.architecture.value,
            "view_sha256": self.view_sha256,
            "view": self.text,
            "facts": [{"text": f.text, "citations": list(f.citations)} for f in self.view.facts],
            "reasoning": list(self.view.reasoning),
            "compliance_notes": list(self.view.compliance),
        }

    def encode(self) -> bytes:
        return orjson.dumps(self.to_wire())

    @classmethod
    def from_wire(cls, value: Mapping[str, Any]) -> ViewRecord:
        """Inverse of to_wire, for a schema-valid value."""
        view = MemoryView(
            tuple(Fact(f["text"], tuple(f["citations"])) for f in value["facts"]),
            tuple(value["reasoning"]),
            tuple(value["compliance_notes"]),
        )
        case = CaseRef(value["tenant"], value["case_id"])
        return cls(DecisionId.parse(value["decision_id"]), case, value["view_sha256"], value["view"], view)
