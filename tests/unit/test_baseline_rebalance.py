"""The baseline's bookkeeping across rebalances, without a broker: stored state, and how long a trigger waits."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import pytest
from faust.types import TP

from pipeline.core.events import CaseRef
from pipeline.workers.baseline.deciding import Deciding
from pipeline.workers.baseline.durable import collect_writes, delivered

_WAIT_S = 60.0


def test_each_handling_waits_for_its_own_changelog_writes_only() -> None:
    async def scenario() -> tuple[list[str], list[int]]:
        done: list[str] = []
        sizes: list[int] = []

        async def handling(name: str, sent: asyncio.Future[Any]) -> None:
            writes = collect_writes()
            writes.append(sent)  # what DurableTable.send_changelog does for each table write
            sizes.append(len(writes))
            await delivered(writes)
            done.append(name)

        loop = asyncio.get_running_loop()
        first, second = loop.create_future(), loop.create_future()
        tasks = [asyncio.create_task(handling("first", first)), asyncio.create_task(handling("second", second))]
        await asyncio.sleep(0)
        second.set_result(None)  # the second record's state is stored: it may be acknowledged
        await asyncio.sleep(0.01)
        assert done == ["second"]  # the first still waits for its own write, not for the other's
        first.set_result(None)
        await asyncio.gather(*tasks)
        return done, sizes

    done, sizes = asyncio.run(scenario())
    assert done == ["second", "first"]
    assert sizes == [1, 1]


def test_a_write_that_fails_is_raised_so_its_record_is_not_acknowledged() -> None:
    async def scenario() -> None:
        sent = asyncio.get_running_loop().create_future()
        sent.set_exception(RuntimeError("changelog refused"))
        await delivered([sent])

    with pytest.raises(RuntimeError, match="changelog refused"):
        asyncio.run(scenario())


@dataclass
class _Host:
    """What Deciding asks of the baseline while a trigger waits for its events."""

    end: int | None
    position: int | None
    idle_s: float
    options: Any = field(default_factory=lambda: SimpleNamespace(trigger_wait_s=_WAIT_S))

    def events_of(self, _case: CaseRef) -> TP:
        return TP("t.events", 0)

    async def events_end(self, _events: TP) -> int | None:
        return self.end

    async def events_position(self, _events: TP) -> int | None:
        return self.position

    def idle_for(self, _topic: str, _partition: int) -> float:
        return self.idle_s


def _arriving(host: _Host, last: int | None) -> bool:
    deciding = Deciding(cast(Any, host), None, seal=False)
    return asyncio.run(deciding._still_arriving(CaseRef("acme", "c1"), last))


def test_a_trigger_waits_while_its_events_exist_and_the_partition_makes_progress() -> None:
    assert _arriving(_Host(end=50, position=10, idle_s=math.inf), last=30)  # not fetched yet
    assert _arriving(_Host(end=50, position=40, idle_s=1.0), last=30)  # fetched, queued behind a backlog
    assert _arriving(_Host(end=None, position=None, idle_s=math.inf), last=30)  # Kafka away: unknown


def test_a_trigger_stops_waiting_for_events_never_written_or_a_stalled_partition() -> None:
    assert not _arriving(_Host(end=20, position=20, idle_s=0.0), last=30)  # offset 30 was never written
    assert not _arriving(_Host(end=50, position=40, idle_s=_WAIT_S + 1), last=30)  # nothing finished for too long
    assert not _arriving(_Host(end=50, position=40, idle_s=0.0), last=None)  # the trigger names no position
    assert not _arriving(_Host(end=50, position=None, idle_s=0.0), last=30)  # the partition is not this member's
