"""What a voice writes for one case before it becomes a trajectory: values, documents, task."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from pipeline.core.anchors import extract_anchors
from pipeline.core.domains import DomainRules
from pipeline.core.fields import FieldValue


@dataclass(frozen=True)
class Placement:
    """Where the core documents may sit, as shares of the trajectory (0.0 first event, 1.0 last)."""

    start: float = 0.0
    end: float = 1.0


@dataclass
class Draft:
    """The final field values the label follows from, the documents that state them, in order.

    `documents` holds (kind, text) in the order they must appear (an amendment after what it
    corrects). `task` states the case's own thresholds when set, and `limits` holds them as numbers:
    the label follows from those, never from how a reader parses the task. `anchors` names the values
    scoring requires (every rule-table field in `values` when None). `hostile` plants the voice's
    injected instructions whatever the generation spec says.
    """

    values: dict[str, str]
    documents: list[tuple[str, str]]
    task: str | None = None
    limits: dict[str, Decimal] | None = None  # the thresholds `task` states, by the domain's limit keys
    anchors: tuple[str, ...] | None = None
    placement: Placement = field(default_factory=Placement)
    hostile: bool = False

    def anchor_keys(self, rules: DomainRules) -> tuple[str, ...]:
        if self.anchors is not None:
            return self.anchors
        return tuple(s.key for s in rules.fields if s.key in self.values)


def field_values(values: dict[str, str]) -> dict[str, FieldValue]:
    """Values as printed, normalized like extracted fields (so the policy reads them as it reads a file)."""
    found = {}
    for key, text in values.items():
        anchors = extract_anchors(text)
        value = anchors[0].value if anchors else text.lower()
        found[key] = FieldValue(key, text, value, 0)
    return found
