"""Summ-only folds an event larger than its model's window in parts, online and offline, and replays it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from pipeline.core.events import CaseRef, Event, LogPosition, Trajectory
from pipeline.core.model import ModelRequest, ModelResponse, Purpose
from pipeline.core.prompt import read_summarization_prompt
from pipeline.core.run import ModelCall, SummMemory, SummVariant, run_summ, summ_step
from pipeline.core.task import Budget, TaskSpec
from pipeline.core.verification import ReplayStatus, verify_recorded, verify_replay
from pipeline.core.view import EMPTY_VIEW
from pipeline.core.window import TokenCountError, Window, estimated_tokens
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.wire.audit import calls_in_order
from pipeline.wire.decision import PositionsSource, Provenance
from pipeline.wire.run_records import run_records
from pipeline.wire.trigger import DecisionId
from pipeline.workers.baseline.state import SummStep, load_steps
from tests.cases import CountingBackend

_CASE = CaseRef("t", "long-event")
_TASK = TaskSpec("loan", "Decide the application.", ("APPROVE", "DENY", "REFER"))
_BUDGET = Budget(700)
_WINDOW = Window(tokens=4096, segment_tokens=4096)
_HUGE = "The appraisal report, page after page. " * 1_500 + "Appraised value: $410,000."  # about 60,000 characters
_EVENTS = (
    Event(_CASE, 1, "doc", "Loan amount: $250,000. Application ID: LN-2026-000123."),
    Event(_CASE, 2, "doc", _HUGE),
    Event(_CASE, 3, "doc", "Credit score: 731."),
)
_TRAJECTORY = Trajectory(_CASE, _EVENTS)


def test_an_event_larger_than_the_window_is_folded_in_parts_each_prompt_fitting() -> None:
    backend = CountingBackend()
    result = run_summ(_TRAJECTORY, _TASK, _BUDGET, backend, window=_WINDOW)
    folds = [r for r in backend.requests if r.purpose is Purpose.SUMMARIZE]
    assert len(folds) > 3  # the large event took several calls
    for request in folds:
        assert estimated_tokens(request.system) + estimated_tokens(request.prompt) <= _WINDOW.prompt_limit(
            request.max_tokens
        )
    parts = [read_summarization_prompt(r.prompt).event for r in folds]
    assert "".join(p.text for p in parts if p.index == 2) == _HUGE  # every part, cited as event 2
    assert result.window == _WINDOW
    assert result.check.citation_validity == 1.0


def test_a_case_whose_events_fit_is_folded_exactly_as_without_a_window() -> None:
    small = Trajectory(_CASE, (_EVENTS[0], Event(_CASE, 2, "doc", "Appraised value: $410,000."), _EVENTS[2]))
    windowed = run_summ(small, _TASK, _BUDGET, ExtractiveBackend(), window=_WINDOW)
    plain = run_summ(small, _TASK, _BUDGET, ExtractiveBackend())
    assert [c.request.digest for c in windowed.calls] == [c.request.digest for c in plain.calls]
    assert windowed.window is None


def test_a_decision_with_an_event_folded_in_parts_replays_match() -> None:
    result = run_summ(_TRAJECTORY, _TASK, _BUDGET, ExtractiveBackend(), window=_WINDOW)
    provenance = Provenance(DecisionId("d-1", result.architecture), (), PositionsSource.TRIGGER, "extractive", "t")
    records = run_records(result, _TRAJECTORY, task=_TASK, budget=_BUDGET, provenance=provenance)
    target = records.decision.replay_target()
    assert target.window == _WINDOW
    assert verify_replay(target, _TRAJECTORY, None, ExtractiveBackend()).status is ReplayStatus.MATCH
    assert verify_recorded(target, calls_in_order(records.audits)).status is ReplayStatus.MATCH


def test_the_baseline_stores_a_step_in_parts_and_rebuilds_each_calls_request() -> None:
    stored = []
    memory = SummMemory(EMPTY_VIEW)
    for index, event in enumerate(_EVENTS, start=1):
        calls: list[ModelCall] = []

        def call(request: ModelRequest, calls: list[ModelCall] = calls) -> ModelResponse:
            response = ExtractiveBackend().complete(request)
            calls.append(ModelCall(request, response))
            return response

        memory = summ_step(memory, index, event, task=_TASK, budget=_BUDGET, variant=SummVariant.REWRITE, call=call,
                           window=_WINDOW)  # fmt: skip
        window = _WINDOW if len(calls) > 1 else None
        stored.append((SummStep(event, LogPosition(0, index), memory, tuple(calls), window).to_json(), calls))
    steps = load_steps([value for value, _ in stored], task=_TASK, budget=_BUDGET)
    for step, (_, calls) in zip(steps, stored, strict=True):
        assert [c.request.digest for c in step.calls] == [c.request.digest for c in calls]
    assert steps[1].window == _WINDOW
    assert len(steps[1].calls) > 1


@dataclass(frozen=True)
class _HalfCounter:
    """A tokenizer denser than the estimate: 2 characters per token."""

    name: str = "a test tokenizer"

    def count(self, texts: Sequence[str]) -> list[int]:
        return [(len(text) + 1) // 2 for text in texts]


def test_steps_folded_under_a_tokenizer_are_rebuilt_with_the_baselines_own_tokenizer() -> None:
    window = Window(tokens=4096, segment_tokens=4096, counter=_HalfCounter())
    calls: list[ModelCall] = []

    def call(request: ModelRequest) -> ModelResponse:
        response = ExtractiveBackend().complete(request)
        calls.append(ModelCall(request, response))
        return response

    memory = summ_step(SummMemory(EMPTY_VIEW), 2, _EVENTS[1], task=_TASK, budget=_BUDGET, variant=SummVariant.REWRITE,
                       call=call, window=window)  # fmt: skip
    stored = SummStep(_EVENTS[1], LogPosition(0, 2), memory, tuple(calls), window).to_json()
    assert stored["window"]["counted_by"] == "a test tokenizer"
    with pytest.raises(TokenCountError):  # a process without that tokenizer cannot cut the event again
        load_steps([stored], task=_TASK, budget=_BUDGET)
    (step,) = load_steps([stored], task=_TASK, budget=_BUDGET, counter=_HalfCounter())
    assert [c.request.digest for c in step.calls] == [c.request.digest for c in calls]
