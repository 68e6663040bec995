"""Citation and grounding checks; decision parsing within the label space."""

from __future__ import annotations

from pipeline.core.checks import check_view
from pipeline.core.decision import match_label, parse_decision
from pipeline.core.view import Fact, MemoryView
from tests.cases import load_fixture


def test_citation_validity_and_grounding_are_measured_per_view() -> None:
    trajectory = load_fixture().trajectory
    view = MemoryView(
        facts=(
            Fact("Loan amount: $412,000", (1,)),  # grounded
            Fact("Credit score: 688", (4,)),  # 688 is not in event 4: ungrounded
            Fact("Appraised value: $441,000", (99,)),  # invalid citation: ungrounded
            Fact("Borrower name known", (2,)),  # no anchor: not counted
        ),
        reasoning=("DTI too high",),
        compliance=(),
    )
    check = check_view(view, trajectory, budget_chars=1000)
    assert (check.citations_total, check.citations_valid) == (4, 3)
    assert check.citation_validity == 0.75
    assert (check.facts_with_anchors, check.facts_grounded) == (3, 1)
    assert check.ungrounded_facts == ("Credit score: 688", "Appraised value: $441,000")
    assert check.within_budget
    assert not check_view(view, trajectory, budget_chars=50).within_budget


def test_empty_view_has_no_rates_rather_than_perfect_ones() -> None:
    check = check_view(MemoryView((), (), ()), load_fixture().trajectory, 500)
    assert check.citation_validity is None
    assert check.grounding_rate is None


def test_labels_match_exactly_never_by_substring() -> None:
    space = ("PAY", "PARTIAL PAY", "DENY")
    assert match_label("partial  pay", space) == "PARTIAL PAY"
    assert match_label("**PAY**", space) == "PAY"
    assert match_label("PAY IN FULL", space) is None
    assert match_label("PARTIAL", space) is None


def test_decision_parse_records_failures_instead_of_raising() -> None:
    space = ("APPROVE", "DENY")
    good = parse_decision("DECISION: DENY\nRATIONALE: DTI 46.7% [8]\nNOTICE: DTI too high", space)
    assert good.ok
    assert good.label == "DENY"
    assert good.notice == "DTI too high"
    outside = parse_decision("DECISION: MAYBE\nRATIONALE: unsure\nNOTICE: none", space)
    assert outside.label is None
    assert not outside.ok
    assert "not in the label space" in outside.problems[0]
    silent = parse_decision("DECISION: DENY\nRATIONALE: DTI too high\nNOTICE: none", space)
    assert silent.label == "DENY"
    assert silent.problems == ("a negative decision without a notice of reasons",)
    assert parse_decision("", space).problems[0] == "no DECISION line"
