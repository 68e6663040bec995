"""A run's records as published: the view, the decision record and one audit record per model call."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.core.events import Trajectory
from pipeline.core.run import RunResult
from pipeline.core.task import Budget, TaskSpec
from pipeline.core.verification import ReplayReport, verify_recorded
from pipeline.wire.audit import AuditRecord, calls_in_order
from pipeline.wire.decision import DecisionRecord, Provenance
from pipeline.wire.trigger import DecisionId
from pipeline.wire.view import ViewRecord


@dataclass(frozen=True)
class RunRecords:
    """The records of one decision; every worker and the evaluation build them the same way."""

    view: ViewRecord
    decision: DecisionRecord
    audits: tuple[AuditRecord, ...]
    trajectory: Trajectory

    @property
    def decision_id(self) -> DecisionId:
        return self.decision.decision_id

    def self_check(self) -> ReplayReport:
        """Whether the recorded answers reproduce the recorded view, without a model call."""
        return verify_recorded(self.decision.replay_target(), calls_in_order(self.audits), self.trajectory)


def run_records(
    result: RunResult, trajectory: Trajectory, *, task: TaskSpec, budget: Budget, provenance: Provenance
) -> RunRecords:
    """The view, the decision record and the audit records of a run."""
    case = trajectory.case
    return RunRecords(
        view=ViewRecord.from_run(result, case, provenance.decision_id),
        decision=DecisionRecord.from_run(result, trajectory, task, budget, provenance),
        audits=tuple(AuditRecord.from_run(result, case, provenance.decision_id, provenance.backend)),
        trajectory=trajectory,
    )
