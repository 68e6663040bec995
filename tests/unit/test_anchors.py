"""Numeric anchors: extraction, normalization, and never matching inside other numbers."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pipeline.core.anchors import AnchorKind, anchor_value, contains_verbatim, extract_anchors, mentions_value


def test_extracts_each_kind_with_normalized_values() -> None:
    text = "Loan LN-2026-004512 for $412,000 at 6.875% on March 14, 2026; score 688; ICD M51.26; $1.2 million"
    found = [(a.kind, a.text, a.value) for a in extract_anchors(text)]
    assert found == [
        (AnchorKind.IDENT, "LN-2026-004512", "LN-2026-004512"),
        (AnchorKind.MONEY, "$412,000", "412000"),
        (AnchorKind.PERCENT, "6.875%", "6.875"),
        (AnchorKind.DATE, "March 14, 2026", "2026-03-14"),
        (AnchorKind.NUMBER, "688", "688"),
        (AnchorKind.IDENT, "M51.26", "M51.26"),
        (AnchorKind.MONEY, "$1.2 million", "1200000"),
    ]


def test_dates_in_three_formats_share_one_value() -> None:
    values = {a.value for a in extract_anchors("2026-03-14, 03/14/2026 and Mar 14, 2026")}
    assert values == {"2026-03-14"}


def test_values_match_format_tolerantly() -> None:
    assert mentions_value("paid $412,000.00 in total", "412000")
    assert mentions_value("paid 412000 in total", "$412,000")
    assert mentions_value("loss on 03/14/2026", "2026-03-14")
    assert not mentions_value("ratio 41.2%", "$41.2")


def test_never_matches_inside_another_number() -> None:
    assert not mentions_value("account 4120000", "412000")
    assert not mentions_value("value $4,412,000", "$412,000")
    assert not mentions_value("score 6880", "688")
    assert not contains_verbatim("about $412,000.50", "$412,000")
    assert contains_verbatim("about $412,000, then", "$412,000")


def test_non_anchor_wanted_values_match_as_words() -> None:
    assert mentions_value("cause of loss: Flood damage", "flood")
    assert not mentions_value("floodplain map", "flood")


def test_anchor_value_requires_exactly_one_anchor() -> None:
    assert anchor_value("$8,900") == (AnchorKind.MONEY, "8900")
    assert anchor_value("$8,900 and $1") is None


@given(st.integers(min_value=0, max_value=10**9), st.integers(min_value=1, max_value=9))
def test_a_number_is_never_found_inside_a_longer_one(value: int, extra_digit: int) -> None:
    longer = f"{value}{extra_digit}"
    assert not mentions_value(f"reference {longer} noted", str(value))
    assert mentions_value(f"reference {value} noted", str(value))


@given(st.text(max_size=300))
def test_extraction_never_raises_and_spans_are_verbatim(text: str) -> None:
    for anchor in extract_anchors(text):
        assert text[anchor.start : anchor.end] == anchor.text
