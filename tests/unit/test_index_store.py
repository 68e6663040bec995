"""The lookup index's file: first committed record wins, offsets never move back, erasure marks, corrupt files."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from pipeline.kafka.reading.index_store import MAX_PARTITIONS, Chunk, IndexStore, place, unplace


def _decided(chunk: Chunk, decision_id: str, *, tenant: str = "acme", case_id: str = "c1", at_ms: int = 1,
             where: int = 0) -> None:  # fmt: skip
    chunk.decisions.append((decision_id, tenant, case_id, at_ms, place(0, where), None))
    chunk.views.append((decision_id, tenant, place(0, where)))


def test_a_place_packs_partition_and_offset() -> None:
    assert unplace(place(5, 123_456_789)) == (5, 123_456_789)
    assert place(0, 0) == 0
    with pytest.raises(ValueError, match="at most"):
        place(MAX_PARTITIONS, 0)


def test_the_first_committed_record_of_an_id_wins(tmp_path: Path) -> None:
    store = IndexStore(tmp_path / "i.sqlite")
    first, again = Chunk(), Chunk()
    _decided(first, "t1:dpm", where=10)
    first.audit("t1:dpm", "acme", 0, place(0, 11))
    _decided(again, "t1:dpm", where=20)  # the id decided a second time, later
    again.audit("t1:dpm", "acme", 0, place(0, 21))
    again.audit("t1:dpm", "acme", 1, place(0, 22))
    store.apply(first, {("d", 0): 12})
    store.apply(again, {("d", 0): 23})
    [entry] = store.entries("t1:dpm", "acme")
    assert (unplace(entry.decision or -1), unplace(entry.view or -1)) == ((0, 10), (0, 10))
    assert entry.audits == ((0, place(0, 11)), (1, place(0, 22)))  # call 0 from the first, call 1 only later
    assert entry.complete
    assert not entry.erased


def test_a_tenant_sees_only_its_own_entries(tmp_path: Path) -> None:
    store = IndexStore(tmp_path / "i.sqlite")
    chunk = Chunk()
    _decided(chunk, "same:dpm", tenant="acme")
    _decided(chunk, "same:dpm", tenant="globex", where=5)
    store.apply(chunk, {})
    assert [e.tenant for e in store.entries("same:dpm", "acme")] == ["acme"]
    assert {e.tenant for e in store.entries("same:dpm", None)} == {"acme", "globex"}
    assert store.entries("same:dpm", "initech") == []
    assert store.of_case("globex", "c1")[0].tenant == "globex"


def test_read_offsets_never_move_back(tmp_path: Path) -> None:
    store = IndexStore(tmp_path / "i.sqlite")
    store.apply(Chunk(), {("dpm.decisions", 0): 50, ("dpm.decisions", 1): 7})
    store.apply(Chunk(), {("dpm.decisions", 0): 40})  # a second process that read less, later
    assert store.read_to("dpm.decisions") == {0: 50, 1: 7}


def test_a_view_without_its_decision_is_not_complete(tmp_path: Path) -> None:
    store = IndexStore(tmp_path / "i.sqlite")
    chunk = Chunk()
    chunk.views.append(("t2:dpm", "acme", place(0, 3)))
    store.apply(chunk, {})
    [entry] = store.entries("t2:dpm", "acme")
    assert not entry.complete
    assert store.of_case("acme", "c1") == []


def test_case_listing_and_time_pages_are_ordered_and_resume_after_the_cursor(tmp_path: Path) -> None:
    store = IndexStore(tmp_path / "i.sqlite")
    chunk = Chunk()
    for n in range(5):
        _decided(chunk, f"t{n}:dpm", at_ms=100 + n // 2, where=n)
    store.apply(chunk, {})
    assert [e.decision_id for e in store.of_case("acme", "c1")] == [f"t{n}:dpm" for n in range(5)]
    assert [e.decision_id for e in store.of_case("acme", "c1", after="t1:dpm", limit=2)] == ["t2:dpm", "t3:dpm"]
    assert [e.decision_id for e in store.of_case("acme", "c1", after="unknown:dpm", limit=1)] == ["t0:dpm"]
    first = store.since("acme", 100, None, 2)
    assert [e.decision_id for e in first] == ["t0:dpm", "t1:dpm"]
    rest = store.since("acme", 100, first[-1].decision_id, 10)
    assert [e.decision_id for e in rest] == ["t2:dpm", "t3:dpm", "t4:dpm"]
    assert [e.decision_id for e in store.since("acme", 102, None, 10)] == ["t4:dpm"]
    assert store.since("globex", 0, None, 10) == []


def test_erasure_marks_the_case_and_drops_its_label(tmp_path: Path) -> None:
    store = IndexStore(tmp_path / "i.sqlite")
    chunk = Chunk()
    _decided(chunk, "t1:dpm", case_id="gone")
    _decided(chunk, "t2:dpm", case_id="kept", where=1)
    chunk.contests.append(("t1:dpm", "acme", "k1", "gone", place(0, 9)))
    store.apply(chunk, {})
    store.note_label("t1:dpm", "acme", "DENY")
    assert store.mark_erased("acme", ["gone"]) == 1
    [erased] = store.entries("t1:dpm", "acme")
    assert erased.erased
    assert erased.label is None
    assert not store.entries("t2:dpm", "acme")[0].erased
    assert store.contests("t1:dpm", "acme")[0].erased
    store.note_label("t1:dpm", "acme", "DENY")  # a late reader learns no label of an erased case
    assert store.entries("t1:dpm", "acme")[0].label is None
    assert store.mark_tenant_erased("acme") == 2


def test_two_stores_on_one_file_merge_as_one(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite"
    stores = [IndexStore(path), IndexStore(path)]

    def index(store: IndexStore, start: int) -> None:
        for n in range(start, start + 200):
            chunk = Chunk()
            _decided(chunk, f"t{n % 300}:dpm", where=n % 300)
            store.apply(chunk, {("d", 0): n})

    threads = [threading.Thread(target=index, args=(s, k * 100)) for k, s in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(stores[0].of_case("acme", "c1")) == 300
    assert stores[1].read_to("d") == {0: 299}
    assert stores[0].size()[1] == 300


def test_contest_parts_come_with_their_head(tmp_path: Path) -> None:
    store = IndexStore(tmp_path / "i.sqlite")
    chunk = Chunk()
    chunk.parts.append(("acme", "k1", 1, place(0, 4)))
    chunk.parts.append(("acme", "k1", 0, place(0, 3)))
    chunk.contests.append(("t1:dpm", "acme", "k1", "c1", place(0, 5)))
    store.apply(chunk, {})
    [contest] = store.contests("t1:dpm", "acme")
    assert (contest.contest_id, contest.head) == ("k1", place(0, 5))
    assert contest.parts == ((0, place(0, 3)), (1, place(0, 4)))
    assert store.contests("t1:dpm", "globex") == []


def test_a_file_damaged_under_its_schema_is_set_aside_at_first_use_and_started_anew(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "i.sqlite"
    store = IndexStore(path)
    chunk = Chunk()
    for n in range(2_000):  # pages enough that the table lies beyond the schema's page
        _decided(chunk, f"t{n}:dpm", case_id=f"case-{n}", where=n)
    store.apply(chunk, {("d", 0): 2_000})
    store.close()
    with path.open("r+b") as damaged:  # the first page (the schema) intact, the rest overwritten
        damaged.seek(4096 * 2)
        damaged.write(b"\xff" * 4096 * 20)

    reopened = IndexStore(path)
    assert reopened.entries("t5:dpm", "acme") == []  # read on an empty file: the next catch-up rebuilds it
    assert "it is rebuilt from its topics" in caplog.text
    assert Path(f"{path}.corrupt").exists()
    assert reopened.read_to("d") == {}
    reopened.apply(chunk, {("d", 0): 2_000})
    assert reopened.entries("t5:dpm", "acme")[0].case_id == "case-5"
