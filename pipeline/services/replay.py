"""Offline replay of published decisions: re-read the recorded offsets, re-derive, compare digests."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from pipeline.config.settings import ModelSettings
from pipeline.core.event_log import EventLog
from pipeline.core.events import CaseRef, Trajectory
from pipeline.core.model import ModelBackend
from pipeline.core.recorded import RECORDED_BACKEND
from pipeline.core.run import ModelCall
from pipeline.core.task import Architecture
from pipeline.core.verification import ReplayReport, ReplayStatus, verify_recorded, verify_replay
from pipeline.llm.registry import make_backend
from pipeline.wire.audit import AuditRecord, calls_in_order
from pipeline.wire.decision import DecisionRecord
from pipeline.wire.rejection import RejectedError, Rejection
from pipeline.wire.sealing import CaseCipher
from pipeline.wire.trajectory import assemble
from pipeline.wire.trigger import DecisionId, DecisionKey
from pipeline.wire.view import ViewRecord

# Builds the backend a decision is re-run with, from the decision and its recorded calls.
BackendFor = Callable[[DecisionRecord, Sequence[ModelCall]], ModelBackend]


@dataclass(frozen=True)
class ReplayLine:
    key: DecisionKey
    report: ReplayReport

    @property
    def decision_id(self) -> DecisionId:
        return self.key.decision_id

    @property
    def architecture(self) -> Architecture:
        return self.key.decision_id.architecture


class LogChangedError(RejectedError):
    """The recorded offsets now hold other records than the decision read."""


def read_recorded_events(record: DecisionRecord, log: EventLog, cipher: CaseCipher | None) -> Trajectory | None:
    """The events at the record's offsets; None when the case is erased. Other damage (LOG-CHANGED) raises.

    A recorded offset that holds nothing any more is ERASED only when the case's key was destroyed;
    otherwise a later record with the same key superseded it and compaction removed it (LOG-CHANGED).
    """
    try:
        trajectory, _ = assemble(record.case, log.read(record.positions), len(record.positions), cipher=cipher)
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
    cipher: CaseCipher | None,
) -> ReplayReport:
    """One decision's replay: `recorded_only` checks the recorded answers; otherwise re-runs a backend."""
    calls = calls_in_order(audits)
    target = record.replay_target()
    if recorded_only and not target.view_needs_events:
        return verify_recorded(target, calls)
    try:
        trajectory = read_recorded_events(record, log, cipher)
    except LogChangedError as exc:
        return ReplayReport(ReplayStatus.LOG_CHANGED, f"the recorded offsets now hold other records: {exc}")
    if recorded_only:
        return verify_recorded(target, calls, trajectory)
    return verify_replay(target, trajectory, view.text if view else None, backend_for(record, calls))


def replay_many(
    records: Iterable[DecisionRecord],
    views: Mapping[DecisionKey, ViewRecord],
    audits: Mapping[DecisionKey, Sequence[AuditRecord]],
    log: EventLog,
    backend_for: BackendFor,
    *,
    recorded_only: bool = False,
    cipher: CaseCipher | None,
) -> list[ReplayLine]:
    """Replays each record, in the order given, its events read from `log`."""
    replayed = []
    for r in records:
        report = replay_one(r, views.get(r.key), audits.get(r.key, []), log, backend_for,
                            recorded_only=recorded_only, cipher=cipher)  # fmt: skip
        replayed.append(ReplayLine(r.key, report))
    return replayed


def erased_lines(erased: Mapping[DecisionKey, CaseRef]) -> list[ReplayLine]:
    """Each decision of an erased case, as ERASED (its content is sealed under a destroyed key)."""
    return [ReplayLine(k, ReplayReport(ReplayStatus.ERASED, f"case {case.key} is erased: its data key is destroyed"))
            for k, case in sorted(erased.items(), key=lambda item: item[0])]  # fmt: skip


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
    """Every record, or those with this id (of one tenant with `tenant`), or a tenant's (and case's), in key order."""
    chosen = _selection(decision, tenant, case_id, every)
    return sorted((r for r in records if chosen(r.decision_id, r.case)), key=lambda r: r.key)


def select_erased(
    erased: Mapping[DecisionKey, CaseRef],
    *,
    decision: str | None = None,
    tenant: str | None = None,
    case_id: str | None = None,
    every: bool = False,
) -> dict[DecisionKey, CaseRef]:
    """The decisions of erased cases that the same selection as select_decisions names."""
    chosen = _selection(decision, tenant, case_id, every)
    return {k: case for k, case in erased.items() if chosen(k.decision_id, case)}


def _selection(
    decision: str | None, tenant: str | None, case_id: str | None, every: bool
) -> Callable[[DecisionId, CaseRef], bool]:
    wanted = DecisionId.parse(decision) if decision else None

    def chosen(decision_id: DecisionId, case: CaseRef) -> bool:
        if every:
            return True
        if wanted is not None:  # an id names a decision of every tenant that used it, unless --tenant says whose
            return decision_id == wanted and tenant in (None, case.tenant)
        return bool(tenant) and case.tenant == tenant and case_id in (None, case.case_id)

    return chosen
