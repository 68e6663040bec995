"""The decision record (dpm.decision.v2; v1 read too): everything needed to replay and verify one decision."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from pipeline.core.decision import Decision
from pipeline.core.events import CaseRef, LogPosition, Trajectory
from pipeline.core.hashing import events_digest, json_digest, text_digest
from pipeline.core.model import Purpose, Usage
from pipeline.core.prompt import PromptLayout
from pipeline.core.run import RunResult, SummVariant
from pipeline.core.segments import SegmentNode
from pipeline.core.task import Architecture, Budget, TaskSpec
from pipeline.core.verification import ReplayTarget
from pipeline.core.window import Window
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.trigger import DecisionId, DecisionKey
from pipeline.wire.validation import SchemaError


class PositionsSource(StrEnum):
    """Where a decision's positions came from."""

    TRIGGER = "trigger"  # listed by the trigger
    SCAN = "scan"  # resolved by scanning the case's partition
    IN_MEMORY = "in-memory"  # the evaluation's in-memory log


@dataclass(frozen=True)
class Provenance:
    """Where a run's events came from and who ran it; supplied by the caller (worker or harness)."""

    decision_id: DecisionId
    positions: tuple[LogPosition, ...]
    positions_source: PositionsSource
    backend: str
    worker_id: str
    events_topic: str | None = None  # the topic the positions are offsets of; None: read from memory


@dataclass(frozen=True)
class ViewChecks:
    """The view's budget and citation findings, as recorded."""

    within_budget: bool
    budget_cut_chars: int
    citations_total: int
    citation_validity: float | None
    grounding_rate: float | None
    ungrounded_facts: tuple[str, ...]
    parse_problems: tuple[str, ...]


