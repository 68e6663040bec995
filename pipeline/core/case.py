"""A decision case (schemas/case.v1.json): trajectory, task, label and scoring keys."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.core.events import CaseRef, Event, InvalidEventError, Trajectory
from pipeline.core.task import TaskSpec

CASE_SCHEMA = "dpm.case.v1"
DEFAULT_TENANT = "default"


@dataclass(frozen=True)
class RequiredAnchor:
    key: str
    value: str


@dataclass(frozen=True)
class Case:
    """One case: its trajectory and task, the true label and what scoring checks for."""

    trajectory: Trajectory
    task: TaskSpec
    label: str
    required_anchors: tuple[RequiredAnchor, ...]
    compliance_provisions: tuple[str, ...]
    reasoning_points: tuple[str, ...]

    @property
    def ref(self) -> CaseRef:
        return self.trajectory.case

    @property
    def domain(self) -> str:
        return self.task.domain


def case_from_dict(raw: Mapping[str, Any], tenant: str | None = None) -> Case:
    """Builds a Case from a schema-valid case object; unknown extra fields are ignored.

    Events are ordered by seq; raises InvalidEventError for duplicate or missing sequence numbers.
    """
    ref = CaseRef(tenant or raw.get("tenant") or DEFAULT_TENANT, raw["case_id"])
    events = sorted(raw["events"], key=lambda e: e["seq"])
    trajectory = Trajectory(ref, tuple(Event(ref, int(e["seq"]), str(e["kind"]), str(e["text"])) for e in events))
    label_space = tuple(raw["label_space"])
    if raw["label"] not in label_space:
        raise InvalidEventError(f"case {ref.key}: label {raw['label']!r} is not in its label space {list(label_space)}")
    return Case(
        trajectory=trajectory,
        task=TaskSpec(raw["domain"], raw["task"], label_space),
        label=raw["label"],
        required_anchors=tuple(RequiredAnchor(a["key"], a["value"]) for a in raw["required_anchors"]),
        compliance_provisions=tuple(raw["compliance_provisions"]),
        reasoning_points=tuple(raw["reasoning_points"]),
    )


def case_to_dict(case: Case) -> dict[str, Any]:
    """The v1 wire form of a case."""
    return {
        "schema": CASE_SCHEMA,
        "case_id": case.ref.case_id,
        "domain": case.task.domain,
        "tenant": case.ref.tenant,
        "task": case.task.task,
        "label": case.label,
        "label_space": list(case.task.label_space),
        "events": [{"seq": e.seq, "kind": e.kind, "text": e.text} for e in case.trajectory.events],
        "required_anchors": [{"key": a.key, "value": a.value} for a in case.required_anchors],
        "compliance_provisions": list(case.compliance_provisions),
        "reasoning_points": list(case.reasoning_points),
    }
