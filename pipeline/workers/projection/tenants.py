"""Tenancy by topic: each tenant's own topics and readers, opened on its first trigger and kept while in use.

A worker subscribed to every tenant's triggers topic (a pattern) reads a trigger's case from its
tenant's events topic, with its tenant's case keys, and answers on its tenant's output topics. A
tenant's readers hold consumers (threads and connections each), so only the most recently used
`keep` tenants keep theirs open; a tenant seen again later opens them again (a stateless worker
loses nothing: every reader starts from the log).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from cachetools import LRUCache

from pipeline.workers.projection.handler import CaseTopics

Opened = tuple[CaseTopics, Callable[[], None]]  # a tenant's topics and readers, and what closes them
KEEP_OPEN = 64  # tenants whose readers stay open; far above the tenants of one batch (batch size 8 by default)


class _Closing(LRUCache[str, Opened]):
    def popitem(self) -> tuple[str, Opened]:
        tenant, opened = super().popitem()
        opened[1]()
        return tenant, opened


class TenantTopics:
    """`tenant -> CaseTopics`, opened by `open_tenant` on first use; the least recently used closed past `keep`."""

    def __init__(self, open_tenant: Callable[[str], Opened], keep: int = KEEP_OPEN) -> None:
        self._open_tenant = open_tenant
        self._open: _Closing = _Closing(maxsize=keep)
        self._lock = threading.Lock()

    def __call__(self, tenant: str) -> CaseTopics:
        with self._lock:
            opened = self._open.get(tenant)
            if opened is None:
                opened = self._open[tenant] = self._open_tenant(tenant)
            return opened[0]

    def close(self) -> None:
        with self._lock:
            while self._open:
                self._open.popitem()
