"""A case's head: what appending to it and asking for its decision need to know, without reading its log.

The head of a case is its last seq, where each of its events is, the recent appends (batch ids with
their requests' fingerprints: idempotent retries) and the decision requests sent for it. Heads are
folded from the case's partitions of the events and triggers topics, record by record, as Kafka
Streams restores a table whose changelog is its source topic: folding a record twice, or a record
older than what a head already holds, changes nothing, so any reader may fold any range again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from pipeline.core.events import LogPosition

KEPT_BATCHES = 1_000  # appends a head remembers per case (idempotent retries within them)
KEPT_TRIGGERS = 1_000  # decision requests a head remembers per case (idempotent requests within them)


@dataclass(frozen=True)
class Batch:
    """One committed append: its first seq, how many events, and its request's fingerprint (None: no key)."""

    first_seq: int
    count: int
    fingerprint: str | None = None

    def answers(self, count: int, fingerprint: str | None) -> bool:
        """Whether this batch is the append asked again (records of older releases carry no fingerprint)."""
        if self.fingerprint is not None and fingerprint is not None:
            return self.fingerprint == fingerprint
        return self.count == count


@dataclass(frozen=True)
class SentTrigger:
    """A decision request sent for a case: where it is, and its fingerprint (core/idempotency.py)."""

    position: LogPosition
    fingerprint: str


@dataclass
class CaseHead:
    """A case's last seq, its events' offsets (runs on its partition), recent batches and decision requests."""

    partition: int
    runs: list[list[int]] = field(default_factory=list)  # [first offset, count] of seq 1..n, in order
    batches: OrderedDict[str, Batch] = field(default_factory=OrderedDict)  # batch id -> the batch, oldest first
    triggers: OrderedDict[str, SentTrigger] = field(default_factory=OrderedDict)
    broken: str | None = None  # why the case's events cannot be continued (numbered by another producer)
    # The sum of the runs' counts, kept as they change: a head is read on every append, and a case
    # appended to one step at a time has a run per append (other cases' records fall between).
    _last_seq: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._last_seq = sum(count for _, count in self.runs)

    @property
    def last_seq(self) -> int:
        return self._last_seq

    def positions(self) -> tuple[LogPosition, ...]:
        """Where seq 1..n are, in order."""
        return tuple(LogPosition(self.partition, first + i) for first, count in self.runs for i in range(count))

    def offset_of(self, seq: int) -> int | None:
        """The offset of event `seq`, None beyond the head."""
        passed = 0
        for first, count in self.runs:
            if seq <= passed + count:
                return first + seq - passed - 1
            passed += count
        return None

    def fold_event(self, seq: int, offset: int, batch: tuple[str, str | None] | None) -> None:
        """Folds event `seq` written at `offset` (by batch (id, fingerprint), if its record names one)."""
        last = self.last_seq
        if seq == last + 1:
            self._extend(offset)
        elif seq <= last:
            known = self.offset_of(seq)
            if known is not None and offset > known:  # written again (compaction keeps the later copy)
                self._replace(seq, offset)
            return  # an earlier copy, or this record folded before
        elif self.broken is None:
            self.broken = (f"its events are not numbered 1..n (seq {seq} after {last}): it was written by "
                           "another producer")  # fmt: skip
            return
        else:
            return
        if batch is not None:
            batch_id, fingerprint = batch
            known_batch = self.batches.get(batch_id)
            if known_batch is None:
                self.add_batch(batch_id, Batch(seq, 1, fingerprint))
            elif known_batch.first_seq + known_batch.count == seq:
                self.batches[batch_id] = Batch(known_batch.first_seq, known_batch.count + 1, known_batch.fingerprint)

    def _extend(self, offset: int) -> None:
        if self.runs and self.runs[-1][0] + self.runs[-1][1] == offset:
            self.runs[-1][1] += 1
        else:
            self.runs.append([offset, 1])
        self._last_seq += 1

    def _replace(self, seq: int, offset: int) -> None:
        offsets = [p.offset for p in self.positions()]
        offsets[seq - 1] = offset
        self.runs, self._last_seq = [], 0
        for each in offsets:
            self._extend(each)

    def add_batch(self, batch_id: str, batch: Batch) -> None:
        self.batches[batch_id] = batch
        self.batches.move_to_end(batch_id)
        while len(self.batches) > KEPT_BATCHES:
            self.batches.popitem(last=False)

    def add_trigger(self, trigger_id: str, sent: SentTrigger) -> None:
        self.triggers[trigger_id] = sent
        self.triggers.move_to_end(trigger_id)
        while len(self.triggers) > KEPT_TRIGGERS:
            self.triggers.popitem(last=False)

    def erased_by(self, seq: int, offset: int) -> bool:
        """Whether a tombstone of event `seq` at `offset` erases this head (it follows the event it replaces)."""
        known = self.offset_of(seq)
        return known is not None and offset > known

    def encode(self) -> bytes:
        return orjson.dumps({
            "partition": self.partition, "runs": self.runs, "broken": self.broken,
            "batches": [[i, b.first_seq, b.count, b.fingerprint] for i, b in self.batches.items()],
            "triggers": [[i, t.position.partition, t.position.offset, t.fingerprint] for i, t in self.triggers.items()],
        })  # fmt: skip

    @classmethod
    def decode(cls, data: bytes) -> CaseHead:
        raw: dict[str, Any] = orjson.loads(data)
        return cls(
            int(raw["partition"]),
            [[int(first), int(count)] for first, count in raw["runs"]],
            OrderedDict((i, Batch(int(first), int(count), fp)) for i, first, count, fp in raw["batches"]),
            OrderedDict((i, SentTrigger(LogPosition(int(p), int(o)), fp)) for i, p, o, fp in raw["triggers"]),
            raw.get("broken"),
        )


def seq_of(positions: Sequence[LogPosition], position: LogPosition) -> int:
    """The seq of the event at `position` among a case's positions (1-based)."""
    return positions.index(position) + 1
