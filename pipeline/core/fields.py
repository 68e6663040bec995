"""Cue-based extraction of a domain's decision fields from text, latest value wins.

A field is found where one of its cue phrases is followed, within the same clause, by an anchor
of the field's kind (or a word of its vocabulary). Occurrences whose clause frames the number as
a rule, a threshold, an example, a replaced value or another person's or property's figure ("minimum
credit score of 620", "the prior appraisal of $455,000", "for another applicant, credit score 540") are
skipped: those are the near-miss numbers real files are full of.
When several events state a field, the latest event wins, as amendments and corrections come later.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import cache

from pipeline.core.anchors import AnchorKind, iter_anchors

_WINDOW = 90
_DECOY_BEFORE = re.compile(
    r"\b(minimum|maximum|max|min|limit of|at least|at most|no more than|not exceed|require[sd]?|guideline|"
    r"threshold|typical|example|e\.g\.|previous|prior|former|superseded|original(?:ly)?|instead of|"
    r"rather than|benchmark|average|median|national|program|cap(?:ped)? at|exceeds?|earlier|unrelated|"
    # figures of other persons, files or properties
    r"(?:another|different|separate) (?:applicant|borrower|customer|file|case|property|claim(?:ant)?|policy|member|"
    r"patient|taxpayer|return)|neighbou?r(?:ing|'s)?)\b",
    re.IGNORECASE,
)
_CLAUSE_END = re.compile(r"[.;!?](?:\s|$)|\n")


@dataclass(frozen=True)
class FieldSpec:
    """One decision field of a domain."""

    key: str
    label: str
    cues: tuple[str, ...]
    kind: AnchorKind | None
    vocabulary: tuple[str, ...] = ()
    weight: float = 1.0
    alternative: bool = False  # another way to state evidence a required field gives: never `unknown`


@dataclass(frozen=True)
class FieldValue:
    """A field's value as stated verbatim in a text, with the event index it came from."""

    key: str
    text: str
    value: str
    index: int

    @property
    def number(self) -> Decimal | None:
        try:
            return Decimal(self.value)
        except InvalidOperation:
            return None


@cache
def _cue_pattern(cues: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(r"\b(?:" + "|".join(cues) + r")\b", re.IGNORECASE)


def _clause_before(text: str, start: int) -> str:
    """The text of the clause that ends at `start` (back to the previous sentence end)."""
    head = text[max(0, start - _WINDOW) : start]
    ends = list(_CLAUSE_END.finditer(head))
    return head[ends[-1].end() :] if ends else head


def _clause_after(text: str, end: int) -> str:
    tail = text[end : end + _WINDOW]
    stop = _CLAUSE_END.search(tail)
    return tail[: stop.start()] if stop else tail


def _value_after(spec: FieldSpec, window: str) -> tuple[str, str] | None:
    if spec.kind is None:
        for word in spec.vocabulary:
            hit = re.search(rf"\b{re.escape(word)}\b", window, re.IGNORECASE)
            if hit:
                return hit.group(), word.lower()
        return None
    wanted = {spec.kind, AnchorKind.NUMBER} if spec.kind is AnchorKind.MONEY else {spec.kind}
    for anchor in iter_anchors(window):
        if anchor.kind in wanted:
            return anchor.text, anchor.value
    return None


def find_field(spec: FieldSpec, text: str, index: int) -> FieldValue | None:
    """The last non-decoy statement of `spec` in `text`, if any."""
    found: FieldValue | None = None
    # The field's own label is always a cue, so facts written as `Label: value` read back.
    for cue in _cue_pattern((*spec.cues, re.escape(spec.label))).finditer(text):
        if _DECOY_BEFORE.search(_clause_before(text, cue.start())):
            continue
        hit = _value_after(spec, _clause_after(text, cue.end()))
        if hit is not None:
            found = FieldValue(spec.key, hit[0], hit[1], index)
    return found


def _cells(line: str) -> list[str] | None:
    """The cells of a table row (pipe- or tab-separated), or None for a line of prose."""
    if line.count("|") >= 2:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
    elif "\t" in line:
        cells = [c.strip() for c in line.split("\t")]
    else:
        return None
    return cells if len(cells) >= 2 else None


def tabular_clauses(text: str) -> str:
    """The text, followed by each table cell as a clause of its row and column (`<row> <column> <value>.`).

    Files state figures in tables as often as in prose ("| Borrower | FICO | DTI |" above
    "| D. Whitfield | 779 | 38.2% |"); as clauses, a cell reads like the sentence that would state it.
    """
    clauses: list[str] = []
    header: list[str] | None = None
    for line in text.splitlines():
        cells = _cells(line)
        if cells is None:
            header = None
        elif all(re.fullmatch(r":?-{2,}:?", c) for c in cells if c):
            continue  # a markdown rule under the header
        elif header is None or len(cells) != len(header):
            header = cells if not any(ch.isdigit() for ch in line) else None
        else:
            row = cells[0]
            clauses.extend(f"{row} {column} {value}." for column, value in zip(header[1:], cells[1:], strict=True)
                           if value)  # fmt: skip
            if any(ch.isdigit() for ch in row):
                clauses.append(f"{header[0]} {row}.")
    return text if not clauses else text + "\n" + "\n".join(clauses)


def extract_fields(specs: Iterable[FieldSpec], texts: Iterable[tuple[int, str]]) -> dict[str, FieldValue]:
    """Latest stated value of each field over indexed texts (later index wins, then later position)."""
    ordered = sorted(((index, tabular_clauses(text)) for index, text in texts), key=lambda pair: pair[0])
    values: dict[str, FieldValue] = {}
    for spec in specs:
        for index, text in ordered:
            hit = find_field(spec, text, index)
            if hit is not None:
                values[spec.key] = hit
    return values


def numbers(values: Mapping[str, FieldValue], *keys: str) -> tuple[Decimal, ...] | None:
    """The numeric values of `keys`, or None when any is missing or not a number."""
    found = [values[k].number if k in values else None for k in keys]
    return None if any(v is None for v in found) else tuple(v for v in found if v is not None)
