"""What a weak or cut-off model writes never breaks a run: structured, malformed, partial and runaway answers."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from pipeline.core.decision import parse_decision
from pipeline.core.parse import parse_view
from pipeline.core.scoring import eda
from pipeline.core.view import Fact, fit_to_budget
from tests.cases import load_fixture

LABELS = ("APPROVE", "DENY", "REFER")
STRUCTURED = {
    "facts": [{"text": "Credit score 688", "citations": [3]}, {"text": "DTI 46.7% [6]", "citations": [8]}],
    "reasoning": ["DTI above the 43% maximum."],
    "compliance_notes": ["12 CFR 1002.9 adverse action notice"],
}


def test_a_structured_view_parses_like_the_section_text() -> None:
    outcome = parse_view(orjson.dumps(STRUCTURED).decode())
    assert outcome.ok, outcome.problems
    assert outcome.view.facts == (Fact("Credit score 688", (3,)), Fact("DTI 46.7%", (8, 6)))
    assert outcome.view.reasoning == ("DTI above the 43% maximum.",)
    assert outcome.view.compliance == ("12 CFR 1002.9 adverse action notice",)
    fenced = parse_view("```json\n" + orjson.dumps(STRUCTURED).decode() + "\n```")
    assert fenced.view == outcome.view


def test_a_cut_off_json_answer_keeps_every_complete_item() -> None:
    text = orjson.dumps(STRUCTURED).decode()
    cut = text[: text.index("DTI 46.7%") + 4]  # max_tokens ran out inside the second fact
    outcome = parse_view(cut)
    assert not outcome.ok
    assert "malformed or cut-off JSON" in outcome.problems[0]
    assert outcome.view.facts == (Fact("Credit score 688", (3,)),)


def test_wrong_types_are_problems_not_crashes() -> None:
    outcome = parse_view(
        '{"facts": [{"text": "Income $8,900", "citations": ["8", null]}, 7], "reasoning": "one\\ntwo"}'
    )
    assert outcome.view.facts == (Fact("Income $8,900", ()),)
    assert outcome.view.reasoning == ("one", "two")
    assert "missing section COMPLIANCE_NOTES" in outcome.problems
    assert any("citations" in p for p in outcome.problems)
    assert parse_view("[1, 2, 3]").problems  # JSON, but not an object


def test_a_runaway_answer_is_cut_to_the_budget() -> None:
    runaway = {"facts": [{"text": f"Repeated figure {i}", "citations": [1]} for i in range(5000)],
               "reasoning": [], "compliance_notes": []}  # fmt: skip
    view, cut = fit_to_budget(parse_view(orjson.dumps(runaway).decode()).view, 700)
    assert view.char_length <= 700
    assert cut > 0


def test_structured_and_broken_decisions() -> None:
    good = parse_decision('{"decision": "DENY", "rationale": "DTI 46.7%", "notice": "DTI too high"}', LABELS)
    assert (good.label, good.ok) == ("DENY", True)
    cut = parse_decision('{"decision": "APPROVE", "rationale": "Income verif', LABELS)
    assert cut.label == "APPROVE"
    assert any("cut-off JSON" in p for p in cut.problems)
    outside = parse_decision('{"decision": "MAYBE", "rationale": "unsure", "notice": "none"}', LABELS)
    assert outside.label is None
    assert any("not in the label space" in p for p in outside.problems)
    assert eda(load_fixture(), outside.label) == 0.0  # recorded as such, scored 0, never retried


@given(st.text(max_size=400).map(lambda s: "{" + s))
def test_structured_parsing_never_raises(text: str) -> None:
    parse_view(text)
    parse_decision(text, LABELS)
