"""What a decision is asked for: the task, its label space and the memory budget."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pipeline.core.errors import DpmError
from pipeline.core.window import CHARS_PER_TOKEN

# CHARS_PER_TOKEN overestimates tokens, so the token limit never cuts a view that fits its budget.
_TOKEN_HEADROOM = 64


class InvalidTaskError(DpmError):
    """A task spec or budget is unusable."""


class Architecture(StrEnum):
    """The memory architectures the product runs side by side."""

    DPM = "dpm"
    SUMM = "summ"


def parse_architectures(spec: str) -> tuple[Architecture, ...]:
    """`dpm`, `summ` or `dpm,summ` (as command options write them) as architectures, in order."""
    try:
        chosen = tuple(Architecture(part.strip()) for part in spec.split(",") if part.strip())
    except ValueError as exc:
        raise InvalidTaskError(f"architectures are dpm and/or summ, got {spec!r}") from exc
    if not chosen:
        raise InvalidTaskError("name at least one architecture: dpm, summ or dpm,summ")
    return chosen


@dataclass(frozen=True)
class TaskSpec:
    """The decision asked for: domain, task text and the labels a decision may take."""

    domain: str
    task: str
    label_space: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.task.strip():
            raise InvalidTaskError("task text must not be empty")
        if not self.label_space or len(set(self.label_space)) != len(self.label_space):
            raise InvalidTaskError("label space must be non-empty, each label once")

    def wire(self) -> dict[str, Any]:
        """The wire form used by triggers, decision records and case openings."""
        return {"domain": self.domain, "task": self.task, "label_space": list(self.label_space)}

    @classmethod
    def from_wire(cls, value: Mapping[str, Any]) -> TaskSpec:
        """Inverse of wire(), for a schema-valid value."""
        return cls(str(value["domain"]), str(value["task"]), tuple(value["label_space"]))


@dataclass(frozen=True)
class Budget:
    """A memory budget in characters."""

    chars: int

    def __post_init__(self) -> None:
        if self.chars < 200:
            raise InvalidTaskError(f"a budget below 200 characters cannot hold three sections, got {self.chars}")

    @property
    def response_token_limit(self) -> int:
        """The model's max_tokens for a response that must fit `chars` characters."""
        return math.ceil(self.chars / CHARS_PER_TOKEN) + _TOKEN_HEADROOM


NAMED_BUDGET_FRACTIONS = {"tight": 0.05, "moderate": 0.20, "loose": 0.50}


def resolve_budget(spec: str, mean_trajectory_chars: float) -> tuple[str, Budget]:
    """Turns `tight|moderate|loose` (a fraction of the mean trajectory) or a character count into a Budget."""
    name = spec.strip().lower()
    if name in NAMED_BUDGET_FRACTIONS:
        return name, Budget(round(NAMED_BUDGET_FRACTIONS[name] * mean_trajectory_chars))
    if name.isdigit():
        return name, Budget(int(name))
    raise InvalidTaskError(f"budget {spec!r} is neither tight, moderate, loose nor a character count")
