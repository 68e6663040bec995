"""What-if re-decisions, decisive events and adverse-action reasons (pipeline/core/contest.py), offline backend."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipeline.bench.generate import GenerationSpec, generate_cases
from pipeline.core.case import Case
from pipeline.core.contest import (
    NOT_ADVICE,
    CallBudgetError,
    Contested,
    ContestError,
    EventChange,
    ReusingBackend,
    decisive_events,
    leave_out,
    principal_reasons,
    what_if,
)
from pipeline.core.domains import rules_for
from pipeline.core.hashing import events_digest, text_digest
from pipeline.core.run import RunResult, run_dpm, run_summ
from pipeline.core.task import Architecture, Budget
from pipeline.core.verification import ReplayTarget
from pipeline.core.window import Window
from pipeline.llm.extractive.backend import ExtractiveBackend

BUDGET = Budget(900)
CASES = generate_cases(GenerationSpec(per_domain=2, events=(24, 30), chars=(6_000, 7_500), tenant="contest"))
OFFLINE = ExtractiveBackend()


def decided(case: Case, architecture: Architecture, window: Window | None = None) -> tuple[Contested, RunResult]:
    """The case decided offline, as a what-if finds it: its replay target, events, view, label and notice."""
    run = run_dpm if architecture is Architecture.DPM else run_summ
    result = run(case.trajectory, case.task, BUDGET, OFFLINE, window=window)
    target = ReplayTarget(architecture, result.variant, case.task, BUDGET, events_digest(case.trajectory.events),
                          text_digest(result.view_text), None, result.window, result.segments)  # fmt: skip
    notice = result.decision.notice or ""
    return Contested(target, case.trajectory, result.view, result.decision.label, notice), result


def uncited_before_a_citation(contested: Contested) -> int:
    cited = set(contested.view.cited_indices)
    return next(i for i in range(1, max(cited)) if i not in cited)


@pytest.mark.parametrize("architecture", list(Architecture))
def test_leaving_out_an_uncited_event_keeps_label_facts_and_their_original_indices(architecture: Architecture) -> None:
    for case in CASES:
        contested, result = decided(case, architecture)
        index = uncited_before_a_citation(contested)
        outcome = what_if(contested, leave_out(index), ReusingBackend(OFFLINE, result.calls))
        assert not outcome.changed, case.ref
        # The later events keep their numbers: the facts citing them are the same facts, not renumbered ones.
        assert (outcome.facts_added, outcome.facts_removed) == ((), ()), case.ref
        assert outcome.cites_left_out == ()


def test_the_decisive_events_change_the_decision_and_every_other_set_tried_does_not() -> None:
    found_any = False
    for case in CASES:
        for architecture in Architecture:
            contested, result = decided(case, architecture)
            decisive = decisive_events(contested, ReusingBackend(OFFLINE, result.calls, max_calls=400))
            assert decisive.complete
            assert set(decisive.groups) <= set(decisive.tested)
            for group in decisive.tested:  # checked again, each on a backend with nothing reused
                changed = what_if(contested, leave_out(*group), ReusingBackend(OFFLINE, ())).changed
                assert changed is (group in decisive.groups), (case.ref, architecture, group)
            found_any = found_any or bool(decisive.groups)
            assert decisive.calls <= decisive.from_scratch_calls
    assert found_any, "no generated case has an event it cannot be decided the same without"


def test_summ_only_folds_again_only_from_the_first_changed_event() -> None:
    case = CASES[0]
    contested, result = decided(case, Architecture.SUMM)
    index = len(case.trajectory) - 3
    backend = ReusingBackend(OFFLINE, result.calls)
    outcome = what_if(contested, leave_out(index), backend)
    steps = len(case.trajectory) - 1  # one call per event left, then the decision
    assert outcome.from_scratch_calls == steps + 1
    assert backend.reused >= index - 1  # every step before the changed event answered from the record
    assert outcome.calls <= steps + 1 - (index - 1)


def test_a_segmented_decision_re_projects_only_what_the_change_reaches() -> None:
    case = CASES[0]
    contested, result = decided(case, Architecture.DPM, Window(2_500, 1_000))
    assert len([n for n in result.segments if n.level == 0]) >= 3, "the case is cut in several segments"
    last = len(case.trajectory)
    outcome = what_if(contested, leave_out(last), ReusingBackend(OFFLINE, result.calls))
    assert outcome.calls < outcome.from_scratch_calls  # the untouched segments came from the record
    assert outcome.from_scratch_calls == len(outcome.result.calls)


def test_a_replacement_is_decided_with_its_text_under_the_original_index() -> None:
    case = CASES[0]
    contested, result = decided(case, Architecture.DPM)
    cited = contested.view.facts[0].citations[0]
    original = case.trajectory.by_index(cited)
    outcome = what_if(contested, (EventChange(cited, original.kind, original.text + " Amended."),),
                      ReusingBackend(OFFLINE, result.calls))  # fmt: skip
    assert outcome.calls >= 1  # the projection saw other text: asked anew
    assert any(cited in f.citations for f in outcome.result.view.facts)


def test_changes_that_cannot_be_made_are_refused_before_any_call() -> None:
    case = CASES[0]
    contested, result = decided(case, Architecture.DPM)
    size = len(case.trajectory)
    backend = ReusingBackend(OFFLINE, result.calls)
    refused = {
        "is outside the case": leave_out(size + 1),
        "is changed twice": leave_out(2, 2),
        "needs a kind and a non-empty text": (EventChange(1, "document", "  "),),
        "leaves nothing to decide": leave_out(*range(1, size + 1)),
        "at least one change": (),
    }
    for message, changes in refused.items():
        with pytest.raises(ContestError, match=message):
            what_if(contested, changes, backend)
    assert backend.calls == 0
    with pytest.raises(CallBudgetError, match="budget of 0"):
        what_if(contested, leave_out(contested.view.cited_indices[0]), ReusingBackend(OFFLINE, result.calls, 0))


def test_a_decisive_analysis_stops_at_its_call_budget_and_says_so() -> None:
    contested, result = decided(CASES[0], Architecture.DPM)
    decisive = decisive_events(contested, ReusingBackend(OFFLINE, result.calls, max_calls=2))
    assert not decisive.complete
    assert decisive.calls == 2
    assert decisive.max_calls == 2


def test_an_adverse_decision_gives_its_reasons_under_its_domain_heading_deterministically() -> None:
    denied = [c for c in CASES if c.task.domain == "loan" and c.label == "DENY"]
    assert denied
    contested, result = decided(denied[0], Architecture.DPM)
    rules = rules_for("loan")
    assert rules is not None
    assert contested.label in rules.negative_labels
    first = principal_reasons(contested, rules.reasons_heading, ReusingBackend(OFFLINE, result.calls))
    again = principal_reasons(contested, rules.reasons_heading, ReusingBackend(OFFLINE, result.calls))
    assert (first.reasons, first.render()) == (again.reasons, again.render())
    assert first.reasons, "a denial gives at least one reason"
    assert all(r.changes_decision or r.in_notice for r in first.reasons)
    assert [r.rank for r in first.reasons] == list(range(1, len(first.reasons) + 1))
    assert len(first.reasons) <= 4
    text = first.render()
    assert text[0].startswith("Principal reasons for the adverse action")
    assert text[-1] == NOT_ADVICE
    assert any(r.in_notice for r in first.reasons)  # the facts behind what the denial itself states


def test_what_if_is_a_pure_function_of_its_inputs() -> None:
    contested, result = decided(CASES[1], Architecture.DPM)
    index = contested.view.cited_indices[0]
    one = what_if(contested, leave_out(index), ReusingBackend(OFFLINE, result.calls))
    two = what_if(contested, leave_out(index), ReusingBackend(OFFLINE, ()))
    assert (one.label, one.facts_added, one.facts_removed) == (two.label, two.facts_added, two.facts_removed)
    assert one.result.view_text == two.result.view_text
    assert replace(one, calls=0, tokens=0, result=two.result) == replace(two, calls=0, tokens=0)
