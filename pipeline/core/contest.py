"""Contesting a decision: re-deciding it over its recorded log with events left out or replaced.

A decision is a pure function of (events, task, budget, model). A what-if runs the recorded architecture
again over the changed log with the same task, budget, window and model. Each remaining event keeps its
index, so the new view's citations name the original events and a DPM segment the change does not touch
sends the very request it sent before. Requests byte-identical to ones the decision recorded are answered
from its record (ReusingBackend): a DPM segment and the merges beside the changed one, Summ-only's steps
before the first changed event. What a what-if costs is what it asked the model anew.

A contest keeps what it asked anew as Answers: each request's digest and its response whole. The request
itself is the case's prompt (up to a whole segment of it) and need not be kept: running the what-if again
over the recorded log with the recorded changes builds it again, byte for byte, and its digest finds the
answer (answering_from). A request that no longer hashes as recorded finds none: replay says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from pipeline.core.anchors import extract_anchors
from pipeline.core.errors import DpmError
from pipeline.core.events import Event, Trajectory
from pipeline.core.model import ModelBackend, ModelRequest, ModelResponse, Purpose, WrappedBackend
from pipeline.core.prompt import PromptEvent, prompt_events
from pipeline.core.recorded import RecordedAnswers
from pipeline.core.run import ModelCall, RunResult
from pipeline.core.verification import ReplayTarget, rerun
from pipeline.core.view import Fact, MemoryView


class ContestError(DpmError):
    """A what-if that cannot be run as asked (an index outside the case, an empty replacement...)."""


class CallBudgetError(ContestError):
    """The what-if would ask the model more often than its call budget allows."""


@dataclass(frozen=True)
class EventChange:
    """One event of the recorded log left out (`kind` and `text` None) or replaced by another event."""

    index: int
    kind: str | None = None
    text: str | None = None

    @property
    def left_out(self) -> bool:
        return self.text is None

    def describe(self) -> str:
        return f"leave out [{self.index}]" if self.left_out else f"replace [{self.index}]"


def leave_out(*indices: int) -> tuple[EventChange, ...]:
    """The changes that leave each of `indices` out."""
    return tuple(EventChange(i) for i in indices)


@dataclass(frozen=True)
class ChangedLog:
    """The log a what-if decides over: its events as prompts number them, and the case for the view's checks.

    `checked` holds every recorded event with replacements applied; a left-out event stays in it (a trajectory
    numbers its events without gaps), so a citation of one is found by `cites_left_out`, not by the checks.
    """

    events: tuple[PromptEvent, ...]
    checked: Trajectory
    left_out: frozenset[int]


def changed_log(trajectory: Trajectory, changes: Sequence[EventChange]) -> ChangedLog:
    """The recorded log with `changes` applied; raises ContestError for a change that cannot be made."""
    if not changes:
        raise ContestError("a what-if needs at least one change: an event to leave out or to replace")
    seen: set[int] = set()
    for given in changes:
        if not trajectory.has_index(given.index):
            raise ContestError(f"event [{given.index}] is outside the case, whose events are [1] to "
                               f"[{len(trajectory)}]")  # fmt: skip
        if given.index in seen:
            raise ContestError(f"event [{given.index}] is changed twice")
        seen.add(given.index)
        if not given.left_out and (not given.kind or not given.text or not given.text.strip()):
            raise ContestError(f"the replacement of event [{given.index}] needs a kind and a non-empty text")
    by_index = {c.index: c for c in changes}
    if len([c for c in changes if c.left_out]) == len(trajectory):
        raise ContestError("leaving out every event leaves nothing to decide")
    events: list[PromptEvent] = []
    checked: list[Event] = []
    for prompt in prompt_events(trajectory):
        change = by_index.get(prompt.index)
        event = trajectory.by_index(prompt.index)
        if change is None:
            events.append(prompt)
            checked.append(event)
        elif change.left_out:
            checked.append(event)
        else:
            kind, text = str(change.kind), str(change.text)  # both given: checked above
            events.append(PromptEvent(prompt.index, kind, text))
            checked.append(replace(event, kind=kind, text=text))
    left = frozenset(c.index for c in changes if c.left_out)
    return ChangedLog(tuple(events), Trajectory(trajectory.case, tuple(checked)), left)


@dataclass(frozen=True)
class Answer:
    """A model call as a contest keeps it: the request's digest (and purpose, for people), the response whole."""

    request_sha256: str
    purpose: Purpose
    response: ModelResponse

    @classmethod
    def of(cls, call: ModelCall) -> Answer:
        return cls(call.request.digest, call.request.purpose, call.response)


def _by_digest(recorded: Iterable[ModelCall | Answer]) -> dict[str, ModelResponse]:
    """Each recorded response by its request's digest (the first one where a request was asked twice)."""
    found: dict[str, ModelResponse] = {}
    for item in recorded:
        digest = item.request.digest if isinstance(item, ModelCall) else item.request_sha256
        found.setdefault(digest, item.response)
    return found


