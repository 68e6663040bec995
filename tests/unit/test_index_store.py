"""The lookup index's file: first committed record wins, offsets never move back, erasure marks, corrupt files."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from pipeline.kafka.local_stores import LocalStoreError, StoreRebuiltError
from pipeline.kafka.reading.index_store import MAX_PARTITIONS, Chunk, IndexStore, Listing, cursor_of, place, unplace


def _decided(chunk: Chunk, decision_id: str, *, tenant: str = "acme", case_id: str = "c1", at_ms: int = 1,
             where: int = 0, label: str | None = None) -> None:  # fmt: skip
    chunk.decisions.append((decision_id, tenant, case_id, at_ms, place(0, where), label))
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
    assert (store.of_case("globex", "c1") or [])[0].tenant == "globex"


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


def test_case_pages_follow_indexing_order_and_time_pages_stop_at_what_is_settled(tmp_path: Path) -> None:
    store = IndexStore(tmp_path / "i.sqlite")
    first, late = Chunk(), Chunk()
    for n in range(4):
        _decided(first, f"t{n}:dpm", at_ms=100 + n // 2, where=n)
    _decided(late, "late:dpm", at_ms=99, where=9)  # stamped before the others, committed (indexed) after them
    store.apply(first, {})
    page = store.of_case("acme", "c1", limit=2) or []
    store.apply(late, {})
    assert [e.decision_id for e in page] == ["t0:dpm", "t1:dpm"]
    rest = store.of_case("acme", "c1", after=page[-1].decision_id) or []
    assert [e.decision_id for e in rest] == ["t2:dpm", "t3:dpm", "late:dpm"]  # the late one is not passed over
    assert store.of_case("acme", "c1", after="unknown:dpm") is None  # a cursor that cannot be placed is refused
    assert store.of_case("acme", "other-case", after="t1:dpm") is None

    by_time = store.since("acme", 100, 1_000, None, 2) or []
    assert [e.decision_id for e in by_time] == ["t0:dpm", "t1:dpm"]
    more = store.since("acme", 100, 1_000, by_time[-1].decision_id, 10) or []
    assert [e.decision_id for e in more] == ["t2:dpm", "t3:dpm"]
    assert [e.decision_id for e in store.since("acme", 0, 101, None, 10) or []] == ["late:dpm", "t0:dpm", "t1:dpm"]
    assert store.since("acme", 0, 1_000, "unknown:dpm", 10) is None
    assert store.since("globex", 0, 1_000, None, 10) == []


def test_a_case_page_of_one_catch_up_is_in_publish_order_whatever_partitions_it_read_first(tmp_path: Path) -> None:
    """A case's decisions are keyed by id, so on several partitions: a chunk read partition by partition is in time."""
    store = IndexStore(tmp_path / "i.sqlite")
    chunk = Chunk()
    _decided(chunk, "third:dpm", at_ms=300, where=0)  # partition read first, published last
    _decided(chunk, "first:dpm", at_ms=100, where=1)
    _decided(chunk, "second:dpm", at_ms=200, where=2)
    store.apply(chunk, {})
    assert [e.decision_id for e in store.of_case("acme", "c1") or []] == ["first:dpm", "second:dpm", "third:dpm"]


def test_a_decisions_contests_are_listed_in_publish_order_across_partitions(tmp_path: Path) -> None:
    """Contests are keyed by contest id: the later one may sit at a lower offset of another partition."""
    store = IndexStore(tmp_path / "i.sqlite")
    chunk = Chunk()
    _decided(chunk, "t1:dpm")
    chunk.contests.append(("t1:dpm", "acme", "later", "c1", 2000, place(0, 1)))
    chunk.contests.append(("t1:dpm", "acme", "earlier", "c1", 1000, place(1, 5)))
    store.apply(chunk, {})
    assert [c.contest_id for c in store.contests("t1:dpm", "acme")] == ["earlier", "later"]


def test_erasure_marks_the_case_and_drops_its_label(tmp_path: Path) -> None:
    store = IndexStore(tmp_path / "i.sqlite")
    chunk = Chunk()
    _decided(chunk, "t1:dpm", case_id="gone")
    _decided(chunk, "t2:dpm", case_id="kept", where=1)
    chunk.contests.append(("t1:dpm", "acme", "k1", "gone", 1000, place(0, 9)))
    store.apply(chunk, {})
    assert store.mark_erased("acme", ["gone"]) == 1
    [erased] = store.entries("t1:dpm", "acme")
    assert erased.erased
    assert erased.label is None
    assert not store.entries("t2:dpm", "acme")[0].erased
    assert store.contests("t1:dpm", "acme")[0].erased
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
    assert len(stores[0].of_case("acme", "c1") or []) == 300
    assert stores[1].read_to("d") == {0: 299}
    assert stores[0].size()[1] == 300
    assert stores[1].decided() == 300  # ids indexed by both count once


def test_contest_parts_come_with_their_head(tmp_path: Path) -> None:
    store = IndexStore(tmp_path / "i.sqlite")
    chunk = Chunk()
    chunk.parts.append(("acme", "k1", 1, place(0, 4)))
    chunk.parts.append(("acme", "k1", 0, place(0, 3)))
    chunk.contests.append(("t1:dpm", "acme", "k1", "c1", 1000, place(0, 5)))
    store.apply(chunk, {})
    [contest] = store.contests("t1:dpm", "acme")
    assert (contest.contest_id, contest.head) == ("k1", place(0, 5))
    assert contest.parts == ((0, place(0, 3)), (1, place(0, 4)))
    assert store.contests("t1:dpm", "globex") == []


