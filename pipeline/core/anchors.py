"""Numeric anchors: amounts, percentages, dates, identifiers and plain numbers found in text.

Anchors are what a projection must keep verbatim and what scoring looks for. Two rules hold
everywhere: a number is never matched inside a longer number (`412` is not in `4,120`), and
values compare by meaning (`$412,000` equals `412000.00`), while grounding compares the
verbatim text.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from enum import StrEnum

_MONTHS = (
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
)  # fmt: skip
_MONTH_RE = "|".join(m.capitalize() for m in _MONTHS) + "|" + "|".join(m[:3].capitalize() for m in _MONTHS)
# Digits grouped by commas, or a bare run of digits, with an optional fraction.
_NUM = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_BEFORE = r"(?<![\w.,$-])"
_AFTER = r"(?![\w%]|[.,]\d)"

_PATTERN = re.compile(
    "|".join(
        (
            rf"(?P<date_iso>{_BEFORE}\d{{4}}-\d{{2}}-\d{{2}}{_AFTER})",
            rf"(?P<date_us>{_BEFORE}\d{{1,2}}/\d{{1,2}}/\d{{4}}{_AFTER})",
            rf"(?P<date_long>\b(?:{_MONTH_RE})\.? \d{{1,2}}, \d{{4}}{_AFTER})",
            rf"(?P<money>(?<![\w.,])-?\$ ?{_NUM}(?: ?(?:million|M|k|K)\b)?{_AFTER})",
            rf"(?P<percent>{_BEFORE}{_NUM} ?%)",
            r"(?P<ident>\b[A-Z][A-Z0-9]*(?:[-.][A-Z0-9]+)*-?\d[A-Z0-9]*(?:[-.][A-Z0-9]+)*\b)",
            rf"(?P<number>{_BEFORE}{_NUM}{_AFTER})",
        )
    )
)


class AnchorKind(StrEnum):
    MONEY = "money"
    PERCENT = "percent"
    DATE = "date"
    IDENT = "ident"
    NUMBER = "number"


@dataclass(frozen=True)
class Anchor:
    """One anchor: its kind, verbatim text, normalized value and where it was found."""

    kind: AnchorKind
    text: str
    value: str
    start: int
    end: int


def _decimal(text: str) -> Decimal | None:
    try:
        return Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None


def _canonical_decimal(value: Decimal) -> str:
    normalized = value.normalize()
    return format(normalized, "f") if normalized == normalized.to_integral() else format(normalized, "f").rstrip("0")


def _money_value(text: str) -> str | None:
    scale = Decimal(1)
    body = text.replace("$", "").replace(" ", "")
    for suffix, factor in (("million", 1_000_000), ("M", 1_000_000), ("k", 1_000), ("K", 1_000)):
        if body.endswith(suffix):
            body, scale = body[: -len(suffix)], Decimal(factor)
            break
    amount = _decimal(body)
    return None if amount is None else _canonical_decimal(amount * scale)


def _date_value(kind: str, text: str) -> str | None:
    formats = {"date_iso": ("%Y-%m-%d",), "date_us": ("%m/%d/%Y",), "date_long": ("%B %d, %Y", "%b %d, %Y")}
    for fmt in formats[kind]:
        try:
            return dt.datetime.strptime(text.replace(".", ""), fmt).date().isoformat()
        except ValueError:
            continue
    return None


def _normalize(group: str, text: str) -> tuple[AnchorKind, str] | None:
    if group.startswith("date"):
        value = _date_value(group, text)
        return None if value is None else (AnchorKind.DATE, value)
    if group == "money":
        money = _money_value(text)
        return None if money is None else (AnchorKind.MONEY, money)
    if group == "percent":
        pct = _decimal(text.rstrip("% "))
        return None if pct is None else (AnchorKind.PERCENT, _canonical_decimal(pct))
    if group == "ident":
        return AnchorKind.IDENT, text.upper()
    number = _decimal(text)
    return None if number is None else (AnchorKind.NUMBER, _canonical_decimal(number))


def iter_anchors(text: str) -> Iterator[Anchor]:
    """Yields the anchors of `text` left to right, without overlaps."""
    for match in _PATTERN.finditer(text):
        group = match.lastgroup or "number"
        normalized = _normalize(group, match.group())
        if normalized is not None:
            yield Anchor(normalized[0], match.group(), normalized[1], match.start(), match.end())


def extract_anchors(text: str) -> tuple[Anchor, ...]:
    """All anchors of `text`, in order."""
    return tuple(iter_anchors(text))


def _verbatim(anchor_text: str) -> re.Pattern[str]:
    """`anchor_text` as a whole anchor, not inside a longer number."""
    return re.compile(rf"(?<![\w.,]){re.escape(anchor_text)}(?![\w%]|[.,]\d)")


def contains_verbatim(haystack: str, anchor_text: str) -> bool:
    """True when `anchor_text` occurs in `haystack` as a whole anchor, not inside a longer number."""
    return _verbatim(anchor_text).search(haystack) is not None


def verbatim_spans(haystack: str, anchor_texts: Iterable[str]) -> list[tuple[int, int]]:
    """Where any of `anchor_texts` occurs in `haystack` as a whole anchor: sorted, non-overlapping (start, end)."""
    found = sorted({m.span() for text in set(anchor_texts) for m in _verbatim(text).finditer(haystack)},
                   key=lambda span: (span[0], -span[1]))  # fmt: skip
    spans: list[tuple[int, int]] = []
    for start, end in found:
        if not spans or start >= spans[-1][1]:
            spans.append((start, end))
    return spans


def anchor_value(text: str) -> tuple[AnchorKind, str] | None:
    """Normalized kind and value of a string holding exactly one anchor (e.g. a required anchor)."""
    found = extract_anchors(text.strip())
    if len(found) == 1 and found[0].text == text.strip():
        return found[0].kind, found[0].value
    return None


def _compatible(a: AnchorKind, b: AnchorKind) -> bool:
    """Money and plain numbers compare by value ($412,000 vs 412000); other kinds only with their own."""
    numeric = {AnchorKind.MONEY, AnchorKind.NUMBER}
    return a == b or (a in numeric and b in numeric)


def mentions_value(text: str, wanted: str) -> bool:
    """True when `text` states the anchor `wanted` by value, format-tolerantly, never inside another number.

    A `wanted` that is no single anchor (a name, a phrase) is matched case-insensitively as words.
    """
    parsed = anchor_value(wanted)
    if parsed is None:
        return re.search(rf"(?<!\w){re.escape(wanted.strip())}(?!\w)", text, flags=re.IGNORECASE) is not None
    kind, value = parsed
    return any(a.value == value and _compatible(a.kind, kind) for a in iter_anchors(text))
