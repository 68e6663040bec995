"""Offline replay of published decisions: re-read the recorded offsets, re-derive, compare digests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.core.assemble import RejectedError, Rejection, assemble
from pipeline.core.events import CaseRef, LogPosition, Trajectory
from pipeline.core.log import EventLog
from pipeline.core.model import ModelBackend
from pipeline.core.replay import ReplayReport, ReplayStatus, verify_recorded, verify_replay
from pipeline.llm.recorded import RecordedBackend
from pipeline.workers.projection import MAX_TRAJECTORY_CHARS, event_from_json


@dataclass(frozen=True)
class ReplayLine:
    decision_id: str
    architecture: str
    report: ReplayReport


def read_recorded_events(record: Mapping[str, Any], log: EventLog) -> Trajectory | None:
    """The events at the record's offsets; None when they are gone (ERASED). Other damage raises."""
    case = CaseRef(record["tenant"], record["case_id"])
    positions = [LogPosition(p, o) for p, o in record["positions"]]
    try:
        trajectory, _ = assemble(case, log.read(positions), event_from_json, len(positions), MAX_TRAJECTORY_CHARS)
    except RejectedError as exc:
        if exc.reason is Rejection.ERASED:
            return None
        raise
    return trajectory


def replay_one(
    record: Mapping[str, Any],
    view: Mapping[str, Any] | None,
    audits: list[dict[str, Any]],
    log: EventLog,
    backend: ModelBackend | None,
    *,
    recorded_only: bool,
) -> ReplayReport:
    """One decision's replay: `recorded_only` checks the recorded response; otherwise re-runs the model.

    backend None means: answer from the recorded audit records (no model call at all).
    """
    if recorded_only:
        return verify_recorded(record, audits)
    try:
        trajectory = read_recorded_events(record, log)
    except RejectedError as exc:
        return ReplayReport(ReplayStatus.LOG_CHANGED, f"the recorded offsets now hold other records: {exc}")
    recorded_view = view["view"] if view else None
    return verify_replay(record, trajectory, recorded_view, backend or RecordedBackend(audits))


def replay_many(
    records: Iterable[Mapping[str, Any]],
    views: Mapping[str, Mapping[str, Any]],
    audits: Mapping[str, list[dict[str, Any]]],
    log: EventLog,
    backend: ModelBackend | None,
    *,
    recorded_only: bool = False,
) -> list[ReplayLine]:
    """Replays each record; the report per decision, in the order given."""
    return [
        ReplayLine(
            r["decision_id"],
            r["architecture"],
            replay_one(
                r,
                views.get(r["decision_id"]),
                audits.get(r["decision_id"], []),
                log,
                backend,
                recorded_only=recorded_only,
            ),
        )
        for r in records
    ]
