"""faust's aiokafka transport reading committed records only: the baseline's brokers are `dpm://` URLs.

Registered as a faust transport in pyproject.toml (entry point group `faust.transports`). Agents
append through transactions (pipeline/kafka/case_writer.py): a batch left open by a writer that
died, or aborted because another writer of the case fenced it, must never be folded. faust reads
committed records only under its exactly-once guarantee, which would also have it publish through
transactions of its own; the baseline publishes through its own (kafka/once.py), so only the
consumer's isolation level changes.
"""

from __future__ import annotations

from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka

SCHEME = "dpm"  # the broker URLs' scheme that selects this transport
READ_COMMITTED = "read_committed"


class _CommittedConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:  # noqa: ANN401 - faust's Transport, aiokafka's consumer
        consumer = super()._create_worker_consumer(transport)
        consumer._isolation_level = READ_COMMITTED  # aiokafka reads it when the consumer starts
        return consumer


class _CommittedConsumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return _CommittedConsumerThread(self, loop=self.loop, beacon=self.beacon)


class Transport(faust_aiokafka.Transport):
    """aiokafka's transport whose group consumer reads committed records only."""

    Consumer = _CommittedConsumer
