"""Case keys over a key topic: seal and open content, erase a case or a tenant, rotate a tenant's KEK."""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pipeline.core.events import CaseRef
from pipeline.keys.envelope import DataKey
from pipeline.keys.ring import KeyRing
from pipeline.wire.key import KeyErased, KeyValue
from pipeline.wire.sealing import CaseErasedError


class KeyTopic(Protocol):
    """Where wrapped data keys live (the compacted `dpm.keys` topic, or memory in unit tests)."""

    def publish(self, records: Sequence[tuple[CaseRef, KeyValue | None]]) -> None:
        """Writes each case's key record, erased marker or tombstone (None), in order; waits until all are stored."""
        ...

    def sync(self, ring: KeyRing) -> None:
        """Applies to `ring` every record published so far that it has not seen (of the cases it holds)."""
        ...

    def load(self, ring: KeyRing, cases: Iterable[CaseRef]) -> None:
        """Applies the cases' latest records to `ring`, if a topic that follows every case did not already."""
        ...

    def load_tenant(self, ring: KeyRing, tenant: str) -> None:
        """Applies every case of the tenant to `ring` (rotation and a tenant's erasure act on all of them)."""
        ...

    def close(self) -> None: ...


# Rewrapping passes of one rotation: each wraps what an earlier pass did not see (keys published
# meanwhile); the first pass normally finds everything.
_ROTATION_PASSES = 5


@dataclass(frozen=True)
class Rotation:
    tenant: str
    kek_id: str
    rewrapped: int
    retired: tuple[str, ...]


class CaseKeys:
    """The CaseCipher of the pipeline: one data key per (tenant, case), created on first seal.

    Thread-safe: every operation holds one lock (the auditor's pages open records from many threads).
    """

    def __init__(self, ring: KeyRing, topic: KeyTopic) -> None:
        self.ring, self.topic = ring, topic
        self._lock = threading.RLock()

    def sync(self) -> None:
        with self._lock:
            self.topic.sync(self.ring)

    def _current(self, case: CaseRef) -> DataKey:
        self.topic.load(self.ring, [case])
        key = self.ring.key(case)
        if key is not None:
            return key
        self.sync()
        key = self.ring.key(case)
        if key is not None:
            return key
        self._refuse_erased(case)
        fresh, record = self.ring.wrap_new(case)
        self.topic.publish([(case, record)])
        self.sync()
        self._refuse_erased(case)  # erased meanwhile: nothing is sealed under the key it destroyed
        # Two writers may create a key for a new case at once: both adopt the latest record read back.
        return self.ring.key(case) or fresh

    def prepare(self, cases: Iterable[CaseRef]) -> None:
        """Gives each case that has no data key one, published together; erased cases get none.

        A group commit's new cases wait for one write and one read of the key topic, not one each
        under this lock.
        """
        with self._lock:
            wanted = list(dict.fromkeys(cases))
            self.topic.load(self.ring, wanted)
            new = [case for case in wanted if self.ring.key(case) is None]
            if not new:
                return
            self.sync()
            new = [case for case in new if self.ring.key(case) is None and not self.ring.erased(case)]
            if not new:
                return
            records = [(case, self.ring.wrap_new(case)[1]) for case in new]
        # Written without the lock: other writers' groups write theirs meanwhile. Nothing is used until read
        # back, and as read back: a key another writer published last wins, as in _current.
        self.topic.publish(records)
        self.sync()

    def _refuse_erased(self, case: CaseRef) -> None:
        """CaseErasedError for an erased case: its marker stays the key's latest record (a new subject: a new case)."""
        if self.ring.erased(case):
            raise CaseErasedError.of(case, "it was erased and takes no new content")

    def seal(self, case: CaseRef, plaintext: bytes, aad: bytes) -> dict[str, str]:
        with self._lock:
            key = self._current(case)
        return key.seal(plaintext, aad)

    def open(self, case: CaseRef, sealed: Mapping[str, Any], aad: bytes) -> bytes:
        with self._lock:
            self.topic.load(self.ring, [case])
            try:
                return self.ring.open(case, sealed, aad)
            except CaseErasedError:
                self.sync()  # a key published since the last sync (a case opened by another process)
                return self.ring.open(case, sealed, aad)

    def erased(self, case: CaseRef) -> bool:
        with self._lock:
            self.topic.load(self.ring, [case])
            return self.ring.erased(case)

    def opens(self, case: CaseRef) -> bool:
        """Whether the case has a data key that opens: KeyRevokedError or KeyServiceUnavailableError when refused."""
        with self._lock:
            self.topic.load(self.ring, [case])
            return self.ring.key(case) is not None

    def knows(self, case: CaseRef) -> bool:
        """Whether the case has a live data key, as far as the last sync told."""
        with self._lock:
            self.topic.load(self.ring, [case])
            return self.ring.knows(case)

    def erase_case(self, case: CaseRef) -> bool:
        """Destroys the case's data key and remembers the erasure; False when it had no live key.

        On the key topic: a tombstone, then the erased marker (wire/key.py), whose keeping by
        compaction is what tells a process started after the tombstone is gone that the case was
        erased. Published again for a case erased already (the same records: nothing changes).
        """
        with self._lock:
            return self._erase_case(case)

    def _erase_case(self, case: CaseRef) -> bool:
        self.sync()
        self.topic.load(self.ring, [case])
        known = self.ring.knows(case)
        self._publish_erasure(case)
        self.sync()
        return known

    def _publish_erasure(self, case: CaseRef) -> None:
        # The tombstone first: a reader of a release before the marker acts on it and skips the marker.
        self.topic.publish([(case, None), (case, KeyErased(case, int(time.time() * 1000)))])

    def erase_tenant(self, tenant: str) -> tuple[CaseRef, ...]:
        """Destroys the tenant's KEK (every version) and erases its cases' keys as erase_case does; returns them."""
        with self._lock:
            return self._erase_tenant(tenant)

    def _erase_tenant(self, tenant: str) -> tuple[CaseRef, ...]:
        self.sync()
        self.topic.load_tenant(self.ring, tenant)
        cases = tuple(r.case for r in self.ring.records(tenant))
        self.ring.provider.destroy(tenant)
        for case in cases:
            self._publish_erasure(case)
        self.sync()
        return cases

    def rotate(self, tenant: str) -> Rotation:
        """A new KEK version; each data key of the tenant wrapped again; versions before the previous one destroyed.

        The previous version is kept, not destroyed: a writer that took it as current just before the
        rotation may publish a new case's data key under it afterwards, and destroying the version
        would strand that key. Rewrapping runs until a pass finds nothing left under an old version;
        the next rotation wraps any key that came later before it destroys the version.
        """
        with self._lock:
            return self._rotate(tenant)

    def _rotate(self, tenant: str) -> Rotation:
        provider = self.ring.provider
        kek_id = provider.rotate(tenant)
        rewrapped = 0
        for _ in range(_ROTATION_PASSES):
            self.sync()
            self.topic.load_tenant(self.ring, tenant)
            stale = [r for r in self.ring.records(tenant) if r.kek_id != kek_id]
            fresh = [r for r in (self.ring.rewrapped(rec) for rec in stale) if r is not None]
            if not fresh:
                break
            self.topic.publish([(record.case, record) for record in fresh])
            rewrapped += len(fresh)
        retired = tuple(provider.versions(tenant)[:-2])  # all but the current version and the one before it
        for old in retired:
            provider.retire(tenant, old)
        return Rotation(tenant, kek_id, rewrapped, retired)

    def close(self) -> None:
        self.topic.close()


