"""Runs one architecture over a trajectory: DPM (project once, decide) or Summ-only (N updates, decide)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from pipeline.core.checks import ViewCheck, check_view
from pipeline.core.decision import Decision, parse_decision
from pipeline.core.events import Event, Trajectory
from pipeline.core.model import ModelBackend, ModelRequest, ModelResponse, Purpose
from pipeline.core.parse import parse_view
from pipeline.core.prompt import PromptEvent, decision_request, projection_request, summarization_request
from pipeline.core.segments import SegmentNode, SegmentStore, project_in_segments
from pipeline.core.task import Architecture, Budget, TaskSpec
from pipeline.core.view import EMPTY_VIEW, Fact, MemoryView, fit_to_budget
from pipeline.core.window import Window


class SummVariant(StrEnum):
    """Summ-only as the DPM paper defines it (rewrite after every event), or buffered (summarize on overflow)."""

    REWRITE = "rewrite"
    BUFFERED = "buffered"


@dataclass(frozen=True)
class ModelCall:
    """One model call of a run, in order: what was asked and what came back."""

    request: ModelRequest
    response: ModelResponse


@dataclass(frozen=True)
class RunResult:
    """Everything a run produced; the decision record and audit records are built from it."""

    architecture: Architecture
    variant: SummVariant | None
    view: MemoryView
    view_text: str
    parse_problems: tuple[str, ...]
    budget_cut_chars: int
    check: ViewCheck
    decision: Decision
    calls: tuple[ModelCall, ...]
    wall_s: float
    # A DPM case too long for one call: the window it was cut for and its tree (segments.py); else empty.
    window: Window | None = None
    segments: tuple[SegmentNode, ...] = ()

    @property
    def memory_call(self) -> ModelCall | None:
        """The call whose answer became the final view: the projection, or the last summary update."""
        memory = [c for c in self.calls if c.request.purpose is not Purpose.DECIDE]
        return memory[-1] if memory else None


def _view_from(response: ModelResponse, budget: Budget) -> SummMemory:
    parsed = parse_view(response.text)
    view, cut = fit_to_budget(parsed.view, budget.chars)
    return SummMemory(view, parsed.problems, cut)


@dataclass(frozen=True)
class SummMemory:
    """A memory between steps: the view, the parse problems of the answer it came from, characters cut."""

    view: MemoryView
    problems: tuple[str, ...] = ()
    cut: int = 0


def summ_step(
    memory: SummMemory,
    index: int,
    event: Event,
    *,
    task: TaskSpec,
    budget: Budget,
    variant: SummVariant,
    call: Callable[[ModelRequest], ModelResponse],
) -> SummMemory:
    """U(m, e): one Summ-only update (the buffered variant appends without a call while it fits).

    The online baseline worker and the offline run_summ share this function, so both
    produce byte-identical memories from the same events.
    """
    if variant is SummVariant.BUFFERED:
        raw = Fact(f"({event.kind}) {event.text}", (index,))
        appended = replace(memory.view, facts=(*memory.view.facts, raw))
        if appended.char_length <= budget.chars:
            return replace(memory, view=appended)
    response = call(summ_step_request(memory, index, event, task=task, budget=budget))
    return _view_from(response, budget)


def summ_step_request(memory: SummMemory, index: int, event: Event, *, task: TaskSpec, budget: Budget) -> ModelRequest:
    """The summary update request of one step: a function of the memory before it, the event, task and budget.

    The baseline stores only the answer of each step and rebuilds this request when it audits a decision.
    """
    summary = "" if memory.view == EMPTY_VIEW else memory.view.render()
    return summarization_request(PromptEvent(index, event.kind, event.text), summary, task, budget)


@dataclass
class _Run:
    """One run's inputs and the calls made so far."""

    trajectory: Trajectory
    task: TaskSpec
    budget: Budget
    backend: ModelBackend
    calls: list[ModelCall] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)

    def call(self, request: ModelRequest) -> ModelResponse:
        response = self.backend.complete(request)
        self.calls.append(ModelCall(request, response))
        return response

    def finish(
        self,
        architecture: Architecture,
        variant: SummVariant | None,
        memory: SummMemory,
        *,
        window: Window | None = None,
        segments: tuple[SegmentNode, ...] = (),
    ) -> RunResult:
        view_text = memory.view.render()
        response = self.call(decision_request(view_text, self.task))
        return RunResult(
            architecture=architecture,
            variant=variant,
            view=memory.view,
            view_text=view_text,
            parse_problems=memory.problems,
            budget_cut_chars=memory.cut,
            check=check_view(memory.view, self.trajectory, self.budget.chars),
            decision=parse_decision(response.text, self.task.label_space),
            calls=tuple(self.calls),
            wall_s=time.perf_counter() - self.started,
            window=window,
            segments=segments,
        )


def run_dpm(
    trajectory: Trajectory,
    task: TaskSpec,
    budget: Budget,
    backend: ModelBackend,
    *,
    window: Window | None = None,
    store: SegmentStore | None = None,
) -> RunResult:
    """pi(E, T, B): one projection call over the whole log, then one decision call over the view.

    A log whose projection prompt does not fit `window` is projected in segments merged in a
    tree (segments.py), segment views reused from `store`; one that fits is projected exactly as
    without a window.
    """
    run = _Run(trajectory, task, budget, backend)
    request = projection_request(trajectory, task, budget)
    if window is None or window.fits(request.system, request.prompt, request.max_tokens):
        return run.finish(Architecture.DPM, None, _view_from(run.call(request), budget))
    events = [PromptEvent(i, e.kind, e.text) for i, e in enumerate(trajectory.events, start=1)]
    tree = project_in_segments(events, task, budget, window, model=backend.model, call=run.call, store=store)
    return run.finish(Architecture.DPM, None, _view_from(tree.root_response, budget), window=window,
                      segments=tree.nodes)  # fmt: skip


def run_summ(
    trajectory: Trajectory,
    task: TaskSpec,
    budget: Budget,
    backend: ModelBackend,
    variant: SummVariant = SummVariant.REWRITE,
) -> RunResult:
    """Summ-only: m_k = U(m_{k-1}, e_k) for every event, then decide over m_n.

    The buffered variant appends events verbatim while the memory still fits the budget and
    calls U only on overflow, so it makes fewer calls when the budget is loose.
    """
    run = _Run(trajectory, task, budget, backend)
    memory = SummMemory(EMPTY_VIEW)
    for index, event in enumerate(trajectory.events, start=1):
        memory = summ_step(memory, index, event, task=task, budget=budget, variant=variant, call=run.call)
    return run.finish(Architecture.SUMM, variant, memory)


def finish_summ(
    trajectory: Trajectory,
    task: TaskSpec,
    budget: Budget,
    backend: ModelBackend,
    memory: SummMemory,
    *,
    calls: Sequence[ModelCall],
    variant: SummVariant = SummVariant.REWRITE,
) -> RunResult:
    """The decision over a memory built step by step elsewhere (the online baseline worker)."""
    # The steps ran earlier, as events arrived; their model time counts toward this decision's latency.
    earlier = sum(c.response.latency_s for c in calls)
    run = _Run(trajectory, task, budget, backend, list(calls), started=time.perf_counter() - earlier)
    return run.finish(Architecture.SUMM, variant, memory)
