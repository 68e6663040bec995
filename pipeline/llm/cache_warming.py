"""Calls that would write the same prompt-cache entry go one after another: the first writes, the rest read.

A provider's cache entry exists only once the call that writes it has been answered, so several
decisions of one case made at once (other tasks, other budgets, both in one batch of the worker)
would each pay the log in full, and a write's premium besides. Here the first call of a cached
prefix goes ahead, and calls of the same prefix wait for it (at most `max_wait_s`) before they are
sent; once it is answered, calls of that prefix go at once for as long as a cache entry lives.
Only hosted backends are wrapped; the answers are the same bytes either way.
"""

from __future__ import annotations

import threading
import time

from pipeline.core.hashing import sha256_hex
from pipeline.core.model import ModelBackend, ModelRequest, ModelResponse, WrappedBackend
from pipeline.core.prompt import cached_prefix

CACHE_LIFETIME_S = 300.0  # the shortest a provider keeps an entry unused (Anthropic's default: five minutes)


class CacheWarmingBackend(WrappedBackend):
    """`inner`, sending a call whose cached prefix another call is writing only once that call is answered."""

    def __init__(self, inner: ModelBackend, max_wait_s: float) -> None:
        super().__init__(inner)
        self._max_wait_s = max_wait_s
        self._lock = threading.Lock()
        self._writing: dict[str, threading.Event] = {}  # digest of a cached prefix -> set once its writer is answered
        self._answered: dict[str, float] = {}  # digest of a cached prefix -> when a call of it was last answered

    def complete(self, request: ModelRequest) -> ModelResponse:
        prefix = cached_prefix(request.prompt)
        if prefix is None:
            return self._inner.complete(request)
        key = sha256_hex(f"{request.system}\x00{prefix}".encode())
        writing, mine = self._turn(key)
        if mine is None:
            if writing is not None:
                writing.wait(self._max_wait_s)  # answered, failed or slow: this call goes ahead either way
            response = self._inner.complete(request)
        else:
            try:
                response = self._inner.complete(request)
            finally:
                with self._lock:
                    del self._writing[key]
                mine.set()
        with self._lock:
            self._answered[key] = time.monotonic()  # a read keeps the entry alive as a write does
        return response

    def _turn(self, key: str) -> tuple[threading.Event | None, threading.Event | None]:
        """(the writer to wait for, or None) and (this call's own event when it is the writer, or None)."""
        with self._lock:
            now = time.monotonic()
            self._answered = {k: at for k, at in self._answered.items() if now - at < CACHE_LIFETIME_S}
            if key in self._answered:
                return None, None  # written already: this call reads it
            writing = self._writing.get(key)
            if writing is not None:
                return writing, None
            mine = self._writing[key] = threading.Event()
            return None, mine
