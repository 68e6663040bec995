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
        started = self.starts(tp, generation, offset)
        if reading is None or started:
            reading = self._readings[tp] = _Reading(generation)
        reading.unacked[offset] = record
        reading.last_offset = offset
        return started

    def starts(self, tp: TP, generation: int | None, offset: int) -> bool:
        """Whether reading the record would start a new reading of its partition (`read` without noting it)."""
        reading = self._readings.get(tp)
        if reading is not None and _older(generation, reading.generation):
            return False
        return reading is None or reading.generation != generation or offset <= reading.last_offset

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


class Rewinds:
    """Readings that started past their partition's committed offset, sought back once; the records skipped meanwhile.

    faust drops a fetched record below the partition's read offset, and its fetch loop sets that
    offset after handing a record over: a seek made while a record of the earlier fetch is being
    handed over (the baseline seeks every partition back at a rebalance) can be undone, and the
    records from the committed offset up are then dropped, never handled (seen: a reading started
    at offset 2 with offset 1 committed; faust then committed over the hole). So a reading that
    starts past the committed offset is sought back there once per generation and offset: records
    still coming from the earlier fetch (past the first skipped one) are skipped until the
    partition is delivered again from an offset at or below it. A gap that is real (a compacted
    record, a transaction's marker) costs one fetch more: the reading then starts where it did.
    """

    def __init__(self) -> None:
        self._pending: dict[TP, tuple[int | None, int]] = {}  # tp -> (generation, the first offset skipped)
        self._last: dict[TP, tuple[int | None, int]] = {}  # tp -> (generation, committed offset) last sought back to

    def skips(self, tp: TP, generation: int | None, offset: int) -> bool:
        """Whether a record read while its partition is being sought back is left for the copy read after the seek."""
        pending = self._pending.get(tp)
        if pending is None:
            return False
        if pending[0] == generation and offset > pending[1]:
            return True
        del self._pending[tp]  # delivered again from the seek's offset (or a new generation): read on
        return False

    def needed(self, tp: TP, generation: int | None, offset: int, committed: int) -> bool:
        """Whether a reading that starts at `offset` should be sought back to `committed` (and this record skipped)."""
        if offset <= committed or self._last.get(tp) == (generation, committed):
            return False
        self._last[tp] = (generation, committed)
        self._pending[tp] = (generation, offset)
        return True

    def keep_only(self, assigned: set[TP]) -> None:
        """Forgets partitions this member no longer owns (after a rebalance)."""
        for table in (self._pending, self._last):
            for tp in [tp for tp in table if tp not in assigned]:
                del table[tp]


def _older(generation: int | None, than: int | None) -> bool:
    return generation is not None and than is not None and generation < than
