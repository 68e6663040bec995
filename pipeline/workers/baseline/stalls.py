"""Finds input partitions whose fetching has stopped while records wait for them on the broker.

A partition is stalled when its fetch position has not moved for a while although the broker holds
records past it, and none of its records is in flight in this member (a record in flight, a slow
model call say, holds a partition back by design). A healthy member never stays in that state: the
fetcher moves the position as soon as a record is there. So a stall is a fault of the consumer's
own bookkeeping, which the baseline reports with what faust believes of the partition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

_P = TypeVar("_P")


@dataclass
class _Still:
    position: int
    since: float
    reported_at: float | None = None


class FetchStalls(Generic[_P]):
    """Remembers, per partition, since when its position has not moved; says which have stalled for `after_s`."""

    def __init__(self, after_s: float) -> None:
        self.after_s = after_s
        self._still: dict[_P, _Still] = {}

    def observe(self, partition: _P, position: int | None, end: int | None, in_flight: int, now: float) -> float:
        """Notes one look at `partition`; returns how long it has been stalled when that is news, else 0.0.

        News is a stall reaching `after_s`, and then once per `after_s` while it lasts.
        """
        if position is None or end is None or end <= position or in_flight:
            self._still.pop(partition, None)
            return 0.0
        still = self._still.get(partition)
        if still is None or still.position != position:
            self._still[partition] = _Still(position, now)
            return 0.0
        stalled_for = now - still.since
        if stalled_for < self.after_s or (still.reported_at is not None and now - still.reported_at < self.after_s):
            return 0.0
        still.reported_at = now
        return stalled_for

    def keep_only(self, partitions: set[_P]) -> None:
        """Forgets partitions this member no longer owns."""
        for partition in [p for p in self._still if p not in partitions]:
            del self._still[partition]
