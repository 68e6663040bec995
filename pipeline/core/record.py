"""Decision records and audit records: the wire forms of a run (schemas/decision.v1.json, audit.v1.json)."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from pipeline.core.events import CaseRef, LogPosition, Trajectory
from pipeline.core.hashing import events_digest, json_digest, text_digest
from pipeline.core.model import Purpose
from pipeline.core.run import RunResult
from pipeline.core.task import Budget, TaskSpec

DECISION_SCHEMA = "dpm.decision.v1"
AUDIT_SCHEMA = "dpm.audit.v1"
VIEW_SCHEMA = "dpm.view.v1"


@dataclass(frozen=True)
class Provenance:
    """Where a run's events came from and who ran it; supplied by the caller (worker or harness)."""

    decision_id: str
    positions: tuple[LogPosition, ...]
    positions_source: str  # "trigger": listed by the trigger; "scan": resolved by scanning the partition
    backend: str
    worker_id: str


def _prompt_digest(result: RunResult) -> str:
    """Digest of the memory-building prompt(s): the projection, or the ordered Summ-only requests."""
    memory = [c.request.digest for c in result.calls if c.request.purpose is not Purpose.DECIDE]
    return memory[0] if len(memory) == 1 else json_digest(memory)


def decision_record(
    result: RunResult, trajectory: Trajectory, task: TaskSpec, budget: Budget, provenance: Provenance
) -> dict[str, Any]:
    """The decision record: everything needed to replay and verify the decision."""
    memory_call = result.memory_call
    decision_call = result.calls[-1]
    usage_in = sum(c.response.usage.input_tokens for c in result.calls)
    usage_out = sum(c.response.usage.output_tokens for c in result.calls)
    check = result.check
    return {
        "schema": DECISION_SCHEMA,
        "decision_id": provenance.decision_id,
        "tenant": trajectory.case.tenant,
        "case_id": trajectory.case.case_id,
        "architecture": result.architecture.value,
        "variant": result.variant,
        "task": task.wire(),
        "budget_chars": budget.chars,
        "backend": provenance.backend,
        "model": decision_call.response.model,
        "params": {
            "temperature": decision_call.request.temperature,
            "max_tokens": memory_call.request.max_tokens if memory_call else decision_call.request.max_tokens,
        },
        "positions": [[p.partition, p.offset] for p in provenance.positions],
        "positions_source": provenance.positions_source,
        "events_count": len(trajectory),
        "events_sha256": events_digest(trajectory.events),
        "prompt_sha256": _prompt_digest(result),
        "raw_response_sha256": memory_call.response.raw_digest if memory_call else None,
        "view_sha256": text_digest(result.view_text),
        "view_chars": len(result.view_text),
        "view_checks": {
            "within_budget": check.within_budget,
            "budget_cut_chars": result.budget_cut_chars,
            "citations_total": check.citations_total,
            "citation_validity": check.citation_validity,
            "grounding_rate": check.grounding_rate,
            "ungrounded_facts": list(check.ungrounded_facts),
            "parse_problems": list(result.parse_problems),
        },
        "decision": {
            "label": result.decision.label,
            "rationale": result.decision.rationale,
            "notice": result.decision.notice,
            "problems": list(result.decision.problems),
        },
        "usage": {"input_tokens": usage_in, "output_tokens": usage_out},
        "cost_usd": round(sum(c.response.cost_usd for c in result.calls), 8),
        "llm_calls": len(result.calls),
        "latency_s": round(result.wall_s, 6),
        "worker_id": provenance.worker_id,
    }


def view_record(result: RunResult, case: CaseRef, decision_id: str) -> dict[str, Any]:
    """The memory view message: the view's text, its sections and its digest."""
    return {
        "schema": VIEW_SCHEMA,
        "decision_id": decision_id,
        "tenant": case.tenant,
        "case_id": case.case_id,
        "architecture": result.architecture.value,
        "view_sha256": text_digest(result.view_text),
        "view": result.view_text,
        "facts": [{"text": f.text, "citations": list(f.citations)} for f in result.view.facts],
        "reasoning": list(result.view.reasoning),
        "compliance_notes": list(result.view.compliance),
    }


def audit_records(result: RunResult, case: CaseRef, provenance: Provenance) -> list[dict[str, Any]]:
    """One record per model call, in call order: the exact request, the raw response bytes, usage and cost."""
    return [
        {
            "schema": AUDIT_SCHEMA,
            "decision_id": provenance.decision_id,
            "call_index": index,
            "calls_total": len(result.calls),
            "tenant": case.tenant,
            "case_id": case.case_id,
            "architecture": result.architecture.value,
            "purpose": call.request.purpose.value,
            "backend": provenance.backend,
            "model": call.response.model,
            "request": call.request.wire(),
            "request_sha256": call.request.digest,
            "raw_response_b64": base64.b64encode(call.response.raw).decode("ascii"),
            "raw_response_sha256": call.response.raw_digest,
            "response_text": call.response.text,
            "stop_reason": call.response.stop_reason,
            "usage": {
                "input_tokens": call.response.usage.input_tokens,
                "output_tokens": call.response.usage.output_tokens,
            },
            "cost_usd": call.response.cost_usd,
            "latency_s": round(call.response.latency_s, 6),
        }
        for index, call in enumerate(result.calls)
    ]
