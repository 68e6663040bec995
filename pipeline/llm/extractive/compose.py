"""Greedy, priority-ordered packing of facts, reasoning and compliance notes into a character budget."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipeline.core.domains import DomainRules, refer_if_unverified
from pipeline.core.fields import FieldValue
from pipeline.core.task import Budget, TaskSpec
from pipeline.core.view import (
    COMPLIANCE_HEADER,
    FACTS_HEADER,
    REASONING_HEADER,
    UNKNOWN,
    Fact,
    MemoryView,
    compliance_line,
    fit_to_budget,
    reasoning_line,
)
from pipeline.llm.extractive.candidates import FIELD_SCORE, Candidate

_GENERIC_REASONING = "No domain rule table applies; facts are ranked by their relevance to the task."


# Characters of the canonical text that do not depend on what the sections hold: the three headers.
_HEADERS = len(FACTS_HEADER) + len(REASONING_HEADER) + len(COMPLIANCE_HEADER)


@dataclass
class _Section:
    """One section's items and the characters their lines take in the canonical text."""

    line: Callable[[Any], str]
    items: list[Any] = field(default_factory=list)
    chars: int = 0

    @property
    def rendered(self) -> tuple[int, int]:
        """(characters, lines) the section takes: its lines, or the single `unknown` line when empty."""
        return (self.chars, len(self.items)) if self.items else (len(UNKNOWN), 1)


@dataclass
class _Packer:
    """Adds lines to a view only while its canonical text stays within the budget.

    The text's length is kept as lines come, so each addition costs one line's rendering, not the
    whole view's (the view's text is exactly the headers and these lines joined by newlines).
    """

    budget: int
    facts: _Section = field(default_factory=lambda: _Section(Fact.render))
    reasoning: _Section = field(default_factory=lambda: _Section(reasoning_line))
    compliance: _Section = field(default_factory=lambda: _Section(compliance_line))

    def view(self) -> MemoryView:
        return MemoryView(tuple(self.facts.items), tuple(self.reasoning.items), tuple(self.compliance.items))

    def char_length(self) -> int:
        """The canonical text's length: headers, section lines, and a newline between every two lines."""
        sections = [s.rendered for s in (self.facts, self.reasoning, self.compliance)]
        return _HEADERS + sum(chars for chars, _ in sections) + 3 + sum(lines for _, lines in sections) - 1

    def add(self, section: _Section, item: Fact | str) -> bool:
        chars = len(section.line(item))
        section.items.append(item)
        section.chars += chars
        if self.char_length() <= self.budget:
            return True
        section.items.pop()
        section.chars -= chars
        return False


def reasoning_lines(
    rules: DomainRules | None, values: dict[str, FieldValue], task: TaskSpec
) -> tuple[list[str], list[tuple[str, str]]]:
    """The inference chain (outcome first) and the implicated provisions as (full note, short reference)."""
    if rules is None:
        return [_GENERIC_REASONING], []
    verdict = refer_if_unverified(rules.verdict(values, task.task), task.label_space)
    chain = [f"Indicated outcome under the {rules.title} policy: {verdict.label}.", *verdict.reasons, *verdict.findings]
    return chain, [(p.note, p.ref) for p in rules.provisions_for(verdict.label)]


def compose(
    ranked: list[Candidate],
    values: dict[str, FieldValue],
    rules: DomainRules | None,
    budget: Budget,
    *,
    task: TaskSpec,
    must_include: Candidate | None = None,
) -> MemoryView:
    """Packs, in priority order: `must_include`, heavy fields, reasoning, compliance, then the rest by rank."""
    packer = _Packer(budget.chars)
    chain, notes = reasoning_lines(rules, values, task)
    chosen: dict[str, Candidate] = {}

    def offer(candidate: Candidate) -> None:
        if candidate.key not in chosen and packer.add(packer.facts, candidate.fact):
            chosen[candidate.key] = candidate

    if must_include is not None:
        offer(must_include)
    for candidate in ranked:
        if candidate.score > FIELD_SCORE:
            offer(candidate)
    for line in chain:
        packer.add(packer.reasoning, line)
    for note, ref in notes:  # the full note where it fits, else at least the provision's reference
        packer.add(packer.compliance, note) or packer.add(packer.compliance, ref)
    for candidate in ranked:
        offer(candidate)
    # Field facts lead the section (stable sort keeps their rule-table order), whatever entered first.
    packer.facts.items = [c.fact for c in sorted(chosen.values(), key=lambda c: c.field is None)]
    view, _ = fit_to_budget(packer.view(), budget.chars)
    return view
