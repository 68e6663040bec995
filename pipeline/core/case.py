"""A decision case (schemas/case.v1.json): trajectory, task, label and scoring keys."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.core.events import CaseRef, Trajectory
from pipeline.core.task import TaskSpec

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
