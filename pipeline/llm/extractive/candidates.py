"""Candidate facts from indexed texts: domain field values first, then other anchors ranked by relevance."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.core.anchors import Anchor, AnchorKind, iter_anchors
from pipeline.core.domains import DomainRules
from pipeline.core.fields import FieldValue, extract_fields
from pipeline.core.task import TaskSpec
from pipeline.core.view import Fact

_KIND_WEIGHT = {
    AnchorKind.IDENT: 1.5,
    AnchorKind.MONEY: 1.5,
    AnchorKind.DATE: 1.2,
    AnchorKind.PERCENT: 1.2,
    AnchorKind.NUMBER: 0.6,
}
_BOILERPLATE = re.compile(
    r"\b(page \d+|disclos|notice of privacy|terms and conditions|subject to change|for illustration|example|"
    r"guideline|minimum|maximum|typical|average|national|previous|prior|superseded|template)\w*",
    re.IGNORECASE,
)
_STOPWORDS = frozenset(
    "this that with from under whether each their there which when what have been into only".split()  # noqa: SIM905
)
_MAX_CLAUSE = 150
FIELD_SCORE = 10.0


@dataclass(frozen=True)
class Candidate:
    """A fact that could enter the view, its relevance score and what it states (for de-duplication)."""

    fact: Fact
    score: float
    key: str
    field: str | None = None


def task_terms(task: TaskSpec, rules: DomainRules | None) -> frozenset[str]:
    """Lower-case words that make a clause relevant: the task's own words and the domain's keywords."""
    words = {w for w in re.findall(r"[a-z][a-z-]{3,}", task.task.lower()) if w not in _STOPWORDS}
    if rules is not None:
        words |= {k.lower() for k in rules.keywords}
    return frozenset(words)


def _clause(text: str, anchor: Anchor) -> str:
    """The clause around an anchor, at most about _MAX_CLAUSE characters, always containing it verbatim."""
    seps = (". ", "; ", "\n", "? ", "! ")
    start = max((i + len(s) for s in seps if (i := text.rfind(s, 0, anchor.start)) >= 0), default=0)
    end = min((i + 1 for s in seps if (i := text.find(s, anchor.end)) >= 0), default=len(text))
    if end - start > _MAX_CLAUSE:
        start = max(start, min(anchor.start, (anchor.start + anchor.end - _MAX_CLAUSE) // 2))
        end = min(end, max(anchor.end, start + _MAX_CLAUSE))
        if start > 0 and not text[start - 1].isspace():  # drop a cut word at the front
            space = text.find(" ", start, anchor.start)
            start = space + 1 if space >= 0 else start
        if end < len(text) and not text[end].isspace():  # and at the back
            space = text.rfind(" ", anchor.end, end)
            end = space if space >= 0 else end
    return text[start:end].replace("\n", " ").strip(" ,;:")


def field_candidates(rules: DomainRules, values: dict[str, FieldValue]) -> list[Candidate]:
    """One fact per known field, `Label: value [i]`; missing heavy fields become `Label: unknown`.

    Alternative fields (a stated ratio, an annual amount) only ever add evidence: no placeholder.
    """
    found = []
    for spec in rules.fields:
        value = values.get(spec.key)
        if value is not None:
            fact = Fact(f"{spec.label}: {value.text}", (value.index,))
            found.append(Candidate(fact, FIELD_SCORE * spec.weight, f"field:{spec.key}", spec.key))
        elif spec.weight > 1 and not spec.alternative:
            found.append(Candidate(Fact(f"{spec.label}: unknown"), FIELD_SCORE, f"field:{spec.key}", spec.key))
    return found


def _anchor_candidates(pairs: Sequence[tuple[int, str]], terms: frozenset[str], covered: set[str]) -> list[Candidate]:
    frequency: Counter[str] = Counter()
    for _, text in pairs:
        frequency.update({a.value for a in iter_anchors(text)})
    best: dict[str, Candidate] = {}
    for index, text in pairs:
        for anchor in iter_anchors(text):
            if anchor.value in covered:
                continue
            clause = _clause(text, anchor)
            words = set(re.findall(r"[a-z][a-z-]{3,}", clause.lower()))
            score = (
                _KIND_WEIGHT[anchor.kind]
                + 0.5 * len(words & terms)
                + 0.3 * math.log1p(frequency[anchor.value])
                - (1.0 if _BOILERPLATE.search(clause) else 0.0)
                - 0.002 * len(clause)
            )
            previous = best.get(anchor.value)
            if previous is None or index >= max(previous.fact.citations):  # the latest statement wins
                best[anchor.value] = Candidate(Fact(clause, (index,)), round(score, 6), anchor.value)
    # A clause holding several anchors is one fact: keep it once, at its best score.
    merged: dict[Fact, Candidate] = {}
    for candidate in best.values():
        kept = merged.get(candidate.fact)
        if kept is None or (candidate.score, candidate.key) > (kept.score, kept.key):
            merged[candidate.fact] = candidate
    return list(merged.values())


def rank_candidates(
    pairs: Sequence[tuple[int, str]], task: TaskSpec, rules: DomainRules | None
) -> tuple[list[Candidate], dict[str, FieldValue]]:
    """All candidates from `pairs` (index, text), best first, and the field values found."""
    values = extract_fields(rules.fields, pairs) if rules else {}
    fields = field_candidates(rules, values) if rules else []
    covered = {v.value for v in values.values()}
    others = _anchor_candidates(pairs, task_terms(task, rules), covered)
    ranked = sorted(others, key=lambda c: (-c.score, -max(c.fact.citations), c.key))
    return sorted(fields, key=lambda c: -c.score) + ranked, values
