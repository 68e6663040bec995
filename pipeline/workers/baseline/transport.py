"""faust's aiokafka transport reading committed records only: the baseline's brokers are `dpm://` URLs.

Registered as a faust transport in pyproject.toml (entry point group `faust.transports`). Agents
append through transactions (pipeline/kafka/writing/case_writer.py): a batch left open by a writer that
died, or aborted because another writer of the case fenced it, must never be folded. faust reads
committed records only under its exactly-once guarantee, which would also have it publish through
transactions of its own; the baseline publishes through its own (kafka/processing/once.py), so only the
consumer's isolation level changes.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP, Message

SCHEME = "dpm"  # the broker URLs' scheme that selects this transport
READ_COMMITTED = "read_committed"
_LOG = logging.getLogger(__name__)


class _CommittedConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:  # noqa: ANN401 - faust's Transport, aiokafka's consumer
        consumer = super()._create_worker_consumer(transport)
        consumer._isolation_level = READ_COMMITTED  # aiokafka reads it when the consumer starts
        return consumer


class CommittedConsumer(faust_aiokafka.Consumer):
    """Notes the partitions whose fetched records faust dropped without handing them over (`dropped`).

    faust's `getmany` hands a fetched batch over record by record and stops, or skips a partition,
    when the flow stops, the generation changes or the partition is paused meanwhile; the client's
    fetch position has moved past those records all the same, so they are fetched again only once
    something seeks the partition back (the baseline reads such a partition again, see app.py).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # noqa: ANN401 - faust's own arguments, passed on
        super().__init__(*args, **kwargs)
        self.dropped: dict[TP, int] = {}  # tp -> the generation records of it were dropped in, until read again
        self._fetched: Mapping[TP, list[Any]] = {}  # the batch `getmany` is handing over (aiokafka's records)
        self._fetched_in = 0  # the group generation the batch arrived in (faust stamps its messages so)

    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return _CommittedConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def _getmany(self, active_partitions: set[TP] | None, timeout: float) -> Mapping[TP, list[Any]]:
        self._fetched = await super()._getmany(active_partitions, timeout)
        self._fetched_in = self.app.consumer_generation_id
        return self._fetched

    async def getmany(self, timeout: float) -> AsyncIterator[tuple[TP, Message]]:
        self._fetched = {}
        handed: dict[TP, set[int]] = {}
        try:
            async for tp, message in super().getmany(timeout):
                handed.setdefault(tp, set()).add(message.offset)
                yield tp, message
        finally:
            self._note_dropped(handed)

    def _note_dropped(self, handed: dict[TP, set[int]]) -> None:
        """Notes, per partition of the batch, the first fetched record not handed over (if any)."""
        generation = self._fetched_in
        for tp, first in dropped_from(self._fetched, handed).items():
            _LOG.debug("faust dropped fetched records of %s[%d] from offset %d (generation %s, now %s, flow active: "
                       "%s)", tp.topic, tp.partition, first, generation, self.app.consumer_generation_id,
                       self.flow_active)  # fmt: skip
            self.dropped[tp] = generation
        self._fetched = {}

    async def _seek(self, partition: TP, offset: int) -> None:
        """The client's seek, run on the consumer's own thread (faust's `seek` sets the read offset after it).

        faust runs it on the event loop's thread, where it deletes the fetcher's buffered records of the
        partition while the consumer's thread may be walking them: a KeyError that stopped the member
        (seen on Kafka 4.4.0). Every seek goes through here: the baseline's and faust's own (recovery).
        """
        thread = self._thread
        client = thread._ensure_consumer()

        async def seek() -> None:  # on the consumer thread's loop
            client.seek(partition, offset)

        await thread.call_thread(seek)


def dropped_from(fetched: Mapping[TP, Sequence[Any]], handed: Mapping[TP, set[int]]) -> dict[TP, int]:
    """Per partition of a fetched batch, the offset of its first record not handed over (none: left out)."""
    dropped = {}
    for tp, records in fetched.items():
        offsets = handed.get(tp, set())
        first = next((r.offset for r in records if r.offset not in offsets), None)
        if first is not None:
            dropped[tp] = first
    return dropped


class Transport(faust_aiokafka.Transport):
    """aiokafka's transport whose group consumer reads committed records only."""

    Consumer = CommittedConsumer
