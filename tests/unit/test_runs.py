"""DPM and Summ-only runs with the offline backend: calls, budgets, grounding, determinism."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pipeline.core.events import Event, Trajectory
from pipeline.core.model import Purpose
from pipeline.core.run import SummVariant, run_dpm, run_summ
from pipeline.core.task import Architecture, Budget
from pipeline.core.view import MemoryView
from pipeline.llm.extractive.backend import ExtractiveBackend
from tests.cases import load_fixture
from tests.processes import run_python

CASE = load_fixture()
BACKEND = ExtractiveBackend()


@pytest.mark.parametrize("chars", [300, 700, 2000])
def test_dpm_makes_two_calls_and_a_grounded_view_within_budget(chars: int) -> None:
    result = run_dpm(CASE.trajectory, CASE.task, Budget(chars), BACKEND)
    assert [c.request.purpose for c in result.calls] == [Purpose.PROJECT, Purpose.DECIDE]
    assert result.architecture is Architecture.DPM
    assert result.check.within_budget
    assert result.check.citation_validity == 1.0
    assert result.check.grounding_rate == 1.0
    assert result.decision.label == CASE.label == "DENY"
    assert result.decision.ok


def test_dpm_uses_the_amended_values_not_the_superseded_ones() -> None:
    view = run_dpm(CASE.trajectory, CASE.task, Budget(2000), BACKEND).view_text
    assert "- Appraised value: $441,000 [9]" in view
    assert "- Gross monthly income: $8,900 [8]" in view
    assert "- Credit score: 688 [3]" in view


def test_a_binding_budget_keeps_fewer_facts_honestly() -> None:
    tight = run_dpm(CASE.trajectory, CASE.task, Budget(250), BACKEND)
    loose = run_dpm(CASE.trajectory, CASE.task, Budget(3000), BACKEND)
    assert len(tight.view.facts) < len(loose.view.facts)
    assert tight.view.char_length <= 250


def test_summ_only_makes_one_call_per_event_plus_the_decision() -> None:
    result = run_summ(CASE.trajectory, CASE.task, Budget(700), BACKEND)
    purposes = [c.request.purpose for c in result.calls]
    assert purposes == [Purpose.SUMMARIZE] * len(CASE.trajectory) + [Purpose.DECIDE]
    assert result.variant == "rewrite"
    assert result.check.within_budget


def test_buffered_summ_only_calls_only_on_overflow() -> None:
    loose = run_summ(CASE.trajectory, CASE.task, Budget(5000), BACKEND, SummVariant.BUFFERED)
    assert [c.request.purpose for c in loose.calls] == [Purpose.DECIDE]
    assert loose.variant is SummVariant.BUFFERED
    tight = run_summ(CASE.trajectory, CASE.task, Budget(600), BACKEND, SummVariant.BUFFERED)
    summarize_calls = sum(1 for c in tight.calls if c.request.purpose is Purpose.SUMMARIZE)
    assert 0 < summarize_calls < len(CASE.trajectory)


def _cited(view: MemoryView, events: Sequence[Event]) -> dict[str, frozenset[str]]:
    """Each fact with the texts of the events it cites (indices change with the order, texts do not)."""
    return {f.text: frozenset(events[i - 1].text for i in f.citations) for f in view.facts}


def test_summary_updates_are_path_dependent() -> None:
    """The same events in another order give Summ-only another memory; DPM's memory is order-free in content."""
    events = CASE.trajectory.events
    swapped = (*events[:2], events[3], events[2], *events[4:])
    reordered = Trajectory(CASE.ref, tuple(Event(CASE.ref, i, e.kind, e.text) for i, e in enumerate(swapped, start=1)))
    a = run_summ(CASE.trajectory, CASE.task, Budget(400), BACKEND).view_text
    b = run_summ(reordered, CASE.task, Budget(400), BACKEND).view_text
    assert a != b
    for chars in (400, 1200):
        original = run_dpm(CASE.trajectory, CASE.task, Budget(chars), BACKEND)
        shuffled = run_dpm(reordered, CASE.task, Budget(chars), BACKEND)
        assert _cited(original.view, events) == _cited(shuffled.view, swapped)  # same facts from the same events
        assert original.decision.label == shuffled.decision.label


_SCRIPT = """
from pipeline.core.run import run_dpm, run_summ
from pipeline.core.task import Budget
from pipeline.core.hashing import text_digest
from pipeline.llm.extractive.backend import ExtractiveBackend
from tests.cases import load_fixture
case = load_fixture()
for chars in (300, 1200):
    d = run_dpm(case.trajectory, case.task, Budget(chars), ExtractiveBackend())
    s = run_summ(case.trajectory, case.task, Budget(chars), ExtractiveBackend())
    print(text_digest(d.view_text), d.calls[0].response.raw_digest, text_digest(s.view_text), d.decision.label)
"""


def test_projection_is_byte_identical_across_processes_and_hash_seeds() -> None:
    outputs = [run_python(_SCRIPT, seed) for seed in ("0", "4242")]
    assert outputs[0] == outputs[1]
    assert len(outputs[0].splitlines()) == 2
