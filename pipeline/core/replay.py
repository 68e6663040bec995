"""Replay verification: re-derive a recorded decision's memory view and compare digests."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from rapidfuzz.distance import Levenshtein

from pipeline.core.events import Trajectory
from pipeline.core.hashing import events_digest, sha256_hex, text_digest
from pipeline.core.model import ModelBackend, ModelBackendError, message_text
from pipeline.core.parse import parse_view
from pipeline.core.run import RunResult, SummVariant, run_dpm, run_summ
from pipeline.core.task import Architecture, Budget, TaskSpec
from pipeline.core.view import fit_to_budget

PREFIX_CHARS = 200


class ReplayStatus(StrEnum):
    MATCH = "MATCH"
    DRIFT = "DRIFT"
    LOG_CHANGED = "LOG-CHANGED"
    ERASED = "ERASED"


@dataclass(frozen=True)
class ReplayReport:
    """A replay's verdict; distances are normalized Levenshtein distances (0 = identical)."""

    status: ReplayStatus
    detail: str
    view_distance: float | None = None
    prefix_distance: float | None = None
    replay_view_sha256: str | None = None


def view_distances(recorded: str, replayed: str) -> tuple[float, float]:
    """Normalized edit distance over the whole views and over their first 200 characters."""
    whole = Levenshtein.normalized_distance(recorded, replayed)
    prefix = Levenshtein.normalized_distance(recorded[:PREFIX_CHARS], replayed[:PREFIX_CHARS])
    return float(whole), float(prefix)


def task_of(record: Mapping[str, Any]) -> TaskSpec:
    """The task spec a decision record names."""
    return TaskSpec.from_wire(record["task"])


def rerun(record: Mapping[str, Any], trajectory: Trajectory, backend: ModelBackend) -> RunResult:
    """Runs the recorded architecture again on the same events, task and budget."""
    task, budget = task_of(record), Budget(int(record["budget_chars"]))
    if record["architecture"] == Architecture.SUMM.value:
        return run_summ(trajectory, task, budget, backend, SummVariant(record.get("variant") or "rewrite"))
    return run_dpm(trajectory, task, budget, backend)


def verify_replay(
    record: Mapping[str, Any], trajectory: Trajectory | None, recorded_view: str | None, backend: ModelBackend
) -> ReplayReport:
    """MATCH, DRIFT (with distances), LOG-CHANGED (events digest differs) or ERASED (events gone).

    `trajectory` is None when the recorded offsets no longer hold the events (compacted away or
    deleted); `recorded_view` is the published view text, used for distances when available.
    """
    if trajectory is None:
        return ReplayReport(ReplayStatus.ERASED, "the recorded offsets no longer hold the events")
    digest = events_digest(trajectory.events)
    if digest != record["events_sha256"]:
        return ReplayReport(
            ReplayStatus.LOG_CHANGED, f"events digest {digest[:16]} != recorded {record['events_sha256'][:16]}"
        )
    try:
        result = rerun(record, trajectory, backend)
    except ModelBackendError as exc:
        return ReplayReport(ReplayStatus.DRIFT, f"the model call failed on replay: {exc}")
    replayed = text_digest(result.view_text)
    if replayed == record["view_sha256"]:
        return ReplayReport(ReplayStatus.MATCH, "byte-identical view", 0.0, 0.0, replayed)
    whole, prefix = view_distances(recorded_view, result.view_text) if recorded_view is not None else (None, None)
    return ReplayReport(ReplayStatus.DRIFT, "the replayed view differs", whole, prefix, replayed)


def verify_recorded(record: Mapping[str, Any], audits: Sequence[Mapping[str, Any]]) -> ReplayReport:
    """Re-derives the view from the recorded raw response alone (no model call) and checks both digests."""
    memory = [a for a in sorted(audits, key=lambda a: a["call_index"]) if a["purpose"] != "decide"]
    if not memory:
        return ReplayReport(ReplayStatus.DRIFT, "no memory-building call is recorded for this decision")
    raw = base64.b64decode(memory[-1]["raw_response_b64"])
    if sha256_hex(raw) != record["raw_response_sha256"]:
        return ReplayReport(ReplayStatus.DRIFT, "the recorded raw response does not match its digest")
    try:
        text = message_text(raw)
    except ModelBackendError as exc:
        return ReplayReport(ReplayStatus.DRIFT, str(exc))
    view, _ = fit_to_budget(parse_view(text).view, int(record["budget_chars"]))
    derived = text_digest(view.render())
    if derived == record["view_sha256"]:
        return ReplayReport(ReplayStatus.MATCH, "the recorded response reproduces the recorded view", 0.0, 0.0, derived)
    return ReplayReport(ReplayStatus.DRIFT, "the recorded response yields a different view", replay_view_sha256=derived)
