"""The SQLite files of a process's local state stores (case heads, the lookup index): how they are named and opened.

Each is a store in the manner of Kafka Streams' state stores: kept from a topic that serves as its
changelog, shared by the processes of one host, and named by the topic's id, so a topic deleted and
made again under its name gets a file of its own.
"""

from __future__ import annotations

import functools
import logging
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from pipeline.kafka.errors import KafkaAdapterError


def store_file(directory: Path, topic: str, topic_id: str, kind: str) -> Path:
    """`<topic>-<id>.<kind>.sqlite`, the id as Kafka spells it (URL-safe base64).

    librdkafka's spelling of an id has `/` and `+`, and a `/` in the name made a directory of part of it.
    """
    return directory / f"{topic}-{topic_id.replace('+', '-').replace('/', '_')}.{kind}.sqlite"


def open_store(path: Path, schema: str) -> sqlite3.Connection:
    """The store file at `path` in WAL mode (readers never wait for the writer), its tables made if new.

    Autocommit (`isolation_level=None`): every store runs its own BEGIN / COMMIT. Synchronous NORMAL:
    durable at checkpoints; a tail lost in a power cut is read again from the changelog, since the
    offsets read are stored in the same transaction as what they added.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.executescript(schema)
    return db


_LOG = logging.getLogger("pipeline.kafka.local_stores")
_Store = TypeVar("_Store", bound="RebuildableStore")
_P = ParamSpec("_P")
_R = TypeVar("_R")


class LocalStoreError(KafkaAdapterError):
    """A store file of this host could not be used (busy past the timeout, read-only, closed, a disk error)."""


class StoreRebuiltError(LocalStoreError):
    """The store file was found damaged and started anew: what was being written must be read again."""


def _damage(exc: sqlite3.Error) -> bool:
    """Whether SQLite says the file itself is bad ("file is not a database", "disk image is malformed").

    Only the base DatabaseError: its subclasses are busy or locked files (OperationalError), a closed
    connection or a wrong statement (ProgrammingError, InterfaceError), broken constraints: not the file.
    """
    return type(exc) is sqlite3.DatabaseError


class RebuildableStore:
    """A store file that is only a cache of its changelog: a damaged one is set aside and started anew.

    Set aside, not deleted (`<file>.corrupt`, for whoever wants to look), with a warning that says so;
    the new file holds no offsets, so the next catch-up reads the changelog from the start. Another
    process on the file meets the same damage: it finds the file already replaced and opens the new
    one, never moving that aside. Any other SQLite error is a LocalStoreError.
    """

    def __init__(self, path: Path, schema: str) -> None:
        self.path, self._schema = path, schema
        self._lock = threading.Lock()
        try:
            self._db, self._inode = self._connected()
        except sqlite3.Error as exc:
            if not _damage(exc):
                raise LocalStoreError(f"the store file {path} cannot be opened: {exc}") from exc
            self._move_aside(exc, None)
            self._db, self._inode = self._connected()

    def _connected(self) -> tuple[sqlite3.Connection, int]:
        db = open_store(self.path, self._schema)
        self._prepare(db)
        db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # reads the schema: a file that is none fails
        return db, self.path.stat().st_ino

    def _prepare(self, db: sqlite3.Connection) -> None:
        """Readies a new connection (SQL functions a store's statements use)."""

    def _move_aside(self, exc: BaseException, inode: int | None) -> None:
        """Moves the damaged file aside, unless it is no longer the one this store opened (`inode`)."""
        try:
            if inode is not None and self.path.stat().st_ino != inode:
                return  # another process moved it aside already and started the new one
        except FileNotFoundError:
            return
        aside = Path(f"{self.path}.corrupt")
        _LOG.warning("the store file %s cannot be read (%s): moved to %s; it is rebuilt from its topics",
                     self.path, exc, aside)  # fmt: skip
        for suffix in ("", "-wal", "-shm"):
            source = Path(f"{self.path}{suffix}")
            if source.exists():
                source.replace(Path(f"{aside}{suffix}"))

    def _start_anew(self, exc: BaseException) -> None:
        with self._lock:
            self._db.close()
            self._move_aside(exc, self._inode)
            self._db, self._inode = self._connected()

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _started_anew_on_damage(store: RebuildableStore, exc: sqlite3.Error, doing: str) -> None:
    """Starts a damaged store file anew; any other SQLite error is raised as a LocalStoreError."""
    if not _damage(exc):
        raise LocalStoreError(f"the store file {store.path} could not be {doing}: {exc}") from exc
    store._start_anew(exc)


def rebuilt_on_damage(method: Callable[Concatenate[_Store, _P], _R]) -> Callable[Concatenate[_Store, _P], _R]:
    """A store method that reads: on a damaged file it starts the file anew and runs once more (on the empty file).

    Any other SQLite error is raised as a LocalStoreError.
    """

    @functools.wraps(method)
    def run(store: _Store, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(store, *args, **kwargs)
        except sqlite3.Error as exc:
            _started_anew_on_damage(store, exc, "used")
        try:
            return method(store, *args, **kwargs)
        except sqlite3.Error as exc:
            raise LocalStoreError(f"the store file {store.path} could not be used: {exc}") from exc

    return run


def written_or_rebuilt(method: Callable[Concatenate[_Store, _P], _R]) -> Callable[Concatenate[_Store, _P], _R]:
    """A store method that writes what was read from the changelog with the offsets read to: never run twice.

    On a damaged file it starts the file anew and raises StoreRebuiltError: the rows in hand are a
    part of what the new file needs, and its offsets must say it holds nothing, so the caller reads
    the changelog again from where the new file says (the start). Any other SQLite error is a
    LocalStoreError.
    """

    @functools.wraps(method)
    def run(store: _Store, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(store, *args, **kwargs)
        except sqlite3.Error as exc:
            _started_anew_on_damage(store, exc, "written")
            raise StoreRebuiltError(f"the store file {store.path} was damaged and started anew") from exc

    return run
