"""What handling one input record produced in the baseline: outputs to publish once, and what follows their commit."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pipeline.kafka.processing.steps import Output


@dataclass(frozen=True)
class Outcome:
    """Outputs to publish (nothing, a decision, a dead letter), and what to do once they are committed."""

    outputs: Sequence[Output] = ()
    committed: Callable[[], None] = lambda: None


class PartitionRevoked(Exception):  # noqa: N818 - a state, not a failure
    """The record's partition went to another member while it was handled: it is left, unacknowledged, to them.

    Its new owner handles it again from the committed offset; nothing of this attempt is published
    or stored (the published ledger keeps the two attempts from both publishing).
    """
