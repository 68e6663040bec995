"""The baseline acknowledges each partition's records in offset order (acking.py), so faust never commits past one."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace
from typing import cast

from faust.transport.consumer import Consumer
from faust.types import TP

from pipeline.workers.baseline.acking import InOrderAcks, Rewinds

_TRIGGERS = TP("triggers", 1)


def _faust_commit_after(committed: int, acked: list[int]) -> int | None:
    """The offset faust's own bookkeeping would commit next, given the committed offset and the acknowledged ones."""
    consumer = SimpleNamespace(
        _acked=defaultdict(list, {_TRIGGERS: list(acked)}),
        _acked_index=defaultdict(set, {_TRIGGERS: set(acked)}),
        _gap=defaultdict(list),  # no gaps read (faust keeps IntervalTrees; an empty one is as falsy)
        _committed_offset=defaultdict(lambda: None, {_TRIGGERS: committed}),
    )
    new_offset: int | None = Consumer._new_offset(cast(Consumer, consumer), _TRIGGERS)
    return new_offset


def test_faust_commits_past_the_committed_record_when_the_next_one_is_acknowledged_first() -> None:
    # Why the baseline acknowledges in order: offset 17 committed (17 is next to read), 18 finished first.
    assert _faust_commit_after(17, [18]) == 19  # 17 would be skipped by a member killed before it finished
    assert _faust_commit_after(17, [19]) is None  # a larger hole is refused


def test_records_finishing_out_of_order_are_acknowledged_in_offset_order() -> None:
    acks: InOrderAcks[str] = InOrderAcks()
    for offset in (17, 18, 19):
        acks.read(_TRIGGERS, 3, offset, f"record {offset}")
    assert acks.finished(_TRIGGERS, 3, 18) == []  # 17 is still handled: nothing is acknowledged
    assert _faust_commit_after(17, []) is None
    assert acks.finished(_TRIGGERS, 3, 19) == []
    ready = acks.finished(_TRIGGERS, 3, 17)
    assert ready == ["record 17", "record 18", "record 19"]
    assert _faust_commit_after(17, [17, 18, 19]) == 20


def test_gaps_in_offsets_do_not_hold_acknowledgements_back() -> None:
    # Transaction markers and compaction leave offsets with no record: the order read is what counts.
    acks: InOrderAcks[str] = InOrderAcks()
    for offset in (4, 9, 10):
        acks.read(_TRIGGERS, 1, offset, str(offset))
    assert acks.finished(_TRIGGERS, 1, 9) == []
    assert acks.finished(_TRIGGERS, 1, 4) == ["4", "9"]
    assert acks.finished(_TRIGGERS, 1, 10) == ["10"]


def test_a_new_generation_starts_afresh_and_the_old_one_is_never_acknowledged() -> None:
    acks: InOrderAcks[str] = InOrderAcks()
    acks.read(_TRIGGERS, 3, 17, "old 17")
    acks.read(_TRIGGERS, 3, 18, "old 18")
    acks.read(_TRIGGERS, 4, 17, "new 17")  # the partition came back in generation 4, read from its committed offset
    acks.read(_TRIGGERS, 3, 19, "stale 19")  # fetched before the rebalance, read after it: not tracked
    assert acks.finished(_TRIGGERS, 3, 18) == []
    assert acks.finished(_TRIGGERS, 3, 17) == []
    assert acks.finished(_TRIGGERS, 3, 19) == []
    assert acks.finished(_TRIGGERS, 4, 17) == ["new 17"]


def test_a_partition_sought_back_is_tracked_from_its_new_position() -> None:
    acks: InOrderAcks[str] = InOrderAcks()
    for offset in (5, 6, 7):
        acks.read(_TRIGGERS, 2, offset, f"first {offset}")
    acks.read(_TRIGGERS, 2, 6, "again 6")  # an offset that does not ascend: read again from 6
    acks.read(_TRIGGERS, 2, 7, "again 7")
    assert acks.finished(_TRIGGERS, 2, 5) == []  # before the new position: its commit is not ours to make
    assert acks.finished(_TRIGGERS, 2, 7) == []
    assert acks.finished(_TRIGGERS, 2, 6) == ["again 6", "again 7"]


