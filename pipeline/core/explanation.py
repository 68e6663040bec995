"""A memory view's facts with the checks a reader can make now: do their citations exist, are their figures in them.

The same checks the worker recorded (core/checks.py), recomputed against the events as read now:
the auditor's pages and the client library's explanations show these.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.core.anchors import extract_anchors
from pipeline.core.checks import is_grounded
from pipeline.core.events import Trajectory
from pipeline.core.view import MemoryView


@dataclass(frozen=True)
class FactRow:
    """One fact of the view: its citations, whether each exists, and whether its figures are in them."""

    number: int
    text: str
    citations: tuple[int, ...]
    citations_valid: bool | None  # None: the events could not be read (erased or changed)
    grounded: bool | None  # None: no figure to ground, or no events to ground it in


def fact_rows(view: MemoryView, trajectory: Trajectory | None) -> list[FactRow]:
    """The view's facts with the worker's own checks, recomputed against the events as read now."""
    rows = []
    for number, fact in enumerate(view.facts, start=1):
        valid = None if trajectory is None else all(trajectory.has_index(i) for i in fact.citations)
        anchored = bool(extract_anchors(fact.text))
        grounded = is_grounded(fact, trajectory) if trajectory is not None and anchored else None
        rows.append(FactRow(number, fact.text, fact.citations, valid, grounded))
    return rows
