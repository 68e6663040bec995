"""Checks a memory view against its budget and the trajectory it claims to cite."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.core.anchors import contains_verbatim, extract_anchors
from pipeline.core.events import Trajectory
from pipeline.core.view import Fact, MemoryView


@dataclass(frozen=True)
class ViewCheck:
    """Budget and citation findings for one view.

    citation_validity: cited indices that exist / all cited indices (None when nothing is cited).
    grounding_rate: facts whose every numeric anchor appears verbatim in an event they cite /
    facts that carry anchors (None when no fact carries one).
    """

    char_length: int
    budget_chars: int
    citations_total: int
    citations_valid: int
    facts_with_anchors: int
    facts_grounded: int
    ungrounded_facts: tuple[str, ...]

    @property
    def within_budget(self) -> bool:
        return self.char_length <= self.budget_chars

    @property
    def citation_validity(self) -> float | None:
        return self.citations_valid / self.citations_total if self.citations_total else None

    @property
    def grounding_rate(self) -> float | None:
        return self.facts_grounded / self.facts_with_anchors if self.facts_with_anchors else None


def is_grounded(fact: Fact, trajectory: Trajectory) -> bool:
    """True when every anchor of the fact appears verbatim in at least one valid event it cites."""
    cited = [trajectory.by_index(i).text for i in fact.citations if trajectory.has_index(i)]
    return bool(cited) and all(
        any(contains_verbatim(text, anchor.text) for text in cited) for anchor in extract_anchors(fact.text)
    )


def check_view(view: MemoryView, trajectory: Trajectory, budget_chars: int) -> ViewCheck:
    """Measures a view's length against the budget and verifies its citations and anchors."""
    cited = view.cited_indices
    anchored = [f for f in view.facts if extract_anchors(f.text)]
    ungrounded = tuple(f.text for f in anchored if not is_grounded(f, trajectory))
    return ViewCheck(
        char_length=view.char_length,
        budget_chars=budget_chars,
        citations_total=len(cited),
        citations_valid=sum(1 for i in cited if trajectory.has_index(i)),
        facts_with_anchors=len(anchored),
        facts_grounded=len(anchored) - len(ungrounded),
        ungrounded_facts=ungrounded,
    )
