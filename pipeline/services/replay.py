"""Offline replay of published decisions: re-read the recorded offsets, re-derive, compare digests."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from pipeline.config.settings import ModelSettings
from pipeline.core.event_log import EventLog
from pipeline.core.events import Trajectory
from pipeline.core.model import ModelBackend
from pipeline.core.recorded import RECORDED_BACKEND
from pipeline.core.run import ModelCall
from pipeline.core.task import Architecture
from pipeline.core.verification import ReplayReport, ReplayStatus, verify_recorded, verify_replay
from pipeline.llm.registry import make_backend
from pipeline.wire.audit import AuditRecord, calls_in_order
from pipeline.wire.decision import DecisionRecord
from pipeline.wire.rejection import RejectedError, Rejection
from pipeline.wire.trajectory import assemble
from pipeline.wire.trigger import DecisionId
from pipeline.wire.view import ViewRecord

# Builds the backend a decision is re-run with, from the decision and its recorded calls.
BackendFor = Callable[[DecisionRecord, Sequence[ModelCall]], ModelBackend]


@dataclass(frozen=True)
class ReplayLine:
    decision_id: DecisionId
    report: ReplayReport

    @property
    def architecture(self) -> Architecture:
        return self.decision_id.architecture


class LogChangedError(RejectedError):
    """The recorded offsets now hold other records than the decision read."""


def read_recorded_events(record: DecisionRecord, log: EventLog) -> Trajectory | None:
    """The events at the record's offsets; None when they are gone (ERASED). Other damage raises."""
    try:
        trajectory, _ = assemble(record.case, log.read(record.positions), len(record.positions))
    except RejectedError as exc:
        if exc.reason is Rejection.ERASED:
            return None
        raise LogChangedError(exc.reason, exc.detail) from exc
    return trajectory


def replay_one(
    record: DecisionRecord,
    view: ViewRecord | None,
    audits: Sequence[AuditRecord],
    log: EventLog,
    backend_for: BackendFor,
    *,
    recorded_only: bool,
) -> ReplayReport:
    """One decision's replay: `recorded_only` checks the recorded answers; otherwise re-runs a backend."""
    calls = calls_in_order(audits)
    target = record.replay_target()
    if recorded_only and not target.view_needs_events:
        return verify_recorded(target, calls)
    try:
        trajectory = read_recorded_events(record, log)
    except LogChangedError as exc:
        return ReplayReport(ReplayStatus.LOG_CHANGED, f"the recorded offsets now hold other records: {exc}")
    if recorded_only:
        return verify_recorded(target, calls, trajectory)
    return verify_replay(target, trajectory, view.text if view else None, backend_for(record, calls))


def replay_many(
    records: Iterable[DecisionRecord],
    views: Mapping[DecisionId, ViewRecord],
    audits: Mapping[DecisionId, Sequence[AuditRecord]],
    log: EventLog,
    backend_for: BackendFor,
    *,
    recorded_only: bool = False,
) -> list[ReplayLine]:
    """Replays each record; the report per decision, in the order given."""
    return [
        ReplayLine(
            r.decision_id,
            replay_one(
                r,
                views.get(r.decision_id),
                audits.get(r.decision_id, []),
                log,
                backend_for,
                recorded_only=recorded_only,
            ),
        )
        for r in records
    ]


def registry_backends(settings: ModelSettings, chosen: str | None) -> BackendFor:
    """Backends from the registry: `chosen`, else the backend each decision recorded.

    A backend is built once per name and shared by the decisions that use it; the recorded backend
    is built per decision, since it answers from that decision's own recorded calls.
    """
    built: dict[str, ModelBackend] = {}

    def backend_for(record: DecisionRecord, calls: Sequence[ModelCall]) -> ModelBackend:
        name = chosen or record.backend
        if name == RECORDED_BACKEND:
            return make_backend(settings.model_copy(update={"backend": name}), calls)
        if name not in built:
            built[name] = make_backend(settings.model_copy(update={"backend": name}))
        return built[name]

    return backend_for


def select_decisions(
    records: Iterable[DecisionRecord],
    *,
    decision: str | None = None,
    tenant: str | None = None,
    case_id: str | None = None,
    every: bool = False,
) -> list[DecisionRecord]:
    """Every record, or the one with this id, or a tenant's (and case's), in decision-id order."""
    wanted = DecisionId.parse(decision) if decision else None

    def chosen(record: DecisionRecord) -> bool:
        if every or record.decision_id == wanted:
            return True
        return bool(tenant) and record.case.tenant == tenant and case_id in (None, record.case.case_id)

    return sorted(filter(chosen, records), key=lambda r: r.decision_id)
