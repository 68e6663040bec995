"""Greedy, priority-ordered packing of facts, reasoning and compliance notes into a character budget."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.core.domains import DomainRules, refer_if_unverified
from pipeline.core.fields import FieldValue
from pipeline.core.task import Budget, TaskSpec
from pipeline.core.view import Fact, MemoryView, fit_to_budget
from pipeline.llm.extractive.candidates import FIELD_SCORE, Candidate

_GENERIC_REASONING = "No domain rule table applies; facts are ranked by their relevance to the task."


@dataclass
class _Packer:
    """Adds lines to a view only while its canonical text stays within the budget."""

    budget: int
    facts: list[Fact] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    compliance: list[str] = field(default_factory=list)

    def view(self) -> MemoryView:
        return MemoryView(tuple(self.facts), tuple(self.reasoning), tuple(self.compliance))

    def add(self, section: list[Fact] | list[str], item: Fact | str) -> bool:
        section.append(item)  # type: ignore[arg-type]
        if self.view().char_length <= self.budget:
            return True
        section.pop()
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
    packer.facts = [c.fact for c in sorted(chosen.values(), key=lambda c: c.field is None)]
    view, _ = fit_to_budget(packer.view(), budget.chars)
    return view
