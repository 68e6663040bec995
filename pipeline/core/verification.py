"""Replay verification: re-derive a recorded decision's memory view and compare digests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from rapidfuzz.distance import Levenshtein

from pipeline.core.events import Trajectory
from pipeline.core.hashing import events_digest, text_digest
from pipeline.core.model import ModelBackend, ModelBackendError, Purpose
from pipeline.core.parse import parse_view
from pipeline.core.recorded import RecordedAnswers
from pipeline.core.run import ModelCall, RunResult, SummVariant, run_dpm, run_summ
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


@dataclass(frozen=True)
class ReplayTarget:
    """What a decision recorded that replay needs: how to run it again and the digests to match."""

    architecture: Architecture
    variant: SummVariant | None
    task: TaskSpec
    budget: Budget
    events_sha256: str
    view_sha256: str
    raw_response_sha256: str | None

    @property
    def view_needs_events(self) -> bool:
        """Buffered Summ-only appends events verbatim after its last call: its view is not in any answer."""
        return self.variant is SummVariant.BUFFERED


def view_distances(recorded: str, replayed: str) -> tuple[float, float]:
    """Normalized edit distance over the whole views and over their first 200 characters."""
    whole = Levenshtein.normalized_distance(recorded, replayed)
    prefix = Levenshtein.normalized_distance(recorded[:PREFIX_CHARS], replayed[:PREFIX_CHARS])
    return float(whole), float(prefix)


def rerun(target: ReplayTarget, trajectory: Trajectory, backend: ModelBackend) -> RunResult:
    """Runs the recorded architecture again on the same events, task and budget."""
    if target.architecture is Architecture.SUMM:
        return run_summ(trajectory, target.task, target.budget, backend, target.variant or SummVariant.REWRITE)
    return run_dpm(trajectory, target.task, target.budget, backend)


def verify_replay(
    target: ReplayTarget, trajectory: Trajectory | None, recorded_view: str | None, backend: ModelBackend
) -> ReplayReport:
    """MATCH, DRIFT (with distances), LOG-CHANGED (events digest differs) or ERASED (events gone).

    `trajectory` is None when the case is erased (its events and key gone); `recorded_view` is the
    published view text, used for distances when available.
    """
    if trajectory is None:
        return ReplayReport(ReplayStatus.ERASED, "the case is erased: its events and data key are gone")
    digest = events_digest(trajectory.events)
    if digest != target.events_sha256:
        return ReplayReport(
            ReplayStatus.LOG_CHANGED, f"events digest {digest[:16]} != recorded {target.events_sha256[:16]}"
        )
    try:
        result = rerun(target, trajectory, backend)
    except ModelBackendError as exc:
        return ReplayReport(ReplayStatus.DRIFT, f"the model call failed on replay: {exc}")
    replayed = text_digest(result.view_text)
    if replayed == target.view_sha256:
        return ReplayReport(ReplayStatus.MATCH, "byte-identical view", 0.0, 0.0, replayed)
    whole, prefix = view_distances(recorded_view, result.view_text) if recorded_view is not None else (None, None)
    return ReplayReport(ReplayStatus.DRIFT, "the replayed view differs", whole, prefix, replayed)


def verify_recorded(
    target: ReplayTarget, calls: Sequence[ModelCall], trajectory: Trajectory | None = None
) -> ReplayReport:
    """Re-derives the view from the recorded answers alone (no model call) and checks both digests.

    `calls` are the decision's recorded calls in call order. A view built from the last memory
    answer is re-derived from it; a buffered Summ-only view also holds events appended after that
    answer, so it is re-derived by running the steps again over `trajectory` with the recorded
    answers (ERASED when the events are gone).
    """
    memory = [c for c in calls if c.request.purpose is not Purpose.DECIDE]
    if target.raw_response_sha256 is not None and (not memory or memory[-1].response.raw_digest
                                                    != target.raw_response_sha256):  # fmt: skip
        return ReplayReport(ReplayStatus.DRIFT, "the recorded raw response does not match its digest")
    if target.view_needs_events:
        return verify_replay(target, trajectory, None, RecordedAnswers(calls))
    if not memory:
        return ReplayReport(ReplayStatus.DRIFT, "no memory-building call is recorded for this decision")
    view, _ = fit_to_budget(parse_view(memory[-1].response.text).view, target.budget.chars)
    derived = text_digest(view.render())
    if derived == target.view_sha256:
        return ReplayReport(ReplayStatus.MATCH, "the recorded response reproduces the recorded view", 0.0, 0.0, derived)
    return ReplayReport(ReplayStatus.DRIFT, "the recorded response yields a different view", replay_view_sha256=derived)
