"""Finds input partitions that make no progress although records wait for them and none is in flight.

A partition is stalled when its committed offset has not moved for a while although the broker holds
records past it, and none of its records is in flight in this member (a record in flight, a slow model
call or a trigger waiting for its events, holds a partition back by design). A healthy member never
stays in that state: what is fetched is handled, acknowledged and committed within seconds. So a stall
is a fault in the consumer's own bookkeeping (a record fetched but never delivered to the stream, a
fetch position past records never handled); the baseline reports it with what faust believes of the
partition and reads the partition again from its committed offset, which loses nothing: records
handled already are found in the published ledger and not published twice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Generic, TypeVar

_P = TypeVar("_P")


@dataclass
class _Still:
    committed: int
    since: float
    next_report_s: float  # how long the stall must last before it is reported (again)


class Stalls(Generic[_P]):
    """Remembers, per partition, since when its committed offset has not moved; says which stalled for `after_s`."""

    def __init__(self, after_s: float) -> None:
        self.after_s = after_s
        self._still: dict[_P, _Still] = {}

    def observe(self, partition: _P, committed: int, end: int | None, in_flight: int, now: float) -> float:
        """Notes one look at `partition`; returns how long it has been stalled when that is news, else 0.0.

        `committed` is the next offset to handle (the log's start when nothing was committed). News is
        a stall reaching `after_s`, then again each time it has lasted twice as long as when last
        reported: a reading again that did not take (a second rebalance dropped what it fetched) is
        made again, while a partition whose last records are transaction markers (nothing left to
        handle, yet its end lies past its commit) is reported a few times an hour, not every look.
        """
        if end is None or end <= committed or in_flight:
            self._still.pop(partition, None)
            return 0.0
        still = self._still.get(partition)
        if still is None or still.committed != committed:
            self._still[partition] = _Still(committed, now, self.after_s)
            return 0.0
        stalled_for = now - still.since
        if stalled_for < still.next_report_s:
            return 0.0
        still.next_report_s = 2 * stalled_for
        return stalled_for

    def keep_only(self, partitions: set[_P]) -> None:
        """Forgets partitions this member no longer owns."""
        for partition in [p for p in self._still if p not in partitions]:
            del self._still[partition]


class IdleClocks(Generic[_P]):
    """Per partition, how long since this member last finished one of its records; time Kafka was away is not idle.

    A trigger gives up waiting for its events once their partition has been idle for --trigger-wait
    seconds (deciding._still_arriving). While Kafka does not answer, nothing can be finished: a
    partition whose folding waited out an outage would otherwise count the outage as idleness and
    have its triggers refused the moment Kafka came back, before one more record could be folded.
    So every clock starts again when Kafka last failed to answer.
    """

    def __init__(self) -> None:
        self._finished_at: dict[_P, float] = {}
        self._kafka_failed_at = -math.inf

    def assigned(self, partition: _P, now: float) -> None:
        """A partition (re)assigned is read again from its commit: not idle before it could finish a record."""
        self._finished_at[partition] = now

    def finished(self, partition: _P, now: float) -> None:
        self._finished_at[partition] = now

    def kafka_failed(self, now: float) -> None:
        """Kafka did not answer a request at `now`: no partition has been idle since."""
        self._kafka_failed_at = max(self._kafka_failed_at, now)

    def idle_for(self, partition: _P, now: float) -> float:
        """Seconds since its last record was finished, it was assigned or Kafka last failed; inf if never assigned."""
        finished_at = self._finished_at.get(partition)
        return math.inf if finished_at is None else now - max(finished_at, self._kafka_failed_at)
