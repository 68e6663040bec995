"""Replay verification: re-derive a recorded decision's memory view and compare digests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from rapidfuzz.distance import Levenshtein

from pipeline.core.events import Trajectory
from pipeline.core.hashing import events_digest, text_digest
from pipeline.core.model import CountsTokens, ModelBackend, ModelBackendError, Purpose
from pipeline.core.parse import parse_view
from pipeline.core.prompt import PromptEvent, PromptFormatError, PromptLayout, is_merge_prompt, read_merge_prompt
from pipeline.core.recorded import RecordedAnswers
from pipeline.core.run import ModelCall, RunResult, SummVariant, run_dpm, run_summ
from pipeline.core.segments import SegmentNode
from pipeline.core.task import Architecture, Budget, TaskSpec
from pipeline.core.view import fit_to_budget
from pipeline.core.window import TokenCountError, Window

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
    window: Window | None = None  # a segmented DPM decision: the window it was cut for
    segments: tuple[SegmentNode, ...] = ()
    layout: PromptLayout = PromptLayout.TASK_FIRST  # where its projection prompts put the log

    @property
    def view_needs_events(self) -> bool:
        """Buffered Summ-only appends events verbatim after its last call: its view is not in any answer."""
        return self.variant is SummVariant.BUFFERED


def view_distances(recorded: str, replayed: str) -> tuple[float, float]:
    """Normalized edit distance over the whole views and over their first 200 characters."""
    whole = Levenshtein.normalized_distance(recorded, replayed)
    prefix = Levenshtein.normalized_distance(recorded[:PREFIX_CHARS], replayed[:PREFIX_CHARS])
    return float(whole), float(prefix)


def rerun(
    target: ReplayTarget, trajectory: Trajectory, backend: ModelBackend, events: Sequence[PromptEvent] | None = None
) -> RunResult:
    """Runs the recorded architecture again on the same events, task and budget (and window, counted as it was).

    `events`: the log as the prompts number it, when a what-if changed it (run_dpm); else the trajectory's.
    """
    window = target.window
    if window is not None and isinstance(backend, CountsTokens):
        window = window.counted_with(backend.token_counter())
    if target.architecture is Architecture.SUMM:
        variant = target.variant or SummVariant.REWRITE
        return run_summ(trajectory, target.task, target.budget, backend, variant, window=window, events=events)
    return run_dpm(trajectory, target.task, target.budget, backend, window=window, events=events,
                   layout=target.layout)  # fmt: skip


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
    except TokenCountError as exc:
        return ReplayReport(ReplayStatus.DRIFT, str(exc))
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
    broken = tree_problem(target.segments, memory, target.budget)
    if broken is not None:
        return ReplayReport(ReplayStatus.DRIFT, f"the segment tree does not verify: {broken}")
    view, _ = fit_to_budget(parse_view(memory[-1].response.text).view, target.budget.chars)
    derived = text_digest(view.render())
    if derived == target.view_sha256:
        return ReplayReport(ReplayStatus.MATCH, "the recorded response reproduces the recorded view", 0.0, 0.0, derived)
    return ReplayReport(ReplayStatus.DRIFT, "the recorded response yields a different view", replay_view_sha256=derived)


def _answer_digest(call: ModelCall, budget: Budget) -> str:
    view, _ = fit_to_budget(parse_view(call.response.text).view, budget.chars)
    return text_digest(view.render())


def tree_problem(nodes: Sequence[SegmentNode], calls: Sequence[ModelCall], budget: Budget) -> str | None:
    """What does not verify in a segmented decision's tree, from its recorded calls alone; None when all does.

    Each computed node's recorded answer must yield the view digest the tree records for it, and
    each merge's recorded prompt must hold exactly the views the tree records below it, so a
    reused view is verified by the prompt that used it.
    """
    if not nodes:
        return None
    by_request = {c.request.digest: c for c in calls}
    by_range = {(n.first, n.last, n.level): n for n in nodes}
    for node in nodes:
        call = by_request.get(node.request_sha256)
        if node.reused:
            continue
        if call is None:
            return f"no recorded call for the computed view of events {node.first}-{node.last} (level {node.level})"
        if _answer_digest(call, budget) != node.view_sha256:
            return f"the recorded answer for events {node.first}-{node.last} yields another view"
        if node.level > 0:
            problem = _merge_problem(node, call, by_range)
            if problem is not None:
                return problem
    if nodes[-1].reused or nodes[-1].request_sha256 != calls[-1].request.digest:
        return "the tree's root is not the decision's last projection call"
    return None


def _merge_problem(node: SegmentNode, call: ModelCall, by_range: dict[tuple[int, int, int], SegmentNode]) -> str | None:
    """Whether a merge's recorded prompt holds the views the tree records below it."""
    if not is_merge_prompt(call.request.prompt):
        return f"the call for the merge of events {node.first}-{node.last} is not a merge"
    try:
        views = read_merge_prompt(call.request.prompt).views
    except PromptFormatError as exc:
        return f"the merge of events {node.first}-{node.last} cannot be read: {exc}"
    for view in views:
        child = next((by_range[(view.first, view.last, level)] for level in range(node.level - 1, -1, -1)
                      if (view.first, view.last, level) in by_range), None)  # fmt: skip
        if child is None or child.view_sha256 != text_digest(view.text):
            return (
                f"the merge of events {node.first}-{node.last} used a view of {view.first}-{view.last} not in its tree"
            )
    return None
