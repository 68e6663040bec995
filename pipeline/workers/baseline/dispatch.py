"""Runs a stream's records concurrently across cases and in order within each case.

The Summ-only baseline makes one model call per event; with a hosted model those calls, not the
CPU, bound its throughput. Records of different cases are independent, so they may run at once;
records of one case must not (each step rewrites the memory the previous step left).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

_LOG = logging.getLogger("pipeline.workers.baseline")


def ordering_key(key: bytes | None) -> bytes:
    """The case a record belongs to: the first two parts of `tenant/case[/seq]` (events and triggers alike)."""
    return b"/".join((key or b"").split(b"/")[:2])


class CaseOrdered:
    """Starts work as asyncio tasks: one case's work one after another, at most `pending` tasks at a time.

    `submit` waits while `pending` tasks are unfinished (including tasks waiting for an earlier
    one of their case), so a stream is never drained faster than its records are handled.
    """

    def __init__(self, pending: int) -> None:
        self._slots = asyncio.Semaphore(pending)
        self._tails: dict[bytes, asyncio.Task[None]] = {}
        self._running: set[asyncio.Task[None]] = set()

    async def submit(self, case: bytes, work: Callable[[], Awaitable[None]]) -> None:
        await self._slots.acquire()
        task = asyncio.create_task(self._after(self._tails.get(case), work))
        self._tails[case] = task
        self._running.add(task)
        task.add_done_callback(lambda done: self._finished(case, done))

    async def _after(self, previous: asyncio.Task[None] | None, work: Callable[[], Awaitable[None]]) -> None:
        try:
            if previous is not None:
                await asyncio.wait([previous])  # its failure is its own: this work still runs
            await work()
        finally:
            self._slots.release()

    def _finished(self, case: bytes, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if self._tails.get(case) is task:
            del self._tails[case]
        if not task.cancelled() and task.exception() is not None:  # the work's own handling failed too
            _LOG.error("work for %r failed; its record stays unacknowledged", case, exc_info=task.exception())

    async def drain(self) -> None:
        """Waits for every submitted task."""
        while self._running:
            await asyncio.wait(list(self._running))

    def cancel(self) -> None:
        """Cancels every unfinished task (their records stay unacknowledged: whoever owns them next redoes them)."""
        for task in self._running:
            task.cancel()
