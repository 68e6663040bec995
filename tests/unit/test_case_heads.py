"""A case's head folded from its records, and the store that keeps heads with the offsets they were folded to."""

from __future__ import annotations

import threading
from pathlib import Path

from pipeline.core.events import LogPosition
from pipeline.kafka.writing.case_heads import KEPT_BATCHES, Batch, CaseHead, SentTrigger
from pipeline.kafka.writing.head_store import Folded, HeadStore, heads_file


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
    before = CaseHead(0, [list(run) for run in head.runs])
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


def test_a_head_remembers_its_last_batches_and_triggers_and_survives_the_store(tmp_path: Path) -> None:
    head = CaseHead(partition=1)
    for n in range(KEPT_BATCHES + 5):
        head.fold_event(n + 1, n, (f"b{n}", "f" * 8))
    head.add_trigger("t1", SentTrigger(LogPosition(1, 7), "fp"))
    assert len(head.batches) == KEPT_BATCHES
    assert "b0" not in head.batches
    assert f"b{KEPT_BATCHES + 4}" in head.batches
    store = HeadStore(tmp_path / "heads.sqlite")
    store.save("ev", {"acme/c1": head})
    assert store.head("ev", "acme/c1") == head


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


def test_a_head_counts_its_seqs_as_its_runs_grow_and_as_restored(tmp_path: Path) -> None:
    head = CaseHead(0)
    for seq, offset in enumerate((10, 11, 20, 21, 22), start=1):
        head.fold_event(seq, offset, None)
    assert (head.runs, head.last_seq) == ([[10, 2], [20, 3]], 5)
    store = HeadStore(tmp_path / "heads.sqlite")
    store.save("ev", {"acme/c1": head})
    restored = store.head("ev", "acme/c1")
    assert restored is not None
    assert restored.last_seq == 5


def _folded(head: CaseHead, first_seq: int, offsets: range, batch: str) -> None:
    for i, offset in enumerate(offsets):
        head.fold_event(first_seq + i, offset, (batch, None))


def test_a_stored_head_is_written_again_only_where_it_changed_and_reads_back_whole(tmp_path: Path) -> None:
    """A case appended to step by step gains a run and a batch per append: a save writes those, not the rest."""
    store = HeadStore(tmp_path / "heads.sqlite")
    head = CaseHead(partition=0)
    for n in range(KEPT_BATCHES + 3):  # a marker between appends: a run each; the oldest batches no longer kept
        head.fold_event(n + 1, 2 * n, (f"b{n}", "f" * 8))
    head.add_trigger("t1", SentTrigger(LogPosition(0, 7), "fp"))
    assert store.save("ev", {"acme/c1": head})
    head.fold_event(KEPT_BATCHES + 4, 2 * (KEPT_BATCHES + 3), ("b-last", None))
    changed = head.changes()
    assert (changed.runs_from, len(changed.runs), [i for i, _ in changed.batches]) == (KEPT_BATCHES + 3, 1, ["b-last"])
    assert changed.gone == ["b3"]
    assert store.save("ev", {"acme/c1": head})
    assert head.changes().runs_from is None
    again = store.head("ev", "acme/c1")
    assert again == head
    assert again is not None
    assert again.last_seq == KEPT_BATCHES + 4


def test_a_head_whose_runs_were_rewritten_keeps_no_stale_run_rows(tmp_path: Path) -> None:
    store = HeadStore(tmp_path / "heads.sqlite")
    head = CaseHead(partition=0)
    _folded(head, 1, range(0, 6, 2), "b1")  # three runs: 0, 2, 4
    store.save("ev", {"acme/c1": head})
    head.fold_event(2, 1, None)  # an earlier copy: no change
    head.fold_event(1, 3, None)  # written again later (compaction keeps it): runs rebuilt as [3, 2], [4, 1]...
    store.save("ev", {"acme/c1": head})
    assert store.head("ev", "acme/c1") == head


def test_a_new_head_stored_over_a_case_s_rows_replaces_them_all(tmp_path: Path) -> None:
    """A case erased and written anew within one fold: its new head takes the place of every row of the old."""
    store = HeadStore(tmp_path / "heads.sqlite")
    old = CaseHead(partition=0)
    for n in range(5):
        old.fold_event(n + 1, 2 * n, (f"old{n}", None))
    store.save("ev", {"acme/c1": old})
    anew = CaseHead(partition=0)
    anew.fold_event(1, 40, ("new0", None))
    store.save("ev", {"acme/c1": anew})
    assert store.head("ev", "acme/c1") == anew


def test_a_head_whose_row_changed_under_it_is_stored_whole_not_as_its_changes(tmp_path: Path) -> None:
    """A head cached by one process, its case forgotten (or stored by another) meanwhile: the next save is whole."""
    path = tmp_path / "heads.sqlite"
    one, two = HeadStore(path), HeadStore(path)
    head = CaseHead(partition=0)
    _folded(head, 1, range(0, 10, 2), "b1")
    one.save("ev", {"acme/c1": head})
    two.forget("ev", "acme/c1")
    head.fold_event(6, 41, ("b2", None))  # changes since its save: one run, one batch
    one.save("ev", {"acme/c1": head})
    assert two.head("ev", "acme/c1") == head
    other = two.head("ev", "acme/c1")
    assert other is not None
    other.fold_event(7, 50, ("b3", None))
    two.save("ev", {"acme/c1": other})  # another process's save: the row's version moves on
    head.fold_event(7, 60, ("b4", None))
    one.save("ev", {"acme/c1": head})
    assert one.head("ev", "acme/c1") == head


def test_a_save_that_fails_keeps_its_changes_for_the_next(tmp_path: Path) -> None:
    path = tmp_path / "heads.sqlite"
    store = HeadStore(path)
    head = CaseHead(partition=0)
    _folded(head, 1, range(3), "b1")
    store.save("ev", {"acme/c1": head}, Folded("ev", 0, 0, 3))
    head.fold_event(4, 10, ("b2", None))
    assert not store.save("ev", {"acme/c1": head}, Folded("ev", 0, 0, 11))  # the offset moved: nothing stored
    assert store.save("ev", {"acme/c1": head}, Folded("ev", 0, 3, 11))
    assert HeadStore(path).head("ev", "acme/c1") == head


def test_forgetting_a_case_drops_its_runs_and_batches_with_it(tmp_path: Path) -> None:
    store = HeadStore(tmp_path / "heads.sqlite")
    head = CaseHead(partition=0)
    _folded(head, 1, range(3), "b1")
    store.save("ev", {"acme/c1": head})
    store.forget("ev", "acme/c1")
    assert store.head("ev", "acme/c1") is None
    fresh = CaseHead(partition=0)
    fresh.fold_event(1, 50, ("b9", None))
    store.save("ev", {"acme/c1": fresh})  # the case anew (erased, then written again)
    assert store.head("ev", "acme/c1") == fresh


def test_a_store_file_is_named_by_its_topic_and_id_in_one_directory(tmp_path: Path) -> None:
    path = heads_file(tmp_path, "dpm.events", "B3TL92riT/+7CBwb/0Y+lw")  # an id as librdkafka spells it
    assert path.parent == tmp_path
    assert path.name == "dpm.events-B3TL92riT_-7CBwb_0Y-lw.v2.sqlite"
