"""What handling one input record produced in the baseline: outputs to publish once, and what follows their commit."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pipeline.kafka.steps import Output


@dataclass(frozen=True)
class Outcome:
    """Outputs to publish (nothing, a decision, a dead letter), and what to do once they are committed."""

    outputs: Sequence[Output] = ()
    committed: Callable[[], None] = lambda: None
