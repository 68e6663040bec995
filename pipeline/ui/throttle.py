"""Token guessing slowed down: a client that keeps presenting wrong tokens is refused for a while (429)."""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class _Record:
    failures: list[float] = field(default_factory=list)  # times of recent failures
    blocked_until: float = 0.0
    blocks: int = 0  # blocks so far: each lasts twice the one before


class Throttle:
    """Per client: after `limit` failures within `window_s`, refused for `block_s`, doubling each time (bounded).

    Failures age out of the window; a success does not forget them (a client holding one valid
    token must not reset its count while it guesses another's). Clients are kept least recently
    used first, at most `capacity` of them, so a flood of addresses cannot grow the memory.
    """

    def __init__(self, *, limit: int = 5, window_s: float = 60.0, block_s: float = 30.0, max_block_s: float = 900.0,
                 capacity: int = 100_000, clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self._limit, self._window_s, self._block_s, self._max_block_s = limit, window_s, block_s, max_block_s
        self._capacity, self._clock = capacity, clock
        self._clients: OrderedDict[str, _Record] = OrderedDict()
        self._lock = threading.Lock()

    def retry_after(self, client: str) -> int | None:
        """Seconds the client must wait before it may try again, or None when it may try now."""
        now = self._clock()
        with self._lock:
            record = self._clients.get(client)
            if record is None or record.blocked_until <= now:
                return None
            return max(1, math.ceil(record.blocked_until - now))

    def failed(self, client: str) -> None:
        """Counts one failure of the client (or, for a throttle of costly requests, one request)."""
        now = self._clock()
        with self._lock:
            record = self._clients.pop(client, None) or _Record()
            self._clients[client] = record
            while len(self._clients) > self._capacity:
                self._clients.popitem(last=False)
            record.failures = [t for t in record.failures if now - t < self._window_s] + [now]
            if len(record.failures) >= self._limit:
                record.blocked_until = now + min(self._max_block_s, self._block_s * 2**record.blocks)
                record.blocks += 1
                record.failures.clear()
