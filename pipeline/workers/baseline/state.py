"""The baseline's state per case and per step, as stored in its changelog-backed tables.

Typed values with a JSON form, so the faust agents stay thin and this logic is unit-tested
without a broker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pipeline.core.errors import DpmError
from pipeline.core.events import Event, LogPosition
from pipeline.core.run import ModelCall, SummMemory, summ_step_requests
from pipeline.core.task import Budget, TaskSpec
from pipeline.core.view import EMPTY_VIEW, Fact, MemoryView
from pipeline.core.window import TokenCounter, Window
from pipeline.wire.audit import call_to_wire, response_from_wire
from pipeline.wire.event import EventRecord


@dataclass(frozen=True)
class HandledTriggers:
    """A case's last triggers, decided or refused as duplicates, and where each was read.

    A new record whose trigger id was decided is a duplicate. (A record delivered again is told by
    the published ledger, pipeline.kafka.processing.once.) Stored as [[trigger id, [partition, offset],
    refused], ...], newest last.
    """

    entries: tuple[tuple[str, tuple[int, int], bool], ...] = ()

    def decided(self, trigger_id: str) -> bool:
        return any(t == trigger_id and not refused for t, _, refused in self.entries)

    def add(self, trigger_id: str, position: LogPosition, *, refused: bool, keep: int) -> HandledTriggers:
        entry = (trigger_id, (position.partition, position.offset), refused)
        return HandledTriggers((*self.entries, entry)[-keep:])

    def to_json(self) -> list[list[Any]]:
        return [[t, list(at), refused] for t, at, refused in self.entries]

    @classmethod
    def from_json(cls, raw: Sequence[Sequence[Any]] | None) -> HandledTriggers:
        """Also reads entries stored before refusals were kept ([trigger id, position]: decided)."""
        return cls(tuple((str(e[0]), (int(e[1][0]), int(e[1][1])), len(e) > 2 and bool(e[2])) for e in raw or ()))


@dataclass(frozen=True)
class CaseState:
    """What the baseline keeps per case: the task it summarizes for, its budgets, the last step taken.

    `rewritten` lists events sent again with other content after they were folded: the running
    summary holds their old text, which the log no longer does, so the case is not decided again.
    """

    task: TaskSpec
    budgets: tuple[int, ...]
    last_seq: int = 0
    rewritten: tuple[int, ...] = ()

    def after(self, seq: int) -> CaseState:
        return replace(self, last_seq=seq)

    def with_rewritten(self, seq: int) -> CaseState:
        return replace(self, rewritten=tuple(sorted({*self.rewritten, seq})))

    def to_json(self) -> dict[str, Any]:
        value = {"task": self.task.wire(), "budgets": list(self.budgets), "last_seq": self.last_seq}
        return {**value, "rewritten": list(self.rewritten)} if self.rewritten else value

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> CaseState:
        return cls(TaskSpec.from_wire(raw["task"]), tuple(int(b) for b in raw["budgets"]), int(raw["last_seq"]),
                   tuple(int(s) for s in raw.get("rewritten", ())))  # fmt: skip


def memory_to_json(memory: SummMemory) -> dict[str, Any]:
    """A step's memory as JSON: the view's sections (not its text, which need not round-trip) and problems."""
    view = memory.view
    return {
        "facts": [[f.text, list(f.citations)] for f in view.facts],
        "reasoning": list(view.reasoning),
        "compliance": list(view.compliance),
        "problems": list(memory.problems),
        "cut": memory.cut,
    }


def memory_from_json(raw: Mapping[str, Any]) -> SummMemory:
    """Inverse of memory_to_json."""
    view = MemoryView(
        tuple(Fact(text, tuple(cites)) for text, cites in raw["facts"]),
        tuple(raw["reasoning"]),
        tuple(raw["compliance"]),
    )
    return SummMemory(view, tuple(raw["problems"]), int(raw["cut"]))


class StepMismatchError(DpmError):
    """A stored step's answer does not belong to the request rebuilt for it (the stored state is not ours)."""


# What a stored step keeps of each call: the answer and its figures. The request (the prompt holds the
# event and the previous summary, both stored already) is rebuilt when a decision is audited, and
# checked against the digest kept here; the answer's text is re-read from the raw bytes.
_NOT_STORED = ("request", "response_text")


@dataclass(frozen=True)
class SummStep:
    """One Summ-only step: the event, where it was read, the memory after it and the calls it made (if any).

    `window` is the window the event was folded in parts under (one call per part), else None.
    """

    event: Event
    position: LogPosition
    memory: SummMemory
    calls: tuple[ModelCall, ...]
    window: Window | None = None

    def to_json(self) -> dict[str, Any]:
        """The changelog value: bounded by the event, the budget and the answer, not by the prompt."""
        value = {
            "event": EventRecord(self.event).to_wire(),
            "position": [self.position.partition, self.position.offset],
            "memory": memory_to_json(self.memory),
            "calls": [{k: v for k, v in call_to_wire(c).items() if k not in _NOT_STORED} for c in self.calls],
        }
        return value if self.window is None else {**value, "window": self.window.wire()}

    @staticmethod
    def memory_of(raw: Mapping[str, Any]) -> SummMemory:
        """Only the memory of a stored step: what the next step needs, without decoding the rest."""
        return memory_from_json(raw["memory"])

    @classmethod
    def from_json(
        cls,
        raw: Mapping[str, Any],
        previous: SummMemory,
        *,
        task: TaskSpec,
        budget: Budget,
        counter: TokenCounter | None = None,
    ) -> SummStep:
        """The step stored by to_json, its requests rebuilt from the memory before it, the task, budget and window."""
        event = EventRecord.from_wire(raw["event"]).event
        window = None if raw.get("window") is None else Window.from_wire(raw["window"]).counted_with(counter)
        responses = [response_from_wire(stored) for stored in raw["calls"]]
        requests = summ_step_requests(previous, event.seq, event, [r.text for r in responses], task=task,
                                      budget=budget, window=window)  # fmt: skip
        digests = [stored["request_sha256"] for stored in raw["calls"]]
        if digests != [request.digest for request in requests]:
            raise StepMismatchError(f"{event.case.key} step {event.seq}: the stored answer is for another request")
        calls = tuple(ModelCall(request, response) for request, response in zip(requests, responses, strict=True))
        return cls(event, LogPosition(*raw["position"]), memory_from_json(raw["memory"]), calls, window)


def load_steps(
    raws: Sequence[Mapping[str, Any]], *, task: TaskSpec, budget: Budget, counter: TokenCounter | None = None
) -> list[SummStep]:
    """Stored steps 1..n of one case and budget, in order, each call's request rebuilt.

    `counter` is the model's tokenizer, for steps whose event was folded in parts as counted by it.
    """
    steps: list[SummStep] = []
    for raw in raws:
        previous = steps[-1].memory if steps else SummMemory(EMPTY_VIEW)
        steps.append(SummStep.from_json(raw, previous, task=task, budget=budget, counter=counter))
    return steps


def step_key(case_key: str, budget: int, seq: int) -> str:
    """The steps table's key of one step: `tenant/case/budget/seq`."""
    return f"{case_key}/{budget}/{seq:08d}"


def window_of(steps: Sequence[SummStep]) -> Window | None:
    """The window some step was folded in parts under (the decision records it), else None."""
    return next((s.window for s in steps if s.window is not None), None)


def calls_of(steps: Sequence[SummStep]) -> list[ModelCall]:
    """Every model call of the steps, in order."""
    return [c for s in steps for c in s.calls]
