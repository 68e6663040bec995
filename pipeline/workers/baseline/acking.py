"""Acknowledges each input partition's records in offset order, whatever order their handlings finish in.

faust commits a partition up to its first offset not acknowledged, with one exception: with offset
C committed (the next to read) and C+1 acknowledged while C is still handled, it commits C+2
(`Consumer._new_offset` refuses only when `min(acked) - committed > 1`). The baseline handles
cases concurrently, so a later trigger often finishes first; a member killed or rebalanced before
record C finished then left C behind the committed offset, never handled. Acknowledging in offset
order leaves faust no hole to step over.

Records are tracked per partition in the order the stream reads them (ascending offsets within one
generation of the group). A new generation, or an offset that does not ascend (the partition was
sought back), starts the partition's tracking afresh: the records before it are read again, and
their new copies are the ones acknowledged. A record of an older generation than the partition's
tracking is not tracked: it is never acknowledged (the baseline drops it, see check_owned).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from faust.types import TP

_E = TypeVar("_E")


@dataclass
class _Reading(Generic[_E]):
    """One partition's records read in one generation and not acknowledged yet, oldest first."""

    generation: int | None
    last_offset: int = -1
    unacked: OrderedDict[int, _E] = field(default_factory=OrderedDict)  # offset -> record, in the order read
    finished: set[int] = field(default_factory=set)  # offsets in `unacked` whose handling finished


class InOrderAcks(Generic[_E]):
    """Which records may be acknowledged now: each partition's finished records up to its first unfinished one."""

    def __init__(self) -> None:
        self._readings: dict[TP, _Reading[_E]] = {}

    def read(self, tp: TP, generation: int | None, offset: int, record: _E) -> bool:
        """Notes that the stream read `record` (at `offset` of `tp`, in `generation`); call in the order read.

        Returns whether the record starts a new reading of its partition (its first in this
        generation, or the first after a seek back).
        """
        reading = self._readings.get(tp)
        if reading is not None and _older(generation, reading.generation):
            return False
        started = reading is None or reading.generation != generation or offset <= reading.last_offset
        if reading is None or started:
            reading = self._readings[tp] = _Reading(generation)
        reading.unacked[offset] = record
        reading.last_offset = offset
        return started

    def finished(self, tp: TP, generation: int | None, offset: int) -> list[_E]:
        """Notes that the record's handling finished; returns the records to acknowledge now, in offset order.

        A record read again since (a rebalance, a seek back) returns nothing: its new copy is the
        one that will be acknowledged.
        """
        reading = self._readings.get(tp)
        if reading is None or reading.generation != generation or offset not in reading.unacked:
            return []
        reading.finished.add(offset)
        ready: list[_E] = []
        while reading.unacked and (first := next(iter(reading.unacked))) in reading.finished:
            ready.append(reading.unacked.pop(first))
            reading.finished.discard(first)
        return ready

    def unfinished(self, tp: TP, generation: int | None) -> int:
        """How many records of `tp` read in `generation` have not finished their handling."""
        reading = self._readings.get(tp)
        if reading is None or reading.generation != generation:
            return 0
        return len(reading.unacked) - len(reading.finished)

    def keep_only(self, assigned: set[TP]) -> None:
        """Forgets partitions this member no longer owns (after a rebalance)."""
        for tp in [tp for tp in self._readings if tp not in assigned]:
            del self._readings[tp]


def _older(generation: int | None, than: int | None) -> bool:
    return generation is not None and than is not None and generation < than
