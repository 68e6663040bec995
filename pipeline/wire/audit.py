"""The audit record (dpm.audit.v1): one per model call, with the exact request and the raw response bytes."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from pipeline.core.events import CaseRef
from pipeline.core.model import ModelRequest, ModelResponse, ResponseFormat, Usage, response_text
from pipeline.core.run import ModelCall, RunResult
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.trigger import DecisionId, DecisionKey


@dataclass(frozen=True)
class AuditRecord:
    decision_id: DecisionId
    call_index: int
    calls_total: int
    case: CaseRef
    backend: str
    call: ModelCall

    @property
    def key(self) -> DecisionKey:
        return DecisionKey(self.case.tenant, self.decision_id)

    @classmethod
    def from_run(cls, result: RunResult, case: CaseRef, decision_id: DecisionId, backend: str) -> list[AuditRecord]:
        """One record per model call, in call order."""
        total = len(result.calls)
        return [cls(decision_id, index, total, case, backend, call) for index, call in enumerate(result.calls)]

    def to_wire(self) -> dict[str, Any]:
        return {
            "schema": SchemaId.AUDIT.value,
            "decision_id": str(self.decision_id),
            "call_index": self.call_index,
            "calls_total": self.calls_total,
            "tenant": self.case.tenant,
            "case_id": self.case.case_id,
            "architecture": self.decision_id.architecture.value,
            "purpose": self.call.request.purpose.value,
            "backend": self.backend,
            **call_to_wire(self.call),
        }

    def encode(self) -> bytes:
        return orjson.dumps(self.to_wire())

    @classmethod
    def from_wire(cls, value: Mapping[str, Any]) -> AuditRecord:
        """Inverse of to_wire, for a schema-valid value."""
        case = CaseRef(value["tenant"], value["case_id"])
        return cls(DecisionId.parse(value["decision_id"]), int(value["call_index"]), int(value["calls_total"]), case,
                   value["backend"], call_from_wire(value))  # fmt: skip


def call_to_wire(call: ModelCall) -> dict[str, Any]:
    """A model call's fields as audit records (and the baseline's stored steps) carry them."""
    request, response = call.request, call.response
    return {
        "model": response.model,
        "request": request.wire(),
        "request_sha256": request.digest,
        "raw_response_b64": base64.b64encode(response.raw).decode("ascii"),
        "raw_response_sha256": response.raw_digest,
        "response_format": response.format.value,
        "response_text": response.text,
        "stop_reason": response.stop_reason,
        "usage": response.usage.wire(),
        "cost_usd": response.cost_usd,
        "latency_s": response.latency_s,
        "serving": dict(response.serving),
    }


def call_from_wire(value: Mapping[str, Any]) -> ModelCall:
    """Inverse of call_to_wire; the response text is re-read from the raw bytes in their format, as replay does."""
    return ModelCall(ModelRequest.from_wire(value["request"]), response_from_wire(value))


def response_from_wire(value: Mapping[str, Any]) -> ModelResponse:
    """The response half of call_to_wire's value. Records written before formats were named hold Messages API bodies."""
    raw = base64.b64decode(value["raw_response_b64"])
    usage = value.get("usage", {})
    layout = ResponseFormat(value.get("response_format", ResponseFormat.ANTHROPIC_MESSAGES.value))
    return ModelResponse(
        text=response_text(raw, layout),
        raw=raw,
        model=value["model"],
        usage=Usage.from_wire(usage),
        cost_usd=float(value["cost_usd"]),
        latency_s=float(value["latency_s"]),
        stop_reason=str(value.get("stop_reason", "end_turn")),
        format=layout,
        serving=tuple(sorted((str(k), str(v)) for k, v in value.get("serving", {}).items())),
    )


def calls_in_order(audits: Iterable[AuditRecord]) -> list[ModelCall]:
    """A decision's recorded model calls, in call order."""
    return [a.call for a in sorted(audits, key=lambda a: a.call_index)]
