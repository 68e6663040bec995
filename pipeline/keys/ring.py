"""The data keys a process knows, as the key topic told it: unwrapped on first use, forgotten on an erasure."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from cachetools import LRUCache, TTLCache

from pipeline.core.events import CaseRef
from pipeline.keys.envelope import DataKey, TamperedError
from pipeline.keys.providers import KeyDestroyedError, KeyProvider, WrappedKey
from pipeline.wire.key import KeyErased, KeyRecord, KeyValue
from pipeline.wire.rejection import RejectedError, Rejection
from pipeline.wire.sealing import CaseErasedError

# Unwrapped data keys kept (about 200 bytes each), and for how long: unwrapping is one call to the key
# provider, which for a KMS is a network round trip, so recently used keys stay; the rest, and any older
# than the time bound (a KEK revoked at the service stops serving within it), are unwrapped again.
# DPM_KEY_CACHE_SIZE and DPM_KEY_CACHE_TTL_S set them.
UNWRAPPED_KEYS = 10_000
UNWRAPPED_TTL_S = 300.0
# Erased cases remembered (about 150 bytes each), so a missing event can be told apart (erased, or
# superseded) and an erased case takes no new key. The key topic keeps every erased marker for good;
# a process keeps the last this many it read, and takes an erased case it no longer remembers for
# one it never knew.
ERASED_CASES = 100_000


class KeyRing:
    """Wrapped data keys by case and key id (a case has one, or more after concurrent first writes).

    Every case's wrapped records are kept (the key topic is compacted: one record per case, about
    400 bytes in memory); unwrapped keys and the erased cases are bounded (least recently used go).
    """

    def __init__(self, provider: KeyProvider, *, cache_size: int = UNWRAPPED_KEYS,
                 cache_ttl_s: float = UNWRAPPED_TTL_S) -> None:  # fmt: skip
        self.provider = provider
        self._records: dict[CaseRef, dict[str, KeyRecord]] = {}
        self._latest: dict[CaseRef, str] = {}
        self._secrets: TTLCache[tuple[CaseRef, str], DataKey] = TTLCache(maxsize=cache_size, ttl=cache_ttl_s)
        self._erased: LRUCache[CaseRef, None] = LRUCache(maxsize=ERASED_CASES)

    def apply(self, case: CaseRef, record: KeyValue | None) -> None:
        """One key-topic record: a wrapped key (kept beside earlier ones), or a tombstone or erased marker (forget)."""
        if record is None or isinstance(record, KeyErased):
            for kid in self._records.pop(case, {}):
                self._secrets.pop((case, kid), None)
            self._latest.pop(case, None)
            self._erased[case] = None
            return
        # A key after the erasure: written by a release that did not refuse erased cases; its records open.
        self._erased.pop(case, None)
        self._records.setdefault(case, {})[record.kid] = record
        self._latest[case] = record.kid
        self._secrets.pop((case, record.kid), None)  # re-wrapped (rotation): unwrap the new record next time

    def erased(self, case: CaseRef) -> bool:
        """Whether the key topic erased the case (and no new key came after), as far as remembered (ERASED_CASES)."""
        return case in self._erased

    def records(self, tenant: str | None = None) -> list[KeyRecord]:
        """The latest record of every case (of one tenant)."""
        return [self._records[c][kid] for c, kid in self._latest.items() if tenant is None or c.tenant == tenant]

    def knows(self, case: CaseRef) -> bool:
        return case in self._latest

    def key(self, case: CaseRef, kid: str | None = None) -> DataKey | None:
        """The case's data key `kid` (default: the latest), unwrapped; None when destroyed or unknown."""
        kid = kid or self._latest.get(case)
        record = self._records.get(case, {}).get(kid or "")
        if record is None or kid is None:
            return None
        cached = self._secrets.get((case, kid))
        if cached is None:
            try:
                secret = self.provider.unwrap(case, WrappedKey(record.kek_id, record.wrapped))
            except KeyDestroyedError:
                return None
            cached = self._secrets[(case, kid)] = DataKey(kid, secret)
        return cached

    def wrap_new(self, case: CaseRef) -> tuple[DataKey, KeyRecord]:
        """A fresh data key for `case` and its record to publish (not applied until read back)."""
        key = DataKey.generate()
        wrapped = self.provider.wrap(case, key.secret)
        return key, KeyRecord(case, key.kid, wrapped.kek_id, wrapped.blob, int(time.time() * 1000))

    def rewrapped(self, record: KeyRecord) -> KeyRecord | None:
        """The record wrapped again under the tenant's current KEK version; None when it no longer unwraps."""
        key = self.key(record.case, record.kid)
        if key is None:
            return None
        wrapped = self.provider.wrap(record.case, key.secret)
        return KeyRecord(record.case, record.kid, wrapped.kek_id, wrapped.blob, record.created_ms)

    def open(self, case: CaseRef, sealed: Mapping[str, Any], aad: bytes) -> bytes:
        """Opens with the key the record names; raises CaseErasedError or RejectedError(SCHEMA)."""
        key = self.key(case, str(sealed.get("kid", "")))
        if key is None:
            raise CaseErasedError.of(case)
        try:
            return key.open(sealed, aad)
        except TamperedError as exc:
            raise RejectedError(Rejection.SCHEMA, f"{case.key}: {exc}") from exc