def test_partitions_no_longer_owned_are_forgotten() -> None:
    acks: InOrderAcks[str] = InOrderAcks()
    events = TP("events", 0)
    acks.read(_TRIGGERS, 2, 1, "trigger")
    acks.read(events, 2, 1, "event")
    acks.keep_only({events})
    assert acks.finished(_TRIGGERS, 2, 1) == []
    assert acks.finished(events, 2, 1) == ["event"]


def test_unfinished_counts_the_records_of_the_current_generation_only() -> None:
    acks: InOrderAcks[str] = InOrderAcks()
    started = [acks.read(_TRIGGERS, 2, offset, f"record {offset}") for offset in (4, 5, 6)]
    assert started == [True, False, False]  # where a reading starts is logged: a hole before it would be lost
    acks.finished(_TRIGGERS, 2, 5)  # finished, though not acknowledged before 4
    assert acks.unfinished(_TRIGGERS, 2) == 2
    assert acks.unfinished(_TRIGGERS, 3) == 0  # a rebalance since: the old copies are not in flight for it
    assert acks.unfinished(TP("events", 0), 2) == 0


def _delivered(rewinds: Rewinds, acks: InOrderAcks[int], committed: int, offsets: list[int]) -> list[int]:
    """The offsets the baseline handles when faust delivers `offsets` in generation 2 (what _consume does)."""
    handled = []
    for offset in offsets:
        if rewinds.skips(_TRIGGERS, 2, offset):
            continue
        if acks.starts(_TRIGGERS, 2, offset) and rewinds.needed(_TRIGGERS, 2, offset, committed):
            continue  # sought back to `committed`
        acks.read(_TRIGGERS, 2, offset, offset)
        handled.append(offset)
    return handled


def test_a_reading_that_starts_past_the_committed_offset_is_read_again_from_it() -> None:
    # Offset 1 committed, faust delivers 2 first (its seek back to 1 was undone), then 3 of the same
    # earlier fetch, then the partition again from 1 after our seek: 1, 2, 3 are handled, in order.
    rewinds, acks = Rewinds(), InOrderAcks[int]()
    assert _delivered(rewinds, acks, 1, [2, 3, 1, 2, 3, 4]) == [1, 2, 3, 4]
    assert [r for o in (1, 2, 3, 4) for r in acks.finished(_TRIGGERS, 2, o)] == [1, 2, 3, 4]


def test_a_real_gap_costs_one_seek_and_is_then_read_on() -> None:
    # Offset 5 committed holds nothing any more (a transaction's marker, a compacted record): the
    # reading starts at 7 twice, the second time it is handled.
    rewinds, acks = Rewinds(), InOrderAcks[int]()
    assert _delivered(rewinds, acks, 5, [7, 7, 8]) == [7, 8]


def test_a_reading_from_the_committed_offset_is_never_sought_back() -> None:
    rewinds, acks = Rewinds(), InOrderAcks[int]()
    assert _delivered(rewinds, acks, 4, [4, 5, 6]) == [4, 5, 6]
    assert not rewinds.skips(_TRIGGERS, 2, 7)


def test_a_new_generation_ends_the_skipping_and_partitions_no_longer_owned_are_forgotten() -> None:
    rewinds = Rewinds()
    assert rewinds.needed(_TRIGGERS, 2, 9, 3)
    assert rewinds.skips(_TRIGGERS, 2, 10)
    assert not rewinds.skips(_TRIGGERS, 3, 10)  # a rebalance: the new generation's reading starts afresh
    assert rewinds.needed(_TRIGGERS, 3, 9, 3)  # and may be sought back once in its turn
    rewinds.keep_only(set())
    assert not rewinds.skips(_TRIGGERS, 3, 10)
    assert rewinds.needed(_TRIGGERS, 3, 9, 3)