class MemoryKeyTopic:
    """A key topic in memory, for unit tests and the in-process sealing benchmark."""

    def __init__(self) -> None:
        self._log: list[tuple[CaseRef, KeyValue | None]] = []
        # How far each ring has read; weakly held: a ring's id() is reused once it is gone, its place must not be
        self._seen: weakref.WeakKeyDictionary[KeyRing, int] = weakref.WeakKeyDictionary()

    def publish(self, records: Sequence[tuple[CaseRef, KeyValue | None]]) -> None:
        self._log.extend(records)

    def sync(self, ring: KeyRing) -> None:
        start = self._seen.get(ring, 0)
        for case, record in self._log[start:]:
            ring.apply(case, record)
        self._seen[ring] = len(self._log)

    def load(self, ring: KeyRing, cases: Iterable[CaseRef]) -> None:
        pass  # sync applies every case

    def load_tenant(self, ring: KeyRing, tenant: str) -> None:
        pass

    def close(self) -> None:
        pass


class TenantCaseKeys:
    """A CaseCipher over tenants' own key topics (tenancy by topic): each tenant's CaseKeys, opened on first use.

    `sync` marks every tenant's keys stale and each is read on at its next use, so a process that
    serves many tenants does not read every tenant's key topic for each record of one of them, and
    an erasure still takes effect from the next call.
    """

    def __init__(self, open_tenant: Callable[[str], CaseKeys]) -> None:
        self._open_tenant = open_tenant
        self._opened: dict[str, CaseKeys] = {}
        self._stale: set[str] = set()
        self._lock = threading.Lock()

    def _keys(self, tenant: str) -> CaseKeys:
        with self._lock:
            keys = self._opened.get(tenant)
            if keys is None:
                keys = self._opened[tenant] = self._open_tenant(tenant)
                keys.sync()
            elif tenant in self._stale:
                keys.sync()
            self._stale.discard(tenant)
            return keys

    def sync(self) -> None:
        with self._lock:
            self._stale = set(self._opened)

    def prepare(self, cases: Iterable[CaseRef]) -> None:
        by_tenant: dict[str, list[CaseRef]] = {}
        for case in cases:
            by_tenant.setdefault(case.tenant, []).append(case)
        for tenant, theirs in by_tenant.items():
            self._keys(tenant).prepare(theirs)

    def seal(self, case: CaseRef, plaintext: bytes, aad: bytes) -> dict[str, str]:
        return self._keys(case.tenant).seal(case, plaintext, aad)

    def open(self, case: CaseRef, sealed: Mapping[str, Any], aad: bytes) -> bytes:
        return self._keys(case.tenant).open(case, sealed, aad)

    def erased(self, case: CaseRef) -> bool:
        return self._keys(case.tenant).erased(case)

    def opens(self, case: CaseRef) -> bool:
        return self._keys(case.tenant).opens(case)

    def close(self) -> None:
        with self._lock:
            for keys in self._opened.values():
                keys.close()
            self._opened.clear()