class ReusingBackend(WrappedBackend):
    """Answers a request the decision recorded from its record, any other from the model, within a call budget.

    `asked` holds the calls asked anew (what a what-if costs; its record keeps their `answers` so that it
    replays); `reused` counts the requests the record answered.
    """

    def __init__(self, inner: ModelBackend, recorded: Iterable[ModelCall | Answer],
                 max_calls: int | None = None) -> None:  # fmt: skip
        super().__init__(inner)
        self._recorded = _by_digest(recorded)
        self.max_calls = max_calls
        self.asked: list[ModelCall] = []
        self.reused = 0

    @property
    def calls(self) -> int:
        return len(self.asked)

    @property
    def tokens(self) -> int:
        return sum(c.response.usage.input_tokens + c.response.usage.output_tokens for c in self.asked)

    @property
    def answers(self) -> tuple[Answer, ...]:
        """The calls asked anew as a contest's record keeps them."""
        return tuple(Answer.of(c) for c in self.asked)

    def complete(self, request: ModelRequest) -> ModelResponse:
        recorded = self._recorded.get(request.digest)
        if recorded is not None:
            self.reused += 1
            return replace(recorded, cost_usd=0.0, latency_s=0.0)
        if self.max_calls is not None and self.calls >= self.max_calls:
            raise CallBudgetError(f"the call budget of {self.max_calls} model call(s) is spent")
        response = self._inner.complete(request)
        self.asked.append(ModelCall(request, response))
        self._recorded.setdefault(request.digest, response)  # a later what-if asking the same is answered too
        return response


def answering_from(recorded: Iterable[ModelCall | Answer]) -> ReusingBackend:
    """A backend that answers from `recorded` alone, by request digest: what a contest's replay runs on.

    A request not recorded (one the log or the changes no longer build as they did) is a ModelBackendError.
    """
    return ReusingBackend(RecordedAnswers(()), recorded)


@dataclass(frozen=True)
class Contested:
    """The decision a what-if contests: how to run it again, the events it read, its view and its label."""

    target: ReplayTarget
    trajectory: Trajectory
    view: MemoryView
    label: str | None
    notice: str = ""  # the reasons the decision step itself stated (its notice), where it gave one


@dataclass(frozen=True)
class WhatIf:
    """A re-decision over a changed log, against the decision it contests."""

    changes: tuple[EventChange, ...]
    original_label: str | None
    label: str | None
    facts_added: tuple[Fact, ...]
    facts_removed: tuple[Fact, ...]
    cites_left_out: tuple[Fact, ...]  # facts of the new view citing an event that was left out: a model's error
    calls: int  # asked anew
    tokens: int
    from_scratch_calls: int  # what the re-decision would have asked with nothing reused
    from_scratch_tokens: int
    result: RunResult

    @property
    def changed(self) -> bool:
        return self.label != self.original_label


def what_if(contested: Contested, changes: Sequence[EventChange], backend: ReusingBackend) -> WhatIf:
    """Re-decides the contested decision over its events with `changes` applied (the original is not touched)."""
    original = contested.view
    log = changed_log(contested.trajectory, changes)
    calls_before, tokens_before = backend.calls, backend.tokens
    result = rerun(contested.target, log.checked, backend, events=log.events)
    before, after = set(original.facts), set(result.view.facts)
    return WhatIf(
        changes=tuple(changes),
        original_label=contested.label,
        label=result.decision.label,
        facts_added=tuple(f for f in result.view.facts if f not in before),
        facts_removed=tuple(f for f in original.facts if f not in after),
        cites_left_out=tuple(f for f in result.view.facts if log.left_out.intersection(f.citations)),
        calls=backend.calls - calls_before,
        tokens=backend.tokens - tokens_before,
        from_scratch_calls=len(result.calls),
        from_scratch_tokens=sum(c.response.usage.input_tokens + c.response.usage.output_tokens for c in result.calls),
        result=result,
    )


@dataclass(frozen=True)
class Decisive:
    """The events without which a decision changes, as far as its call budget allowed testing.

    `groups`: each a set of event indices whose leaving out together changes the label (single events first).
    `tested`: every set tried, in order. `complete` is False when the call budget ran out first.
    """

    label: str | None
    groups: tuple[tuple[int, ...], ...]
    tested: tuple[tuple[int, ...], ...]
    runs: tuple[WhatIf, ...]
    calls: int
    tokens: int
    from_scratch_calls: int
    from_scratch_tokens: int
    max_calls: int | None
    complete: bool


def candidate_groups(view: MemoryView, trajectory: Trajectory) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """The sets a decisive analysis tries: each cited event alone, then the groups.

    Groups are tried only where no event alone is decisive: each fact's citations together, then every
    cited event together.
    """
    cited = sorted(i for i in view.cited_indices if trajectory.has_index(i))
    singles: list[tuple[int, ...]] = [(i,) for i in dict.fromkeys(cited)]
    groups: list[tuple[int, ...]] = []
    for fact in view.facts:
        group = tuple(sorted({i for i in fact.citations if trajectory.has_index(i)}))
        if len(group) > 1 and group not in groups:
            groups.append(group)
    whole = tuple(sorted(set(cited)))
    if len(whole) > 1 and whole not in groups and len(whole) < len(trajectory):
        groups.append(whole)
    return singles, groups


