"""Case heads kept on disk (SQLite in WAL mode), with the offsets of the partitions they were folded from.

A local state store in the manner of Kafka Streams: a case's head (kafka/writing/case_heads.py)
is folded from the case's partitions of the events and triggers topics, which serve as its
changelog, and the offset each partition was folded to is stored in the same SQLite transaction
as the heads it changed. So a process that starts again, or a second process on the host sharing
the file, folds only what was written since. A head's runs and recent batches are rows of their
own, and a save writes only those that changed: an append to a long case costs what a short one
does. A topic deleted and made again under the same name has another topic id: its heads are
dropped and folded afresh.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pipeline.kafka.local_stores import open_store, store_file
from pipeline.kafka.writing.case_heads import Batch, CaseHead

_SCHEMA = """
CREATE TABLE IF NOT EXISTS topics (topic TEXT PRIMARY KEY, topic_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS folded (topic TEXT, partition INTEGER, next_offset INTEGER NOT NULL,
                                   PRIMARY KEY (topic, partition));
CREATE TABLE IF NOT EXISTS heads (topic TEXT, case_key TEXT, version INTEGER NOT NULL, rest BLOB NOT NULL,
                                  PRIMARY KEY (topic, case_key));
CREATE TABLE IF NOT EXISTS runs (topic TEXT, case_key TEXT, ordinal INTEGER, first_offset INTEGER NOT NULL,
                                 count INTEGER NOT NULL, PRIMARY KEY (topic, case_key, ordinal)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batches (topic TEXT, case_key TEXT, batch_id TEXT, first_seq INTEGER NOT NULL,
                                    count INTEGER NOT NULL, fingerprint TEXT,
                                    PRIMARY KEY (topic, case_key, batch_id)) WITHOUT ROWID;
"""
_TABLES = ("heads", "runs", "batches")  # a case's rows: its head's rest (and version), its runs, its recent batches
_FORMAT = 2  # in the store file's name: a process of another format keeps a file of its own (and folds anew)


def heads_file(directory: Path, topic: str, topic_id: str) -> Path:
    """The store file of an events topic's incarnation (its id), in this store's format."""
    return store_file(directory, topic, topic_id, f"v{_FORMAT}")


@dataclass(frozen=True)
class Folded:
    """A fold of `topic`[`partition`] from offset `start` up to (not including) `end`."""

    topic: str
    partition: int
    start: int
    end: int


class HeadStore:
    """Heads by (events topic, case key), and the next offset to fold of each (topic, partition). Thread-safe."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = open_store(path, _SCHEMA)
        self._lock = threading.Lock()

    def adopt(self, topic: str, topic_id: str, related: Iterable[str] = ()) -> None:
        """Records `topic`'s id; a different one recorded before drops what was folded of it (and of `related`)."""
        with self._lock, self._transaction():
            row = self._db.execute("SELECT topic_id FROM topics WHERE topic = ?", (topic,)).fetchone()
            if row is not None and row[0] == topic_id:
                return
            for name in (topic, *related):
                for table in (*_TABLES, "folded"):
                    self._db.execute(f"DELETE FROM {table} WHERE topic = ?", (name,))  # noqa: S608 - our names
            self._db.execute("INSERT OR REPLACE INTO topics VALUES (?, ?)", (topic, topic_id))

    def next_offset(self, topic: str, partition: int) -> int:
        """The first offset of `topic`[`partition`] not folded yet (0: nothing folded)."""
        with self._lock:
            row = self._db.execute("SELECT next_offset FROM folded WHERE topic = ? AND partition = ?",
                                   (topic, partition)).fetchone()  # fmt: skip
        return 0 if row is None else int(row[0])

    def head(self, topic: str, case_key: str) -> CaseHead | None:
        """The case's head as stored (its rest, runs and batches read in one transaction), None for none."""
        with self._lock, self._transaction(immediate=False):
            row = self._db.execute("SELECT version, rest FROM heads WHERE topic = ? AND case_key = ?",
                                   (topic, case_key)).fetchone()  # fmt: skip
            if row is None:
                return None
            runs = self._db.execute("SELECT first_offset, count FROM runs WHERE topic = ? AND case_key = ? "
                                    "ORDER BY ordinal", (topic, case_key)).fetchall()  # fmt: skip
            batches = self._db.execute("SELECT batch_id, first_seq, count, fingerprint FROM batches WHERE topic = ? "
                                       "AND case_key = ? ORDER BY first_seq", (topic, case_key)).fetchall()  # fmt: skip
        return CaseHead.restored(row[1], [[first, count] for first, count in runs],
                                 [(i, Batch(first, count, fp)) for i, first, count, fp in batches], row[0])  # fmt: skip

    def save(self, topic: str, heads: Mapping[str, CaseHead | None], folded: Folded | None = None) -> bool:
        """Stores `heads` (None: the case's head is gone) and, with them, how far a partition was folded.

        With `folded`, only if the partition's folded offset is still the one the fold started from:
        another process on the file that folded it meanwhile wins, and False tells the caller to
        fold again from where that one stopped.
        """
        versions: dict[str, int] = {}
        with self._lock, self._transaction():
            if folded is not None:
                row = self._db.execute("SELECT next_offset FROM folded WHERE topic = ? AND partition = ?",
                                       (folded.topic, folded.partition)).fetchone()  # fmt: skip
                if (0 if row is None else int(row[0])) != folded.start:
                    return False
                self._db.execute("INSERT OR REPLACE INTO folded VALUES (?, ?, ?)",
                                 (folded.topic, folded.partition, folded.end))  # fmt: skip
            for case_key, head in heads.items():
                if head is None:
                    for table in _TABLES:
                        self._db.execute(f"DELETE FROM {table} WHERE topic = ? AND case_key = ?",  # noqa: S608
                                         (topic, case_key))  # fmt: skip
                else:
                    versions[case_key] = self._write(topic, case_key, head)
        for case_key, version in versions.items():  # committed: what changes from now on is what the next save writes
            head = heads[case_key]
            if head is not None:
                head.stored(version)
        return True

    def _write(self, topic: str, case_key: str, head: CaseHead) -> int:
        """The head's rest, and of its runs and batches what changed since it was stored; its new row version.

        Only what changed when the stored row is the version the head was read or stored at (its runs and
        batches grow with the case's appends); else the whole head, in place of whatever rows are there (a
        case erased and written anew, another process's head, rows this head never saw).
        """
        row = self._db.execute("SELECT version FROM heads WHERE topic = ? AND case_key = ?",
                               (topic, case_key)).fetchone()  # fmt: skip
        current = None if row is None else int(row[0])
        if head.version is not None and head.version == current:
            changed = head.changes()
        else:
            changed = head.whole()
            for table in ("runs", "batches"):
                self._db.execute(f"DELETE FROM {table} WHERE topic = ? AND case_key = ?",  # noqa: S608 - our names
                                 (topic, case_key))  # fmt: skip
        version = (current or 0) + 1
        self._db.execute("INSERT OR REPLACE INTO heads VALUES (?, ?, ?, ?)",
                         (topic, case_key, version, head.encode_rest()))  # fmt: skip
        if changed.runs_from is not None:
            self._db.executemany("INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?)",
                                 [(topic, case_key, i, first, count) for i, first, count in changed.runs])  # fmt: skip
            self._db.execute("DELETE FROM runs WHERE topic = ? AND case_key = ? AND ordinal >= ?",
                             (topic, case_key, changed.runs_from + len(changed.runs)))  # fmt: skip
        self._db.executemany("INSERT OR REPLACE INTO batches VALUES (?, ?, ?, ?, ?, ?)",
                             [(topic, case_key, i, b.first_seq, b.count, b.fingerprint)
                              for i, b in changed.batches])  # fmt: skip
        self._db.executemany("DELETE FROM batches WHERE topic = ? AND case_key = ? AND batch_id = ?",
                             [(topic, case_key, i) for i in changed.gone])  # fmt: skip
        return version

    def forget(self, topic: str, case_key: str) -> None:
        """Drops a case's head (the case was erased)."""
        self.save(topic, {case_key: None})

    def _transaction(self, *, immediate: bool = True) -> _Transaction:
        """A write transaction (immediate), or a read one: a head's rows read as of one moment."""
        return _Transaction(self._db, immediate=immediate)

    def close(self) -> None:
        with self._lock:
            self._db.close()


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error): another process on the file waits, never interleaves."""

    def __init__(self, db: sqlite3.Connection, *, immediate: bool = True) -> None:
        self._db, self._immediate = db, immediate

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE" if self._immediate else "BEGIN")

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        if kind is not None:
            self._db.execute("ROLLBACK")
            return
        try:
            self._db.execute("COMMIT")
        except sqlite3.Error:
            self._db.execute("ROLLBACK")  # else the connection stays inside the transaction for good
            raise
