"""The lookup index on disk (SQLite in WAL mode): where each published decision's records are, by id and by case.

A local store in the manner of Kafka Streams' state stores: kept from the output topics (which
are its changelog), with the offset each partition was read to stored in the same SQLite
transaction as the rows it added, so a process that starts again, or a second process sharing
the file, reads only what was published since. Rows hold places and ids, never content: a
decision's record, view and audit records are read from Kafka at their offsets, opened with the
case's data key, so erasure (which destroys that key) reaches every lookup whatever the index holds.

A place is one integer, `offset * 4096 + partition`: one varint where two columns would cost two.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from pipeline.kafka.local_stores import RebuildableStore, rebuilt_on_damage, store_file, written_or_rebuilt

MAX_PARTITIONS = 4096  # a place packs the partition in its low 12 bits
_FORMAT = 4  # in the file's name: a process of another format keeps a file of its own (and reads anew)
_KEY_FORMAT = 2  # the key places file's, apart: a new output index format need not read the key topic anew

_SCHEMA = """
CREATE TABLE IF NOT EXISTS read_to (topic TEXT, partition INTEGER, next_offset INTEGER NOT NULL,
                                    PRIMARY KEY (topic, partition)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS decisions (decision_id TEXT NOT NULL, tenant TEXT NOT NULL, case_id TEXT,
                                      at_ms INTEGER, decision INTEGER, view INTEGER, audits BLOB, label TEXT,
                                      erased INTEGER NOT NULL DEFAULT 0, seq INTEGER,
                                      PRIMARY KEY (decision_id, tenant)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS decisions_by_case ON decisions (tenant, case_id, seq);
CREATE INDEX IF NOT EXISTS decisions_by_time ON decisions (tenant, at_ms);
CREATE INDEX IF NOT EXISTS decisions_by_when ON decisions (at_ms);
CREATE TABLE IF NOT EXISTS labels (tenant TEXT, label TEXT, PRIMARY KEY (tenant, label)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS refusals (trigger_id TEXT, tenant TEXT, place INTEGER NOT NULL,
                                     PRIMARY KEY (trigger_id, tenant)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS contests (decision_id TEXT, tenant TEXT, contest_id TEXT, case_id TEXT NOT NULL,
                                     at_ms INTEGER NOT NULL, place INTEGER NOT NULL,
                                     erased INTEGER NOT NULL DEFAULT 0,
                                     PRIMARY KEY (decision_id, tenant, contest_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS contest_parts (tenant TEXT, contest_id TEXT, part INTEGER, place INTEGER NOT NULL,
                                          PRIMARY KEY (tenant, contest_id, part)) WITHOUT ROWID;
"""

# Later records of an id already indexed (a trigger decided twice) are not its: the first committed is.
# `seq` numbers decisions in the order they were indexed (a case's pages follow it: a decision indexed
# later never lands behind a page already read); given with the decision, never changed after. A row
# its view or audits made first takes its decision by the update; any other by the insert. Two
# statements, not one upsert, so the rows each changed count the decisions newly indexed.
_DECIDE_EXISTING = """
UPDATE decisions SET case_id = COALESCE(case_id, ?), at_ms = COALESCE(at_ms, ?), decision = ?, label = ?, seq = ?
WHERE decision_id = ? AND tenant = ? AND decision IS NULL
"""
_DECIDE_NEW = """
INSERT OR IGNORE INTO decisions (decision_id, tenant, case_id, at_ms, decision, label, seq) VALUES (?, ?, ?, ?, ?, ?, ?)
"""
_UPSERT_VIEW = """
INSERT INTO decisions (decision_id, tenant, view) VALUES (?, ?, ?)
ON CONFLICT (decision_id, tenant) DO UPDATE SET view = COALESCE(view, excluded.view)
"""
_UPSERT_AUDITS = """
INSERT INTO decisions (decision_id, tenant, audits) VALUES (?, ?, ?)
ON CONFLICT (decision_id, tenant) DO UPDATE SET audits = merged_audits(audits, excluded.audits)
"""


def place(partition: int, offset: int) -> int:
    """A record's partition and offset as one integer."""
    if not 0 <= partition < MAX_PARTITIONS:
        raise ValueError(f"partition {partition}: the index places at most {MAX_PARTITIONS} partitions")
    return offset * MAX_PARTITIONS + partition


def unplace(packed: int) -> tuple[int, int]:
    """(partition, offset) of a place."""
    return packed % MAX_PARTITIONS, packed // MAX_PARTITIONS


def _merged_audits(kept: bytes | None, new: bytes | None) -> bytes | None:
    """Audit places by call index: the first place of each call index wins (the first committed record)."""
    if kept is None or new is None:
        return kept or new
    merged = dict(orjson.loads(kept))
    for call, where in orjson.loads(new):
        merged.setdefault(call, where)
    return orjson.dumps(sorted(merged.items()))


@dataclass(frozen=True)
class Entry:
    """Where one tenant's decision id is: its decision, view and audit records (call index -> place)."""

    decision_id: str
    tenant: str
    case_id: str | None
    at_ms: int | None
    decision: int | None
    view: int | None
    audits: tuple[tuple[int, int], ...]
    label: str | None
    erased: bool

    @property
    def complete(self) -> bool:
        """Whether its decision and view are indexed (its audits are, whenever its decision is: see OutputIndex)."""
        return self.decision is not None and self.view is not None


Cursor = tuple[int, str, str]  # an entry's place in a listing: (time, decision id, tenant)


@dataclass(frozen=True)
class Listing:
    """What a listing shows: every field None matches all; a page before `before` or after `after` (cursors)."""

    tenant: str | None = None
    case_id: str | None = None
    architecture: str | None = None  # the decision id's suffix: "dpm", "summ"
    label: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    before: Cursor | None = None
    after: Cursor | None = None


def cursor_of(entry: Entry) -> Cursor:
    """Where `entry` is in a listing."""
    return (entry.at_ms or 0, entry.decision_id, entry.tenant)


@dataclass(frozen=True)
class ContestEntry:
    """Where a contest of a decision is: its head, and its parts' places by part number."""

    contest_id: str
    case_id: str
    head: int
    parts: tuple[tuple[int, int], ...]
    erased: bool


@dataclass
class Chunk:
    """Rows read from the output topics, written in one transaction with how far each partition was read."""

    decisions: list[tuple[str, str, str, int, int, str | None]] = field(default_factory=list)
    views: list[tuple[str, str, int]] = field(default_factory=list)
    audits: dict[tuple[str, str], dict[int, int]] = field(default_factory=dict)
    refusals: list[tuple[str, str, int]] = field(default_factory=list)
    contests: list[tuple[str, str, str, str, int, int]] = field(default_factory=list)
    parts: list[tuple[str, str, int, int]] = field(default_factory=list)

    def __len__(self) -> int:
        return (len(self.decisions) + len(self.views) + len(self.audits) + len(self.refusals) + len(self.contests)
                + len(self.parts))  # fmt: skip

    def audit(self, decision_id: str, tenant: str, call_index: int, where: int) -> None:
        self.audits.setdefault((decision_id, tenant), {}).setdefault(call_index, where)


_COLUMNS = "decision_id, tenant, case_id, at_ms, decision, view, audits, label, erased"


def _entry(row: Sequence[object]) -> Entry:
    decision_id, tenant, case_id, at_ms, decision, view, audits, label, erased = row
    pairs = tuple((int(c), int(w)) for c, w in orjson.loads(audits)) if isinstance(audits, bytes) else ()
    return Entry(str(decision_id), str(tenant), None if case_id is None else str(case_id),
                 None if at_ms is None else int(str(at_ms)), None if decision is None else int(str(decision)),
                 None if view is None else int(str(view)), pairs, None if label is None else str(label),
                 bool(erased))  # fmt: skip


class IndexStore(RebuildableStore):
    """The index file of one set of output topics. Thread-safe; other processes may share the file.

    A damaged file is set aside and started anew (RebuildableStore): the next catch-up rebuilds it.
    """

    def __init__(self, path: Path) -> None:
        super().__init__(path, _SCHEMA)

    def _prepare(self, db: sqlite3.Connection) -> None:
        db.create_function("merged_audits", 2, _merged_audits, deterministic=True)

    @staticmethod
    def file(directory: Path, topic: str, topic_id: str) -> Path:
        """The file of the output topics whose decisions topic is `topic` with id `topic_id`."""
        return store_file(directory, topic, topic_id, f"v{_FORMAT}")

    @contextmanager
    def _transaction(self, *, immediate: bool = True) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    @rebuilt_on_damage
    def read_to(self, topic: str) -> dict[int, int]:
        """The first offset not indexed yet of each partition of `topic` read so far."""
        with self._lock:
            rows = self._db.execute("SELECT partition, next_offset FROM read_to WHERE topic = ?", (topic,)).fetchall()
        return {int(p): int(o) for p, o in rows}

    @written_or_rebuilt
    def apply(self, chunk: Chunk, read_to: Mapping[tuple[str, int], int]) -> None:
        """Adds a chunk's rows and records how far it read, in one transaction; never moves a partition back.

        Rows merge as the first committed record wins, so two processes that index the same records
        (sharing one file) leave what one would.
        """
        with self._lock, self._transaction():
            # The last number given, kept apart: MAX(seq) scanned every row (150 ms a chunk at 1,000,000).
            base = self._counter("seq")
            # Numbered in publish order: a chunk holds several partitions' decisions (a case's decisions
            # are keyed by id, so spread over partitions), read partition by partition. A stable sort:
            # an id decided twice at one time keeps its first committed first.
            in_time = sorted(chunk.decisions, key=lambda row: row[3] or 0)
            numbered = [(*row, base + n) for n, row in enumerate(in_time, 1)]
            taken = [(c, at, where, label, seq, d, t) for d, t, c, at, where, label, seq in numbered]
            decided = self._db.executemany(_DECIDE_EXISTING, taken).rowcount
            decided += self._db.executemany(_DECIDE_NEW, numbered).rowcount
            self._set_counter("seq", base + len(numbered))
            self._set_counter("decided", self._counter("decided") + decided)
            self._db.executemany(_UPSERT_VIEW, chunk.views)
            self._db.executemany(_UPSERT_AUDITS, [(d, t, orjson.dumps(sorted(calls.items())))
                                                  for (d, t), calls in chunk.audits.items()])  # fmt: skip
            self._db.executemany("INSERT OR IGNORE INTO labels VALUES (?, ?)",
                                 {(row[1], row[5]) for row in chunk.decisions if row[5] is not None})  # fmt: skip
            # The latest refusal of a trigger id is its answer: a later one is of the trigger sent again after a
            # retryable refusal (a `duplicate` is no refusal; a binding one makes every later sending one).
            self._db.executemany("INSERT INTO refusals VALUES (?, ?, ?) ON CONFLICT (trigger_id, tenant) DO UPDATE "
                                 "SET place = MAX(place, excluded.place)", chunk.refusals)  # fmt: skip
            self._db.executemany("INSERT OR IGNORE INTO contests (decision_id, tenant, contest_id, case_id, at_ms, "
                                 "place) VALUES (?, ?, ?, ?, ?, ?)", chunk.contests)  # fmt: skip
            self._db.executemany("INSERT OR IGNORE INTO contest_parts VALUES (?, ?, ?, ?)", chunk.parts)
            self._db.executemany(
                "INSERT INTO read_to VALUES (?, ?, ?) ON CONFLICT (topic, partition) DO UPDATE SET "
                "next_offset = MAX(next_offset, excluded.next_offset)",
                [(topic, partition, offset) for (topic, partition), offset in read_to.items()],
            )

    def _counter(self, name: str) -> int:
        row = self._db.execute("SELECT value FROM counters WHERE name = ?", (name,)).fetchone()
        return 0 if row is None else int(row[0])

    def _set_counter(self, name: str, value: int) -> None:
        self._db.execute("INSERT INTO counters VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                         (name, value))  # fmt: skip

    @rebuilt_on_damage
    def decided(self) -> int:
        """How many decisions are indexed (each id of a tenant once, however many processes indexed it)."""
        with self._lock:
            return self._counter("decided")

    @rebuilt_on_damage
    def entries(self, decision_id: str, tenant: str | None) -> list[Entry]:
        """The entries of a decision id (of `tenant`, or of every tenant that used it)."""
        with self._lock:
            if tenant is None:
                rows = self._db.execute(f"SELECT {_COLUMNS} FROM decisions WHERE decision_id = ?",  # noqa: S608
                                        (decision_id,)).fetchall()  # fmt: skip
            else:
                rows = self._db.execute(f"SELECT {_COLUMNS} FROM decisions WHERE decision_id = ? AND tenant = ?",  # noqa: S608
                                        (decision_id, tenant)).fetchall()  # fmt: skip
        return [_entry(row) for row in rows]

    @rebuilt_on_damage
    def of_case(self, tenant: str, case_id: str, after: str | None = None, limit: int = -1) -> list[Entry] | None:
        """The case's decided entries in the order they were indexed: after decision id `after`, at most `limit`.

        None when `after` is no decision of the case (a cursor that cannot be placed is refused, not
        taken for the start).
        """
        with self._lock:
            start = 0
            if after is not None:
                row = self._db.execute("SELECT seq FROM decisions WHERE decision_id = ? AND tenant = ? AND case_id = ? "
                                       "AND decision IS NOT NULL", (after, tenant, case_id)).fetchone()  # fmt: skip
                if row is None:
                    return None
                start = int(row[0])
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM decisions WHERE tenant = ? AND case_id = ? "  # noqa: S608
                "AND decision IS NOT NULL AND seq > ? ORDER BY seq LIMIT ?",
                (tenant, case_id, start, limit),
            ).fetchall()
        return [_entry(row) for row in rows]

    @rebuilt_on_damage
    def since(self, tenant: str, since_ms: int, until_ms: int, after: str | None, limit: int) -> list[Entry] | None:
        """One page of the tenant's decided entries published from `since_ms` to before `until_ms`, oldest first.

        After decision id `after` (the last of the page before); None when `after` is no decision of
        the tenant. Ordered by publish time: a caller gives an `until_ms` no decision can still be
        committed before (see `dpm decisions --since`), so no page is passed by one indexed later.
        """
        with self._lock:
            at_ms, decision_id = since_ms, ""
            if after is not None:
                row = self._db.execute("SELECT at_ms FROM decisions WHERE decision_id = ? AND tenant = ? "
                                       "AND decision IS NOT NULL", (after, tenant)).fetchone()  # fmt: skip
                if row is None:
                    return None
                at_ms, decision_id = max((int(row[0]), after), (since_ms, ""))
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM decisions WHERE tenant = ? AND decision IS NOT NULL "  # noqa: S608
                "AND (at_ms, decision_id) > (?, ?) AND at_ms < ? ORDER BY at_ms, decision_id LIMIT ?",
                (tenant, at_ms, decision_id, until_ms, limit),
            ).fetchall()
        return [_entry(row) for row in rows]

    @rebuilt_on_damage
    def listing(self, wanted: Listing, limit: int) -> list[Entry]:
        """One page of decided entries that match `wanted`, newest first (or, with `wanted.after`, the page before).

        Keyset pages over (time, id, tenant): a page starts past the last entry of the page before it,
        so its cost does not grow with the pages before it. Filters on label or architecture are applied
        to the entries in time order: a rare one reads further to fill a page. A sealed decision's label
        is not in the index (it is content): `label` keeps the entries that have it and the sealed ones
        (label unknown here, checked by whoever opens them), never an erased one.
        """
        where: list[str] = ["decision IS NOT NULL", "view IS NOT NULL"]  # complete: see OutputIndex
        args: list[object] = []
        for column, value in (("tenant", wanted.tenant), ("case_id", wanted.case_id)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        if wanted.label is not None:
            where.append("(label = ? OR (label IS NULL AND erased = 0))")
            args.append(wanted.label)
        if wanted.architecture is not None:
            suffix = f":{wanted.architecture}"  # an id is <trigger id>:<architecture>
            where.append("SUBSTR(decision_id, -?) = ?")
            args.extend((len(suffix), suffix))
        if wanted.since_ms is not None:
            where.append("at_ms >= ?")
            args.append(wanted.since_ms)
        if wanted.until_ms is not None:
            where.append("at_ms <= ?")
            args.append(wanted.until_ms)
        cursor, older = (wanted.after, False) if wanted.after is not None else (wanted.before, True)
        if cursor is not None:
            where.append(f"(at_ms, decision_id, tenant) {'<' if older else '>'} (?, ?, ?)")
            args.extend(cursor)
        order = "DESC" if older else "ASC"
        # A case's decisions are few: found by case, then sorted. SQLite would rather walk the tenant's by time.
        by_case = " INDEXED BY decisions_by_case" if wanted.tenant is not None and wanted.case_id is not None else ""
        sql = (
            f"SELECT {_COLUMNS} FROM decisions{by_case} WHERE {' AND '.join(where)} "  # noqa: S608 - columns are ours
            f"ORDER BY at_ms {order}, decision_id {order}, tenant {order} LIMIT ?"
        )
        with self._lock:
            rows = self._db.execute(sql, (*args, limit)).fetchall()
        entries = [_entry(row) for row in rows]
        return entries if older else entries[::-1]

    @rebuilt_on_damage
    def labels(self, tenant: str | None) -> list[str]:
        """The labels of the decisions indexed in clear (of `tenant`, or of every tenant), for a list's filter."""
        with self._lock:
            if tenant is None:
                rows = self._db.execute("SELECT DISTINCT label FROM labels ORDER BY label").fetchall()
            else:
                rows = self._db.execute(
                    "SELECT label FROM labels WHERE tenant = ? ORDER BY label", (tenant,)
                ).fetchall()
        return [str(row[0]) for row in rows]

    @rebuilt_on_damage
    def refusal(self, trigger_id: str, tenant: str) -> int | None:
        """The place of the dead letter that refused the tenant's trigger, if one did."""
        with self._lock:
            row = self._db.execute("SELECT place FROM refusals WHERE trigger_id = ? AND tenant = ?",
                                   (trigger_id, tenant)).fetchone()  # fmt: skip
        return None if row is None else int(row[0])

    @rebuilt_on_damage
    def contests(self, decision_id: str, tenant: str) -> list[ContestEntry]:
        """The contests of a tenant's decision in the order they were published, with their parts' places.

        By publish time, not place: a decision's contests are keyed by contest id, so they spread over the
        topic's partitions, whose offsets say nothing of one another's order.
        """
        with self._lock, self._transaction(immediate=False):
            heads = self._db.execute("SELECT contest_id, case_id, place, erased FROM contests WHERE decision_id = ? "
                                     "AND tenant = ? ORDER BY at_ms, place",
                                     (decision_id, tenant)).fetchall()  # fmt: skip
            found = []
            for contest_id, case_id, head, erased in heads:
                parts = self._db.execute("SELECT part, place FROM contest_parts WHERE tenant = ? AND contest_id = ? "
                                         "ORDER BY part", (tenant, contest_id)).fetchall()  # fmt: skip
                found.append(ContestEntry(contest_id, case_id, int(head), tuple((int(p), int(w)) for p, w in parts),
                                          bool(erased)))  # fmt: skip
        return found

    @rebuilt_on_damage
    def mark_erased(self, tenant: str, case_ids: Iterable[str]) -> int:
        """Marks the cases' decisions and contests erased (their labels dropped); returns how many decisions."""
        marked = 0
        with self._lock, self._transaction():
            for case_id in case_ids:
                marked += self._db.execute("UPDATE decisions SET erased = 1, label = NULL WHERE tenant = ? AND "
                                           "case_id = ?", (tenant, case_id)).rowcount  # fmt: skip
                self._db.execute("UPDATE contests SET erased = 1 WHERE tenant = ? AND case_id = ?", (tenant, case_id))
        return marked

    @rebuilt_on_damage
    def mark_tenant_erased(self, tenant: str) -> int:
        """Marks every decision and contest of the tenant erased (its keys are destroyed); returns how many."""
        with self._lock, self._transaction():
            marked = self._db.execute("UPDATE decisions SET erased = 1, label = NULL WHERE tenant = ?",
                                      (tenant,)).rowcount  # fmt: skip
            self._db.execute("DELETE FROM labels WHERE tenant = ?", (tenant,))
            self._db.execute("UPDATE contests SET erased = 1 WHERE tenant = ?", (tenant,))
        return int(marked)

    @rebuilt_on_damage
    def size(self) -> tuple[int, int]:
        """(bytes of the file's pages in use, decisions indexed)."""
        with self._lock:
            pages = int(self._db.execute("PRAGMA page_count").fetchone()[0])
            free = int(self._db.execute("PRAGMA freelist_count").fetchone()[0])
            page = int(self._db.execute("PRAGMA page_size").fetchone()[0])
            count = int(self._db.execute("SELECT COUNT(*) FROM decisions WHERE decision IS NOT NULL").fetchone()[0])
        return (pages - free) * page, count


_KEY_SCHEMA = """
CREATE TABLE IF NOT EXISTS read_to (partition INTEGER PRIMARY KEY, next_offset INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS keys (case_key TEXT PRIMARY KEY, place INTEGER NOT NULL, live INTEGER NOT NULL,
                                 seq INTEGER NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS keys_by_seq ON keys (seq);
"""


@dataclass(frozen=True)
class KeyPlace:
    """Where a case's latest key-topic record is; `live` False for a tombstone or an erased marker."""

    case_key: str
    place: int
    live: bool
    seq: int


class KeyStore(RebuildableStore):
    """Where each case's latest record on one key topic is (a file per key topic). Thread-safe; shareable.

    `seq` numbers changes across the file: a process asks what changed since the last `seq` it saw,
    whoever indexed it. A damaged file is set aside and started anew, as IndexStore's.
    """

    def __init__(self, path: Path) -> None:
        super().__init__(path, _KEY_SCHEMA)

    @staticmethod
    def file(directory: Path, topic: str, topic_id: str) -> Path:
        """The file of key topic `topic` with id `topic_id`."""
        return store_file(directory, topic, topic_id, f"keys.v{_KEY_FORMAT}")

    @rebuilt_on_damage
    def read_to(self) -> dict[int, int]:
        with self._lock:
            return {int(p): int(o) for p, o in self._db.execute("SELECT partition, next_offset FROM read_to")}

    @written_or_rebuilt
    def apply(self, rows: Sequence[tuple[str, int, bool]], read_to: Mapping[int, int]) -> None:
        """Records each case's newer place (a later offset wins) and how far each partition was read."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                base = int(self._db.execute("SELECT COALESCE(MAX(seq), 0) FROM keys").fetchone()[0])
                self._db.executemany(
                    "INSERT INTO keys VALUES (?, ?, ?, ?) ON CONFLICT (case_key) DO UPDATE SET place = excluded.place, "
                    "live = excluded.live, seq = excluded.seq WHERE excluded.place > keys.place",
                    [(case_key, where, int(live), base + n) for n, (case_key, where, live) in enumerate(rows, 1)],
                )
                self._db.executemany(
                    "INSERT INTO read_to VALUES (?, ?) ON CONFLICT (partition) DO UPDATE SET "
                    "next_offset = MAX(next_offset, excluded.next_offset)",
                    list(read_to.items()),
                )
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    @rebuilt_on_damage
    def place_of(self, case_key: str) -> KeyPlace | None:
        with self._lock:
            row = self._db.execute("SELECT case_key, place, live, seq FROM keys WHERE case_key = ?",
                                   (case_key,)).fetchone()  # fmt: skip
        return None if row is None else KeyPlace(str(row[0]), int(row[1]), bool(row[2]), int(row[3]))

    @rebuilt_on_damage
    def changed_since(self, seq: int) -> list[KeyPlace]:
        """The cases whose latest record changed after change number `seq`, in order of change."""
        with self._lock:
            rows = self._db.execute("SELECT case_key, place, live, seq FROM keys WHERE seq > ? ORDER BY seq",
                                    (seq,)).fetchall()  # fmt: skip
        return [KeyPlace(str(k), int(w), bool(live), int(s)) for k, w, live, s in rows]

    @rebuilt_on_damage
    def last_seq(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COALESCE(MAX(seq), 0) FROM keys").fetchone()[0])

    @rebuilt_on_damage
    def of_tenant(self, tenant: str) -> list[KeyPlace]:
        """Every case of the tenant (its key ends the range of `tenant/`)."""
        with self._lock:
            rows = self._db.execute("SELECT case_key, place, live, seq FROM keys WHERE case_key >= ? AND "
                                    "case_key < ?", (f"{tenant}/", f"{tenant}0")).fetchall()  # fmt: skip
        return [KeyPlace(str(k), int(w), bool(live), int(s)) for k, w, live, s in rows]
