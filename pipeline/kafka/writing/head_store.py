"""Case heads kept on disk (SQLite in WAL mode), with the offsets of the partitions they were folded from.

A local state store in the manner of Kafka Streams: a case's head (kafka/writing/case_heads.py)
is folded from the case's partitions of the events and triggers topics, which serve as its
changelog, and the offset each partition was folded to is stored in the same SQLite transaction
as the heads it changed. So a process that starts again, or a second process on the host sharing
the file, folds only what was written since. A topic deleted and made again under the same name
has another topic id: its heads are dropped and folded afresh.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pipeline.kafka.writing.case_heads import CaseHead

_SCHEMA = """
CREATE TABLE IF NOT EXISTS topics (topic TEXT PRIMARY KEY, topic_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS folded (topic TEXT, partition INTEGER, next_offset INTEGER NOT NULL,
                                   PRIMARY KEY (topic, partition));
CREATE TABLE IF NOT EXISTS heads (topic TEXT, case_key TEXT, head BLOB NOT NULL, PRIMARY KEY (topic, case_key));
"""


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
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # durable at checkpoints; a lost tail is folded again
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()

    def adopt(self, topic: str, topic_id: str, related: Iterable[str] = ()) -> None:
        """Records `topic`'s id; a different one recorded before drops what was folded of it (and of `related`)."""
        with self._lock, self._transaction():
            row = self._db.execute("SELECT topic_id FROM topics WHERE topic = ?", (topic,)).fetchone()
            if row is not None and row[0] == topic_id:
                return
            for name in (topic, *related):
                self._db.execute("DELETE FROM heads WHERE topic = ?", (name,))
                self._db.execute("DELETE FROM folded WHERE topic = ?", (name,))
            self._db.execute("INSERT OR REPLACE INTO topics VALUES (?, ?)", (topic, topic_id))

    def next_offset(self, topic: str, partition: int) -> int:
        """The first offset of `topic`[`partition`] not folded yet (0: nothing folded)."""
        with self._lock:
            row = self._db.execute("SELECT next_offset FROM folded WHERE topic = ? AND partition = ?",
                                   (topic, partition)).fetchone()  # fmt: skip
        return 0 if row is None else int(row[0])

    def head(self, topic: str, case_key: str) -> CaseHead | None:
        with self._lock:
            row = self._db.execute("SELECT head FROM heads WHERE topic = ? AND case_key = ?",
                                   (topic, case_key)).fetchone()  # fmt: skip
        return None if row is None else CaseHead.decode(row[0])

    def save(self, topic: str, heads: Mapping[str, CaseHead | None], folded: Folded | None = None) -> bool:
        """Stores `heads` (None: the case's head is gone) and, with them, how far a partition was folded.

        With `folded`, only if the partition's folded offset is still the one the fold started from:
        another process on the file that folded it meanwhile wins, and False tells the caller to
        fold again from where that one stopped.
        """
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
                    self._db.execute("DELETE FROM heads WHERE topic = ? AND case_key = ?", (topic, case_key))
                else:
                    self._db.execute("INSERT OR REPLACE INTO heads VALUES (?, ?, ?)", (topic, case_key, head.encode()))
        return True

    def forget(self, topic: str, case_key: str) -> None:
        """Drops a case's head (the case was erased)."""
        self.save(topic, {case_key: None})

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)

    def close(self) -> None:
        with self._lock:
            self._db.close()


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error): another process on the file waits, never interleaves."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        if kind is not None:
            self._db.execute("ROLLBACK")
            return
        try:
            self._db.execute("COMMIT")
        except sqlite3.Error:
            self._db.execute("ROLLBACK")  # else the connection stays inside the transaction for good
            raise