def decisive_events(contested: Contested, backend: ReusingBackend) -> Decisive:
    """Leaves out each event the view cites, one at a time, then groups where no single one changes the label."""
    trajectory = contested.trajectory
    singles, groups = candidate_groups(contested.view, trajectory)
    found: list[tuple[int, ...]] = []
    runs: list[WhatIf] = []
    complete = True
    try:
        for stage in (singles, groups):
            if found:
                break
            for group in stage:
                if len(group) >= len(trajectory):
                    continue
                outcome = what_if(contested, leave_out(*group), backend)
                runs.append(outcome)
                if outcome.changed:
                    found.append(group)
    except CallBudgetError:
        complete = False
    tested = tuple(tuple(c.index for c in run.changes) for run in runs)
    return Decisive(contested.label, tuple(found), tested, tuple(runs), backend.calls, backend.tokens,
                    sum(r.from_scratch_calls for r in runs), sum(r.from_scratch_tokens for r in runs),
                    backend.max_calls, complete)  # fmt: skip


NOT_ADVICE = ("These are the reasons this decision's record supports (its memory view and the events it cites), "
              "found by re-deciding it without them; they are not legal advice.")  # fmt: skip


@dataclass(frozen=True)
class Reason:
    """A fact of the view given as a reason, and whether leaving its cited events out changes the label.

    `changes_decision` is None when the fact cites no event, or the call budget ran out before it was tried.
    """

    rank: int
    fact: Fact
    changes_decision: bool | None
    in_notice: bool  # the decision's own notice names this fact's figures

    @property
    def finding(self) -> str:
        """What was found of this reason, in words: the CLI's lines and the UI's page both say it so."""
        verdict = {True: "the decision changes without the events it cites",
                   False: "the decision stands without the events it cites",
                   None: "not tried"}[self.changes_decision]  # fmt: skip
        return verdict + ("; named in the decision's notice" if self.in_notice else "")


NO_REASONS = "No fact of the view changes the decision when left out, and its notice names none."


@dataclass(frozen=True)
class AdverseReasons:
    """The principal reasons for an adverse decision, weightiest first, under its domain's heading."""

    domain: str
    label: str
    heading: str
    reasons: tuple[Reason, ...]
    complete: bool  # False: the call budget ran out before every fact was tried
    runs: tuple[WhatIf, ...] = ()

    def render(self) -> list[str]:
        lines = [f"{self.heading}: {self.label}"]
        if not self.reasons:
            lines.append(NO_REASONS)
        for reason in self.reasons:
            cites = "".join(f"[{i}]" for i in reason.fact.citations) or "(cites no event)"
            lines.append(f"{reason.rank}. {reason.fact.text} {cites}: {reason.finding}")
        if not self.complete:
            lines.append("The call budget ran out before every fact was tried: raise --max-calls for the rest.")
        lines.append(NOT_ADVICE)
        return lines


def principal_reasons(contested: Contested, heading: str, backend: ReusingBackend, *, limit: int = 4) -> AdverseReasons:
    """The view's facts, weightiest first, as the reasons for an adverse decision.

    A fact is a reason when its cited events change the decision when left out (those first) or when the
    decision's own notice names its figures; ties keep the view's order; a fact that is neither is not
    given. Each fact's citations are left out together (a what-if each, within the backend's call budget).
    At most `limit` reasons are given (an adverse action notice names up to four).
    """
    trajectory = contested.trajectory
    tried: dict[tuple[int, ...], bool] = {}
    runs: list[WhatIf] = []
    complete = True
    outcomes: list[tuple[Fact, bool | None]] = []
    for fact in contested.view.facts:
        group = tuple(sorted({i for i in fact.citations if trajectory.has_index(i)}))
        if not group or len(group) >= len(trajectory):
            outcomes.append((fact, None))
            continue
        if group not in tried and complete:
            try:
                runs.append(what_if(contested, leave_out(*group), backend))
                tried[group] = runs[-1].changed
            except CallBudgetError:
                complete = False
        outcomes.append((fact, tried.get(group)))
    named = {a.value for a in extract_anchors(contested.notice)}
    in_notice = [any(a.value in named for a in extract_anchors(fact.text)) for fact, _ in outcomes]
    weighty = [n for n in range(len(outcomes)) if outcomes[n][1] is True or in_notice[n]]
    ordered = sorted(weighty, key=lambda n: (outcomes[n][1] is not True, not in_notice[n], n))[:limit]
    reasons = tuple(Reason(rank, outcomes[n][0], outcomes[n][1], in_notice[n]) for rank, n in enumerate(ordered, 1))
    return AdverseReasons(contested.target.task.domain, str(contested.label), heading, reasons, complete,
                          tuple(runs))  # fmt: skip
