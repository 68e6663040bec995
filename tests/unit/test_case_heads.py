"""A case's head folded from its records, and the store that keeps heads with the offsets they were folded to."""

from __future__ import annotations

import threading
from pathlib import Path

from pipeline.core.events import LogPosition
from pipeline.kafka.writing.case_heads import KEPT_BATCHES, Batch, CaseHead, SentTrigger
from pipeline.kafka.writing.head_store import Folded, HeadStore


def test_a_head_folds_a_case_s_events_in_order_and_keeps_their_offsets_as_runs() -> None:
    head = CaseHead(partition=2)
    for seq, offset in ((1, 10), (2, 11), (3, 20), (4, 21), (5, 22)):
        head.fold_event(seq, offset, ("b1" if seq < 3 else "b2", None))
    assert head.last_seq == 5
    assert head.runs == [[10, 2], [20, 3]]
    assert head.positions() == tuple(LogPosition(2, o) for o in (10, 11, 20, 21, 22))
    assert head.batches == {"b1": Batch(1, 2), "b2": Batch(3, 3)}


def test_folding_a_record_again_or_an_older_copy_changes_nothing_and_a_later_copy_replaces_it() -> None:
    head = CaseHead(partition=0)
    head.fold_event(1, 5, None)
    head.fold_event(2, 6, None)
    before = CaseHead.decode(head.encode())
    head.fold_event(1, 5, None)  # folded twice (two readers of one range)
    head.fold_event(2, 3, None)  # an earlier copy than the one kept
    assert head == before
    head.fold_event(2, 40, None)  # written again later: compaction keeps this one
    assert head.positions() == (LogPosition(0, 5), LogPosition(0, 40))


def test_a_gap_in_the_numbering_marks_the_head_broken_instead_of_numbering_after_it() -> None:
    head = CaseHead(partition=0)
    head.fold_event(1, 0, None)
    head.fold_event(3, 1, None)
    assert head.last_seq == 1
    assert head.broken is not None
    assert "seq 3 after 1" in head.broken


def test_a_tombstone_erases_the_head_only_when_it_follows_the_event_it_replaces() -> None:
    head = CaseHead(partition=0)
    head.fold_event(1, 100, None)  # written again after an erasure at offset 60
    assert not head.erased_by(1, 60)
    assert head.erased_by(1, 101)


def test_a_head_remembers_its_last_batches_and_triggers_and_survives_its_encoding() -> None:
    head = CaseHead(partition=1)
    for n in range(KEPT_BATCHES + 5):
        head.fold_event(n + 1, n, (f"b{n}", "f" * 8))
    head.add_trigger("t1", SentTrigger(LogPosition(1, 7), "fp"))
    assert len(head.batches) == KEPT_BATCHES
    assert "b0" not in head.batches
    assert f"b{KEPT_BATCHES + 4}" in head.batches
    assert CaseHead.decode(head.encode()) == head


def test_the_store_saves_heads_with_the_fold_and_refuses_a_fold_another_process_overtook(tmp_path: Path) -> None:
    path = tmp_path / "heads.sqlite"
    one, two = HeadStore(path), HeadStore(path)  # two processes of one host on the file
    head = CaseHead(partition=0)
    head.fold_event(1, 0, None)
    assert one.save("ev", {"acme/c1": head}, Folded("ev", 0, 0, 1))
    assert two.next_offset("ev", 0) == 1
    assert two.head("ev", "acme/c1") == head
    assert not two.save("ev", {"acme/c1": CaseHead(partition=0)}, Folded("ev", 0, 0, 1))  # started from 0: stale
    assert one.head("ev", "acme/c1") == head
    two.forget("ev", "acme/c1")
    assert one.head("ev", "acme/c1") is None


def test_a_topic_made_again_under_its_name_drops_what_was_folded_of_the_old_one(tmp_path: Path) -> None:
    store = HeadStore(tmp_path / "heads.sqlite")
    store.adopt("ev", "id-1", related=("tr",))
    store.save("ev", {"acme/c1": CaseHead(partition=0)}, Folded("ev", 0, 0, 9))
    store.save("ev", {}, Folded("tr", 0, 0, 4))
    store.adopt("ev", "id-1", related=("tr",))  # the same topic: kept
    assert store.next_offset("ev", 0) == 9
    store.adopt("ev", "id-2", related=("tr",))
    assert (store.next_offset("ev", 0), store.next_offset("tr", 0), store.head("ev", "acme/c1")) == (0, 0, None)


def test_the_store_serves_threads_at_once(tmp_path: Path) -> None:
    store = HeadStore(tmp_path / "heads.sqlite")

    def save(n: int) -> None:
        for i in range(50):
            store.save("ev", {f"acme/c{n}-{i}": CaseHead(partition=n)})

    threads = [threading.Thread(target=save, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(store.head("ev", f"acme/c{n}-49") == CaseHead(partition=n) for n in range(4))


def test_a_head_counts_its_seqs_as_its_runs_grow_and_as_decoded() -> None:
    head = CaseHead(0)
    for seq, offset in enumerate((10, 11, 20, 21, 22), start=1):
        head.fold_event(seq, offset, None)
    assert (head.runs, head.last_seq) == ([[10, 2], [20, 3]], 5)
    assert CaseHead.decode(head.encode()).last_seq == 5