def test_a_file_damaged_under_its_schema_is_set_aside_at_first_use_and_started_anew(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "i.sqlite"
    store, chunk = _filled(path)  # pages enough that the table lies beyond the schema's page
    store.close()
    _damage(path)

    reopened = IndexStore(path)
    assert reopened.entries("t5:dpm", "acme") == []  # read on an empty file: the next catch-up rebuilds it
    assert "it is rebuilt from its topics" in caplog.text
    assert Path(f"{path}.corrupt").exists()
    assert reopened.read_to("d") == {}
    reopened.apply(chunk, {("d", 0): 2_000})
    assert reopened.entries("t5:dpm", "acme")[0].case_id == "case-5"


def _damage(path: Path) -> None:
    """The file's schema page kept, the pages after it overwritten."""
    with path.open("r+b") as damaged:
        damaged.seek(4096 * 2)
        damaged.write(b"\xff" * 4096 * 20)


def _filled(path: Path) -> tuple[IndexStore, Chunk]:
    store = IndexStore(path)
    chunk = Chunk()
    for n in range(2_000):
        _decided(chunk, f"t{n}:dpm", case_id=f"case-{n}", where=n)
    store.apply(chunk, {("d", 0): 2_000})
    return store, chunk


def test_a_write_that_meets_damage_starts_the_file_anew_and_says_so_rather_than_writing_half(tmp_path: Path) -> None:
    path = tmp_path / "i.sqlite"
    store, chunk = _filled(path)
    store.close()
    _damage(path)
    reopened = IndexStore(path)
    with pytest.raises(StoreRebuiltError):
        reopened.apply(chunk, {("d", 0): 4_000})  # the rows in hand are only part of what the new file needs
    assert reopened.read_to("d") == {}  # so its offsets say it holds nothing: the caller reads everything again


def test_a_second_process_on_a_damaged_file_opens_the_new_one_and_never_moves_it_aside(tmp_path: Path) -> None:
    path = tmp_path / "i.sqlite"
    first, chunk = _filled(path)
    second = IndexStore(path)
    first.close()
    second.close()
    _damage(path)
    first, second = IndexStore(path), IndexStore(path)
    assert first.entries("t5:dpm", "acme") == []  # the first to meet the damage moves the file aside
    first.apply(chunk, {("d", 0): 2_000})
    assert second.entries("t5:dpm", "acme")[0].case_id == "case-5"  # the other finds it replaced: the new one
    assert first.read_to("d") == {0: 2_000}


def test_a_busy_or_closed_file_is_an_error_of_its_own_not_damage(tmp_path: Path) -> None:
    path = tmp_path / "i.sqlite"
    store, _ = _filled(path)
    store.close()
    with pytest.raises(LocalStoreError, match="could not be used"):
        store.entries("t5:dpm", "acme")  # a closed connection: not a reason to set the file aside
    assert not Path(f"{path}.corrupt").exists()


def _listed(store: IndexStore, wanted: Listing, limit: int = 100) -> list[str]:
    return [e.decision_id for e in store.listing(wanted, limit)]


def test_a_listing_pages_newest_first_by_cursor_both_ways_and_filters(tmp_path: Path) -> None:
    store = IndexStore(tmp_path / "i.sqlite")
    chunk = Chunk()
    for n in range(10):  # t0 oldest .. t9 newest; two share a time (the id breaks the tie)
        _decided(chunk, f"t{n}:{'summ' if n % 3 == 0 else 'dpm'}", at_ms=100 + min(n, 8), where=n,
                 label="DENY" if n % 2 else "APPROVE", case_id=f"c{n % 2}")  # fmt: skip
    _decided(chunk, "other:dpm", tenant="globex", at_ms=150, label="REFER")
    _decided(chunk, "sealed:dpm", tenant="initech", at_ms=90)  # sealed: no label in the index
    store.apply(chunk, {})
    everything = Listing(tenant="acme")
    first = store.listing(everything, 4)
    assert [e.decision_id for e in first] == ["t9:summ", "t8:dpm", "t7:dpm", "t6:summ"]
    second = store.listing(Listing(tenant="acme", before=cursor_of(first[-1])), 4)
    assert [e.decision_id for e in second] == ["t5:dpm", "t4:dpm", "t3:summ", "t2:dpm"]
    back = store.listing(Listing(tenant="acme", after=cursor_of(second[0])), 4)
    assert back == first  # the page before it, newest first as well
    assert _listed(store, Listing(tenant="acme", before=cursor_of(second[-1]))) == ["t1:dpm", "t0:summ"]
    assert _listed(store, Listing(tenant="acme", architecture="summ")) == ["t9:summ", "t6:summ", "t3:summ", "t0:summ"]
    assert _listed(store, Listing(tenant="acme", label="DENY", case_id="c1")) == ["t9:summ", "t7:dpm", "t5:dpm",
                                                                                  "t3:summ", "t1:dpm"]  # fmt: skip
    assert _listed(store, Listing(tenant="acme", since_ms=105, until_ms=106)) == ["t6:summ", "t5:dpm"]
    assert _listed(store, Listing(), 2) == ["other:dpm", "t9:summ"]  # every tenant (an admin's list)
    assert _listed(store, Listing(tenant="globex")) == ["other:dpm"]
    assert _listed(store, Listing(label="REFER")) == ["other:dpm", "sealed:dpm"]  # the sealed one: its opener checks
    assert store.labels("acme") == ["APPROVE", "DENY"]
    assert store.decided() == 12
    assert store.labels(None) == ["APPROVE", "DENY", "REFER"]
    store.mark_erased("acme", ["c1"])
    assert "t9:summ" in _listed(store, Listing(tenant="acme"))  # listed as erased, content gone
    assert _listed(store, Listing(tenant="acme", label="DENY")) == []  # an erased decision has no label