@dataclass(frozen=True)
class DecisionRecord:
    decision_id: DecisionId
    case: CaseRef
    variant: SummVariant | None
    task: TaskSpec
    budget_chars: int
    backend: str
    model: str
    temperature: float
    max_tokens: int
    positions: tuple[LogPosition, ...]
    positions_source: PositionsSource
    events_count: int
    events_sha256: str
    prompt_sha256: str
    raw_response_sha256: str | None
    view_sha256: str
    view_chars: int
    view_checks: ViewChecks
    outcome: Decision
    usage: Usage
    cost_usd: float
    llm_calls: int
    latency_s: float
    worker_id: str
    # A DPM decision of a case longer than its model's window: the window and the segment tree.
    window: Window | None = None
    segments: tuple[SegmentNode, ...] = ()
    # The events topic the positions are offsets of (v2). None: a v1 record, or an in-memory run;
    # its positions are offsets of its scope's events topic.
    events_topic: str | None = None
    # Where its projection prompts put the log (core/prompt.py): replay builds them the same way.
    prompt_layout: PromptLayout = PromptLayout.TASK_FIRST

    @property
    def architecture(self) -> Architecture:
        return self.decision_id.architecture

    @property
    def key(self) -> DecisionKey:
        return DecisionKey(self.case.tenant, self.decision_id)

    @property
    def total_tokens(self) -> int:
        return self.usage.input_tokens + self.usage.output_tokens

    def replay_target(self) -> ReplayTarget:
        return ReplayTarget(self.architecture, self.variant, self.task, Budget(self.budget_chars),
                            self.events_sha256, self.view_sha256, self.raw_response_sha256, self.window,
                            self.segments, self.prompt_layout)  # fmt: skip

    @classmethod
    def from_run(
        cls, result: RunResult, trajectory: Trajectory, task: TaskSpec, budget: Budget, provenance: Provenance
    ) -> DecisionRecord:
        memory_call, decision_call = result.memory_call, result.calls[-1]
        check = result.check
        return cls(
            decision_id=provenance.decision_id,
            case=trajectory.case,
            variant=result.variant,
            task=task,
            budget_chars=budget.chars,
            backend=provenance.backend,
            model=decision_call.response.model,
            temperature=decision_call.request.temperature,
            max_tokens=memory_call.request.max_tokens if memory_call else decision_call.request.max_tokens,
            positions=provenance.positions,
            positions_source=provenance.positions_source,
            events_count=len(trajectory),
            events_sha256=events_digest(trajectory.events),
            prompt_sha256=_prompt_digest(result),
            raw_response_sha256=memory_call.response.raw_digest if memory_call else None,
            view_sha256=text_digest(result.view_text),
            view_chars=len(result.view_text),
            view_checks=ViewChecks(
                within_budget=check.within_budget,
                budget_cut_chars=result.budget_cut_chars,
                citations_total=check.citations_total,
                citation_validity=check.citation_validity,
                grounding_rate=check.grounding_rate,
                ungrounded_facts=check.ungrounded_facts,
                parse_problems=result.parse_problems,
            ),
            outcome=result.decision,
            usage=sum((c.response.usage for c in result.calls), Usage(0, 0)),
            cost_usd=round(sum(c.response.cost_usd for c in result.calls), 8),
            llm_calls=len(result.calls),
            latency_s=round(result.wall_s, 6),
            worker_id=provenance.worker_id,
            window=result.window,
            segments=result.segments,
            events_topic=provenance.events_topic,
            prompt_layout=result.layout,
        )

    def to_wire(self) -> dict[str, Any]:
        checks, outcome = self.view_checks, self.outcome
        return {
            "schema": SchemaId.DECISION.value,
            "decision_id": str(self.decision_id),
            "tenant": self.case.tenant,
            "case_id": self.case.case_id,
            "architecture": self.architecture.value,
            "variant": None if self.variant is None else self.variant.value,
            "task": self.task.wire(),
            "budget_chars": self.budget_chars,
            "backend": self.backend,
            "model": self.model,
            "params": {"temperature": self.temperature, "max_tokens": self.max_tokens},
            "positions": [[p.partition, p.offset] for p in self.positions],
            "positions_source": self.positions_source.value,
            **({"events_topic": self.events_topic} if self.events_topic is not None else {}),
            "events_count": self.events_count,
            "events_sha256": self.events_sha256,
            # Written only for the second layout: a record without one put the task first, as v1 records did.
            **(
                {"prompt_layout": self.prompt_layout.value} if self.prompt_layout is not PromptLayout.TASK_FIRST else {}
            ),
            "prompt_sha256": self.prompt_sha256,
            "raw_response_sha256": self.raw_response_sha256,
            "view_sha256": self.view_sha256,
            "view_chars": self.view_chars,
            "view_checks": {
                "within_budget": checks.within_budget,
                "budget_cut_chars": checks.budget_cut_chars,
                "citations_total": checks.citations_total,
                "citation_validity": checks.citation_validity,
                "grounding_rate": checks.grounding_rate,
                "ungrounded_facts": list(checks.ungrounded_facts),
                "parse_problems": list(checks.parse_problems),
            },
            "decision": {
                "label": outcome.label,
                "rationale": outcome.rationale,
                "notice": outcome.notice,
                "problems": list(outcome.problems),
            },
            "usage": self.usage.wire(),
            "cost_usd": self.cost_usd,
            "llm_calls": self.llm_calls,
            "latency_s": self.latency_s,
            "worker_id": self.worker_id,
            # Only a segmented decision has these, so a decision that fit its window is written as before.
            **self._segmented_wire(),
        }

    def _segmented_wire(self) -> dict[str, Any]:
        if self.window is None:
            return {}
        return {"window": self.window.wire(), "segments": [n.wire() for n in self.segments]}

    def encode(self) -> bytes:
        return orjson.dumps(self.to_wire())

    @classmethod
    def from_wire(cls, value: Mapping[str, Any]) -> DecisionRecord:
        """Inverse of to_wire, for a schema-valid value of any version (an older one upcast first)."""
        value = upcast(value)
        checks, outcome, usage, params = value["view_checks"], value["decision"], value["usage"], value["params"]
        variant = value.get("variant")
        return cls(
            decision_id=DecisionId.parse(value["decision_id"]),
            case=CaseRef(value["tenant"], value["case_id"]),
            variant=None if variant is None else SummVariant(variant),
            task=TaskSpec.from_wire(value["task"]),
            budget_chars=int(value["budget_chars"]),
            backend=value["backend"],
            model=value["model"],
            temperature=float(params["temperature"]),
            max_tokens=int(params["max_tokens"]),
            positions=tuple(LogPosition(p, o) for p, o in value["positions"]),
            positions_source=PositionsSource(value["positions_source"]),
            events_count=int(value["events_count"]),
            events_sha256=value["events_sha256"],
            prompt_sha256=value["prompt_sha256"],
            raw_response_sha256=value["raw_response_sha256"],
            view_sha256=value["view_sha256"],
            view_chars=int(value["view_chars"]),
            view_checks=ViewChecks(
                within_budget=bool(checks["within_budget"]),
                budget_cut_chars=int(checks.get("budget_cut_chars", 0)),
                citations_total=int(checks.get("citations_total", 0)),
                citation_validity=checks["citation_validity"],
                grounding_rate=checks["grounding_rate"],
                ungrounded_facts=tuple(checks.get("ungrounded_facts", ())),
                parse_problems=tuple(checks["parse_problems"]),
            ),
            outcome=Decision(outcome["label"], outcome["rationale"], outcome["notice"], tuple(outcome["problems"])),
            usage=Usage.from_wire(usage),
            cost_usd=float(value["cost_usd"]),
            llm_calls=int(value["llm_calls"]),
            latency_s=float(value["latency_s"]),
            worker_id=value["worker_id"],
            window=None if value.get("window") is None else Window.from_wire(value["window"]),
            segments=tuple(_node_from(n) for n in value.get("segments", ())),
            events_topic=value.get("events_topic"),
            prompt_layout=PromptLayout(value.get("prompt_layout", PromptLayout.TASK_FIRST.value)),
        )


def upcast(value: Mapping[str, Any]) -> Mapping[str, Any]:
    """A decision record of any released version as the current one: the one place versions are told apart.

    v1 had no `events_topic`: its positions are offsets of its scope's events topic, which is what
    an absent `events_topic` means in v2 too; nor `prompt_layout`: its prompts put the task first,
    which is what an absent one means. Nothing a digest covers differs between the versions.
    """
    schema = value.get("schema")
    if schema == SchemaId.DECISION:
        return value
    if schema == SchemaId.DECISION_V1:
        return {**value, "schema": SchemaId.DECISION.value}
    raise SchemaError(f"decision: unknown version {schema!r} (this release reads {SchemaId.DECISION_V1.value} "
                      f"and {SchemaId.DECISION.value})")  # fmt: skip


def _node_from(value: Mapping[str, Any]) -> SegmentNode:
    return SegmentNode(int(value["level"]), int(value["first"]), int(value["last"]), value["request_sha256"],
                       value["view_sha256"], bool(value["reused"]))  # fmt: skip


def _prompt_digest(result: RunResult) -> str:
    """Digest of the memory-building prompt(s): the projection, the segment tree's, or the ordered Summ-only requests.

    A segmented decision's covers every view of its tree, reused or computed, so it does not
    depend on what the segment store held.
    """
    if result.segments:
        return json_digest([n.request_sha256 for n in result.segments])
    memory = [c.request.digest for c in result.calls if c.request.purpose is not Purpose.DECIDE]
    return memory[0] if len(memory) == 1 else json_digest(memory)
