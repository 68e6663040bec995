"""Table writes a record's handling waits for before the record is acknowledged.

faust commits a source offset after flushing its producer, but its buffer's flush gives up after
0.1 s without a send, so under load an offset can be committed before the changelog write of the
state it produced: a member killed then comes back without that state and finds the case's next
event out of sequence. A handling therefore collects the changelog writes it makes (a context
variable: each record is handled in its own task) and awaits their delivery before it acknowledges.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from typing import Any

import faust

_WRITES: ContextVar[list[asyncio.Future[Any]] | None] = ContextVar("summ_changelog_writes", default=None)


class DurableTable(faust.Table[Any, Any]):
    """A faust table whose changelog sends are handed to the handling that made them (see collect_writes)."""

    def send_changelog(self, *args: Any, **kwargs: Any) -> Any:  # noqa: ANN401 - faust's FutureMessage
        sent = super().send_changelog(*args, **kwargs)
        writes = _WRITES.get()
        if writes is not None:
            writes.append(sent)
        return sent


def collect_writes() -> list[asyncio.Future[Any]]:
    """Starts collecting, for the current task, the changelog writes its table updates make."""
    writes: list[asyncio.Future[Any]] = []
    _WRITES.set(writes)
    return writes


async def delivered(writes: list[asyncio.Future[Any]]) -> None:
    """Returns once the broker has every write in `writes`; raises the first write's failure."""
    if writes:
        await asyncio.gather(*writes)
