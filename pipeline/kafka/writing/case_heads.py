"""A case's head: what appending to it and asking for its decision need to know, without reading its log.

The head of a case is its last seq, where each of its events is, the recent appends (batch ids with
their requests' fingerprints: idempotent retries) and the decision requests sent for it. Heads are
folded from the case's partitions of the events and triggers topics, record by record, as Kafka
Streams restores a table whose changelog is its source topic: folding a record twice, or a record
older than what a head already holds, changes nothing, so any reader may fold any range again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
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
    # What changed since the head was last stored (a new head: all of it), so that storing it writes
    # that much and not the whole head, whose runs and batches grow with the case's appends. The
    # version is the store's row version it was read or stored at (None: never stored): a store
    # whose row has another version (erased and written anew, or another process's) is written whole.
    version: int | None = field(default=None, init=False, repr=False, compare=False)
    _runs_changed_from: int | None = field(default=0, init=False, repr=False, compare=False)
    _batches_changed: set[str] = field(default_factory=set, init=False, repr=False, compare=False)
    _batches_gone: set[str] = field(default_factory=set, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._last_seq = sum(count for _, count in self.runs)
        self._batches_changed = set(self.batches)

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
                self._batches_changed.add(batch_id)

    def _extend(self, offset: int) -> None:
        if self.runs and self.runs[-1][0] + self.runs[-1][1] == offset:
            self.runs[-1][1] += 1
        else:
            self.runs.append([offset, 1])
        self._last_seq += 1
        last = len(self.runs) - 1
        self._runs_changed_from = last if self._runs_changed_from is None else min(self._runs_changed_from, last)

    def _replace(self, seq: int, offset: int) -> None:
        offsets = [p.offset for p in self.positions()]
        offsets[seq - 1] = offset
        self.runs, self._last_seq = [], 0
        for each in offsets:
            self._extend(each)
        self._runs_changed_from = 0

    def add_batch(self, batch_id: str, batch: Batch) -> None:
        self.batches[batch_id] = batch
        self.batches.move_to_end(batch_id)
        self._batches_changed.add(batch_id)
        self._batches_gone.discard(batch_id)
        while len(self.batches) > KEPT_BATCHES:
            gone, _ = self.batches.popitem(last=False)
            self._batches_gone.add(gone)
            self._batches_changed.discard(gone)

    def add_trigger(self, trigger_id: str, sent: SentTrigger) -> None:
        self.triggers[trigger_id] = sent
        self.triggers.move_to_end(trigger_id)
        while len(self.triggers) > KEPT_TRIGGERS:
            self.triggers.popitem(last=False)

    def erased_by(self, seq: int, offset: int) -> bool:
        """Whether a tombstone of event `seq` at `offset` erases this head (it follows the event it replaces)."""
        known = self.offset_of(seq)
        return known is not None and offset > known

    def changes(self) -> HeadChanges:
        """What storing the head must write: runs from an index on, batches written or changed, batches gone."""
        return self._changes(self._runs_changed_from, self._batches_changed, sorted(self._batches_gone))

    def whole(self) -> HeadChanges:
        """All of the head, as changes: what a store writes where its row is not this head's version."""
        return self._changes(0, self.batches, [])

    def _changes(self, runs_from: int | None, batches: Iterable[str], gone: list[str]) -> HeadChanges:
        runs = [] if runs_from is None else list(enumerate(self.runs[runs_from:], start=runs_from))
        return HeadChanges(runs_from, [(i, first, count) for i, (first, count) in runs],
                           [(i, self.batches[i]) for i in batches], gone)  # fmt: skip

    def stored(self, version: int) -> None:
        """Marks the head as stored at row `version`: what changes from now on is what the next store writes."""
        self.version = version
        self._runs_changed_from = None
        self._batches_changed = set()
        self._batches_gone = set()

    def encode_rest(self) -> bytes:
        """The head without its runs and batches (a store keeps those as rows of their own)."""
        return orjson.dumps({
            "partition": self.partition, "broken": self.broken,
            "triggers": [[i, t.position.partition, t.position.offset, t.fingerprint] for i, t in self.triggers.items()],
        })  # fmt: skip

    @classmethod
    def restored(cls, rest: bytes, runs: list[list[int]], batches: list[tuple[str, Batch]],
                 version: int) -> CaseHead:  # fmt: skip
        """A head from encode_rest's bytes and its stored runs and batches (oldest first), stored at `version`."""
        raw: dict[str, Any] = orjson.loads(rest)
        head = cls(int(raw["partition"]), runs, OrderedDict(batches),
                   OrderedDict((i, SentTrigger(LogPosition(int(p), int(o)), fp)) for i, p, o, fp in raw["triggers"]),
                   raw.get("broken"))  # fmt: skip
        head.stored(version)
        return head


@dataclass(frozen=True)
class HeadChanges:
    """What changed in a head since it was stored: see CaseHead.changes."""

    runs_from: int | None  # None: no run changed
    runs: list[tuple[int, int, int]]  # (index, first offset, count) from runs_from on
    batches: list[tuple[str, Batch]]  # written or changed
    gone: list[str]  # batch ids no longer kept


def seq_of(positions: Sequence[LogPosition], position: LogPosition) -> int:
    """The seq of the event at `position` among a case's positions (1-based)."""
    return positions.index(position) + 1
