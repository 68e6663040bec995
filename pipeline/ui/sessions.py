"""Signed-in browsers: the cookie holds a random session id, never a token; sessions end, and expire."""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.ui.auth import Principal


@dataclass
class Session:
    """One signed-in browser: who it is, the token its forms carry against cross-site requests, its times."""

    principal: Principal
    csrf: str
    started: float
    seen: float


class Sessions:
    """Server-side sessions, thread-safe and bounded; a session ends at sign-out, when idle, or at its maximum age.

    Held in this process's memory: restarting `dpm ui` signs everyone out, and several replicas
    would each need their own sign-in (the pages are served by one replica).
    """

    def __init__(self, idle_s: float, max_s: float, *, capacity: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self._idle_s, self._max_s, self._capacity, self._clock = idle_s, max_s, capacity, clock
        self._open: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()

    def start(self, principal: Principal) -> tuple[str, Session]:
        """A new session for `principal`; returns its id (the cookie's value) and the session."""
        now = self._clock()
        session_id = secrets.token_urlsafe(32)
        session = Session(principal, secrets.token_urlsafe(32), now, now)
        with self._lock:
            self._open[session_id] = session
            while len(self._open) > self._capacity:
                self._open.popitem(last=False)  # the least recently used goes first
        return session_id, session

    def get(self, session_id: str | None) -> Session | None:
        """The live session of this id (its idle clock restarted), or None: unknown, ended or expired."""
        if not session_id:
            return None
        now = self._clock()
        with self._lock:
            session = self._open.get(session_id)
            if session is None:
                return None
            if now - session.seen > self._idle_s or now - session.started > self._max_s:
                del self._open[session_id]
                return None
            session.seen = now
            self._open.move_to_end(session_id)
            return session

    def end(self, session_id: str | None) -> None:
        with self._lock:
            self._open.pop(session_id or "", None)

    def __len__(self) -> int:
        return len(self._open)
