"""Runs one architecture over a trajectory: DPM (project once, decide) or Summ-only (N updates, decide)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from pipeline.core.checks import ViewCheck, check_view
from pipeline.core.decision import Decision, parse_decision
from pipeline.core.events import Event, Trajectory
from pipeline.core.model import ModelBackend, ModelRequest, ModelResponse, Purpose, model_identity
from pipeline.core.parse import parse_view
from pipeline.core.prompt import (
    PromptEvent,
    PromptLayout,
    decision_request,
    prompt_events,
    segment_request,
    summarization_request,
)
from pipeline.core.segments import SegmentNode, SegmentStore, project_in_segments, split_event
from pipeline.core.task import Architecture, Budget, TaskSpec
from pipeline.core.view import EMPTY_VIEW, Fact, MemoryView, fit_to_budget
from pipeline.core.window import Window, WindowTooSmallError


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
    # Where DPM's projection and merge prompts put the log (prompt.py); Summ-only's prompts have one layout.
    layout: PromptLayout = PromptLayout.TASK_FIRST

    @property
    def memory_call(self) -> ModelCall | None:
        """The call whose answer became the final view: the projection, or the last summary update."""
        memory = [c for c in self.calls if c.request.purpose is not Purpose.DECIDE]
        return memory[-1] if memory else None


def _view_from(response: ModelResponse, budget: Budget) -> SummMemory:
    return _view_from_text(response.text, budget)


def _view_from_text(text: str, budget: Budget) -> SummMemory:
    parsed = parse_view(text)
    view, cut = fit_to_budget(parsed.view, budget.chars)
    return SummMemory(view, parsed.problems, cut)


@dataclass(frozen=True)
class SummMemory:
    """A memory between steps: the view, the parse problems of the answer it came from, characters cut."""

    view: MemoryView
    problems: tuple[str, ...] = ()
    cut: int = 0


def summ_parts(index: int, event: Event, *, task: TaskSpec, budget: Budget, window: Window | None) -> list[PromptEvent]:
    """The event as a Summ-only step folds it: whole, or in parts where its prompt would not fit `window`.

    The room for the event assumes a summary as long as the budget allows, so where an event is
    cut depends on the event, task, budget and window only, never on the summary before it.
    """
    whole = PromptEvent(index, event.kind, event.text)
    if window is None:
        return [whole]
    probe = summarization_request(PromptEvent(index, event.kind, ""), "x" * budget.chars, task, budget)
    room = window.prompt_limit(budget.response_token_limit) - window.count(probe.system, probe.prompt)
    if room < 64:
        raise WindowTooSmallError(f"a {window.tokens}-token window leaves no room for an event beside a "
                                  f"{budget.chars}-character summary")  # fmt: skip
    return split_event(whole, room, window)


def summ_step(
    memory: SummMemory,
    index: int,
    event: Event,
    *,
    task: TaskSpec,
    budget: Budget,
    variant: SummVariant,
    call: Callable[[ModelRequest], ModelResponse],
    window: Window | None = None,
) -> SummMemory:
    """U(m, e): one Summ-only update (the buffered variant appends without a call while it fits).

    An event whose prompt would not fit `window` is folded in parts, one call each, every part
    under the event's own index. The online baseline worker and the offline run_summ share this
    function, so both produce byte-identical memories from the same events.
    """
    parts = summ_parts(index, event, task=task, budget=budget, window=window)
    if len(parts) > 1:
        for part in parts:
            memory = _view_from(call(summarization_request(part, _summary(memory), task, budget)), budget)
        return memory
    if variant is SummVariant.BUFFERED:
        raw = Fact(f"({event.kind}) {event.text}", (index,))
        appended = replace(memory.view, facts=(*memory.view.facts, raw))
        if appended.char_length <= budget.chars:
            return replace(memory, view=appended)
    response = call(summarization_request(parts[0], _summary(memory), task, budget))
    return _view_from(response, budget)


def _summary(memory: SummMemory) -> str:
    return "" if memory.view == EMPTY_VIEW else memory.view.render()


def summ_step_requests(
    memory: SummMemory,
    index: int,
    event: Event,
    answers: Sequence[str],
    *,
    task: TaskSpec,
    budget: Budget,
    window: Window | None = None,
) -> list[ModelRequest]:
    """The requests of one step's calls, rebuilt from the memory before it and the answers of its calls.

    They depend on the event, task, budget and window too; an event folded in parts makes one call
    per part, each over the memory the previous part's answer left. The baseline stores only the
    answers of each step and rebuilds these requests when it audits a decision.
    """
    requests = []
    for part, answer in zip(summ_parts(index, event, task=task, budget=budget, window=window), answers, strict=False):
        requests.append(summarization_request(part, _summary(memory), task, budget))
        memory = _view_from_text(answer, budget)
    return requests


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
        layout: PromptLayout = PromptLayout.TASK_FIRST,
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
            layout=layout,
        )


def run_dpm(
    trajectory: Trajectory,
    task: TaskSpec,
    budget: Budget,
    backend: ModelBackend,
    *,
    window: Window | None = None,
    store: SegmentStore | None = None,
    events: Sequence[PromptEvent] | None = None,
    layout: PromptLayout = PromptLayout.TASK_FIRST,
) -> RunResult:
    """pi(E, T, B): one projection call over the whole log, then one decision call over the view.

    A log whose projection prompt does not fit `window` is projected in segments merged in a
    tree (segments.py), segment views reused from `store`; one that fits is projected exactly as
    without a window. `events` are the log as the prompt numbers it: by default the trajectory's,
    1..n; a what-if (contest.py) passes them with some left out or replaced, each keeping its index.
    `layout`: where the projection and merge prompts put the log (prompt.PromptLayout).
    """
    run = _Run(trajectory, task, budget, backend)
    events = prompt_events(trajectory) if events is None else list(events)
    request = segment_request(events, task, budget, whole=True, layout=layout)
    if window is None or window.fits(request.system, request.prompt, request.max_tokens):
        return run.finish(Architecture.DPM, None, _view_from(run.call(request), budget), layout=layout)
    tree = project_in_segments(events, task, budget, window, model=model_identity(backend), call=run.call,
                               store=store, layout=layout)  # fmt: skip
    return run.finish(Architecture.DPM, None, _view_from(tree.root_response, budget), window=window,
                      segments=tree.nodes, layout=layout)  # fmt: skip


def run_summ(
    trajectory: Trajectory,
    task: TaskSpec,
    budget: Budget,
    backend: ModelBackend,
    variant: SummVariant = SummVariant.REWRITE,
    *,
    window: Window | None = None,
    events: Sequence[PromptEvent] | None = None,
) -> RunResult:
    """Summ-only: m_k = U(m_{k-1}, e_k) for every event, then decide over m_n.

    The buffered variant appends events verbatim while the memory still fits the budget and
    calls U only on overflow, so it makes fewer calls when the budget is loose. An event too
    large for `window` is folded in parts (summ_step); the result names the window only then.
    `events` as run_dpm takes them.
    """
    run = _Run(trajectory, task, budget, backend)
    memory = SummMemory(EMPTY_VIEW)
    split = False
    for step in prompt_events(trajectory) if events is None else events:
        before = len(run.calls)
        event = Event(trajectory.case, step.index, step.kind, step.text)
        memory = summ_step(memory, step.index, event, task=task, budget=budget, variant=variant, call=run.call,
                           window=window)  # fmt: skip
        split = split or folded_in_parts(len(run.calls) - before)
    return run.finish(Architecture.SUMM, variant, memory, window=window if split else None)


def folded_in_parts(step_calls: int) -> bool:
    """Whether a step folded its event in parts: only then does it make more than one call (one per part)."""
    return step_calls > 1


def finish_summ(
    trajectory: Trajectory,
    task: TaskSpec,
    budget: Budget,
    backend: ModelBackend,
    memory: SummMemory,
    *,
    calls: Sequence[ModelCall],
    variant: SummVariant = SummVariant.REWRITE,
    window: Window | None = None,
) -> RunResult:
    """The decision over a memory built step by step elsewhere (the online baseline worker).

    `window` is the one the steps were folded under, when some event was folded in parts.
    """
    # The steps ran earlier, as events arrived; their model time counts toward this decision's latency.
    earlier = sum(c.response.latency_s for c in calls)
    run = _Run(trajectory, task, budget, backend, list(calls), started=time.perf_counter() - earlier)
    return run.finish(Architecture.SUMM, variant, memory, window=window)
