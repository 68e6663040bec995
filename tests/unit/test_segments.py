"""Segmented projection (core/segments.py): cut rule, tree, reuse and the fit-the-window path, offline."""

from __future__ import annotations

import itertools
import re
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.bench.generate import GenerationSpec, generate_cases
from pipeline.core.case import Case
from pipeline.core.events import CaseRef, Event, Trajectory
from pipeline.core.model import Purpose
from pipeline.core.prompt import PromptEvent, is_merge_prompt, read_projection_prompt
from pipeline.core.run import run_dpm
from pipeline.core.segments import DictSegmentStore, cut_segments, segment_key
from pipeline.core.task import Budget, TaskSpec
from pipeline.core.window import Window, WindowTooSmallError, estimated_tokens
from pipeline.llm.extractive.backend import ExtractiveBackend
from tests.cases import CountingBackend

_TASK = TaskSpec("loan", "Decide the application.", ("APPROVE", "DENY", "REFER"))
_BUDGET = Budget(1350)
_WINDOW = Window(tokens=8192, segment_tokens=8192)


@cache
def _case(chars: int) -> Case:
    spec = GenerationSpec(domains=("loan",), per_domain=1, chars=(chars, chars + chars // 20),
                          events=(max(82, chars // 300), max(96, chars // 280)))  # fmt: skip
    return generate_cases(spec)[0]


def _appended(trajectory: Trajectory, text: str) -> Trajectory:
    last = trajectory.events[-1]
    return Trajectory(trajectory.case, (*trajectory.events, Event(last.case, last.seq + 1, "note", text)))


def _prompt_events(texts: list[str]) -> list[PromptEvent]:
    return [PromptEvent(i, "doc", text) for i, text in enumerate(texts, start=1)]


def test_a_case_that_fits_its_window_is_decided_exactly_as_without_one() -> None:
    case = _case(27_000)
    plain = run_dpm(case.trajectory, case.task, _BUDGET, ExtractiveBackend())
    windowed = run_dpm(case.trajectory, case.task, _BUDGET, ExtractiveBackend(), window=Window(200_000, 50_000))
    assert [c.request.digest for c in windowed.calls] == [c.request.digest for c in plain.calls]
    assert windowed.view_text == plain.view_text
    assert windowed.segments == ()
    assert windowed.window is None


def test_a_case_larger_than_its_window_is_projected_in_segments_and_merged() -> None:
    case = _case(100_000)
    backend = CountingBackend()
    result = run_dpm(case.trajectory, case.task, _BUDGET, backend, window=_WINDOW)
    leaves = [n for n in result.segments if n.level == 0]
    assert len(leaves) > 1
    assert leaves[0].first == 1
    assert leaves[-1].last == len(case.trajectory)
    assert all(a.last + 1 == b.first for a, b in itertools.pairwise(leaves))  # consecutive, no overlap
    for request in backend.requests:  # every prompt fits the window with its answer
        if request.purpose is not Purpose.DECIDE:
            assert estimated_tokens(request.system) + estimated_tokens(request.prompt) <= _WINDOW.prompt_limit(
                request.max_tokens
            )
    assert is_merge_prompt(result.calls[-2].request.prompt)  # the final view is the root merge's answer
    assert result.check.citation_validity == 1.0  # checked against the original events
    assert result.check.within_budget
    assert result.decision.label in case.task.label_space
    assert result.window == _WINDOW


def test_segmented_projection_is_deterministic() -> None:
    case = _case(100_000)
    first = run_dpm(case.trajectory, case.task, _BUDGET, ExtractiveBackend(), window=_WINDOW)
    second = run_dpm(case.trajectory, case.task, _BUDGET, ExtractiveBackend(), window=_WINDOW)
    assert first.view_text == second.view_text
    assert first.segments == second.segments


def test_a_redecision_after_one_event_computes_only_the_tail_and_the_merges_above_it() -> None:
    case = _case(300_000)
    store = DictSegmentStore()
    first = run_dpm(case.trajectory, case.task, _BUDGET, ExtractiveBackend(), window=_WINDOW, store=store)
    later = _appended(case.trajectory, "Underwriter note: the file was reviewed again; nothing changed.")
    backend = CountingBackend()
    again = run_dpm(later, case.task, _BUDGET, backend, window=_WINDOW, store=store)
    levels = max(n.level for n in again.segments)
    computed = [n for n in again.segments if not n.reused]
    assert len(computed) <= levels + 1  # the tail segment, and at most one merge per level
    assert computed[0].level == 0
    assert computed[0].last == len(later)
    assert len(backend.requests) == len(computed) + 1  # and the decision
    first_tokens = sum(c.response.usage.input_tokens for c in first.calls)
    again_tokens = sum(c.response.usage.input_tokens for c in again.calls)
    assert again_tokens < 0.2 * first_tokens


def test_without_a_store_every_view_is_computed_and_the_view_is_the_same() -> None:
    case = _case(100_000)
    store = DictSegmentStore()
    run_dpm(case.trajectory, case.task, _BUDGET, ExtractiveBackend(), window=_WINDOW, store=store)
    reused = run_dpm(case.trajectory, case.task, _BUDGET, ExtractiveBackend(), window=_WINDOW, store=store)
    fresh = run_dpm(case.trajectory, case.task, _BUDGET, ExtractiveBackend(), window=_WINDOW)
    assert any(n.reused for n in reused.segments)
    assert reused.view_text == fresh.view_text
    assert not reused.segments[-1].reused  # the root is always computed: its answer is in the audit


@pytest.mark.parametrize(
    "tamper",
    [
        lambda text: re.sub(r"\[\d+\]$", "[99999]", text, count=1, flags=re.MULTILINE),  # cites outside its range
        lambda text: text + "  ",  # not canonical
        lambda text: text + "\n- " + "x" * 2000,  # over the budget
    ],
)
def test_a_stored_view_that_cannot_be_trusted_is_computed_again(tamper: object) -> None:
    case = _case(100_000)
    store = DictSegmentStore()
    honest = run_dpm(case.trajectory, case.task, _BUDGET, ExtractiveBackend(), window=_WINDOW, store=store)
    for key, text in list(store.views.items()):
        store.views[key] = tamper(text)  # type: ignore[operator]
    again = run_dpm(case.trajectory, case.task, _BUDGET, ExtractiveBackend(), window=_WINDOW, store=store)
    assert again.view_text == honest.view_text
    assert not any(n.reused for n in again.segments if n.level == 0)


def test_segment_keys_change_with_the_model_and_the_request() -> None:
    events = _prompt_events(["a" * 10])
    from pipeline.core.prompt import segment_request  # noqa: PLC0415 - only this test builds one by hand

    request = segment_request(events, _TASK, _BUDGET, whole=False)
    other_budget = segment_request(events, _TASK, Budget(1400), whole=False)
    assert segment_key("m1", request) != segment_key("m2", request)
    assert segment_key("m1", request) != segment_key("m1", other_budget)
    assert segment_key("m1", request) == segment_key("m1", segment_request(events, _TASK, _BUDGET, whole=False))


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=30_000), min_size=1, max_size=40),
    more=st.lists(st.integers(min_value=1, max_value=30_000), min_size=1, max_size=10),
)
def test_appending_events_never_moves_an_earlier_boundary(sizes: list[int], more: list[int]) -> None:
    window = Window(tokens=4096, segment_tokens=3000)
    texts = [f"event {i} " + "y" * size for i, size in enumerate(sizes)]
    before = cut_segments(_prompt_events(texts), _TASK, Budget(600), window)
    after = cut_segments(_prompt_events(texts + [f"more {i} " + "z" * s for i, s in enumerate(more)]), _TASK,
                         Budget(600), window)  # fmt: skip
    assert after[: len(before) - 1] == before[:-1]  # all but the open last segment stay as they were
    assert "".join(e.text for s in before for e in s) == "".join(texts)  # and nothing is lost


def test_an_event_larger_than_a_segment_is_cut_into_parts_cited_as_the_event() -> None:
    case = CaseRef("t", "big")
    huge = "The borrower's statement. " * 4_000 + "Credit score: 712."  # about 104,000 characters
    events = (Event(case, 1, "doc", "Loan amount: $250,000."), Event(case, 2, "doc", huge))
    backend = CountingBackend()
    result = run_dpm(Trajectory(case, events), _TASK, _BUDGET, backend, window=Window(8192, 8192))
    leaves = [n for n in result.segments if n.level == 0]
    assert len(leaves) > 2
    assert all(n.first == n.last == 2 for n in leaves[1:])
    parts = [e for r in backend.requests if r.purpose is Purpose.PROJECT and not is_merge_prompt(r.prompt)
             for e in read_projection_prompt(r.prompt).events if e.index == 2]  # fmt: skip
    assert "".join(p.text for p in parts) == huge
    assert result.check.citation_validity == 1.0


def test_a_window_too_small_for_the_budget_is_refused() -> None:
    case = _case(27_000)
    with pytest.raises(WindowTooSmallError):
        run_dpm(case.trajectory, case.task, Budget(5000), ExtractiveBackend(), window=Window(2048, 2048))


class _Build(ExtractiveBackend):
    """The offline backend under a fingerprint, as a served model file's digest tells two builds apart."""

    def __init__(self, fingerprint: str) -> None:
        self._fingerprint = fingerprint

    def fingerprint(self) -> str:
        return self._fingerprint


def test_views_of_another_build_of_the_same_model_are_not_reused() -> None:
    case = _case(100_000)
    store = DictSegmentStore()
    run_dpm(case.trajectory, case.task, _BUDGET, _Build("sha256:aaaa"), window=_WINDOW, store=store)
    same = run_dpm(case.trajectory, case.task, _BUDGET, _Build("sha256:aaaa"), window=_WINDOW, store=store)
    other = run_dpm(case.trajectory, case.task, _BUDGET, _Build("sha256:bbbb"), window=_WINDOW, store=store)
    assert any(n.reused for n in same.segments)
    assert not any(n.reused for n in other.segments)
