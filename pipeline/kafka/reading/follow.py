"""Follows a topic: each call reads the committed records written since the last one (no consumer group)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping

from confluent_kafka import Consumer, KafkaException

from pipeline.core.event_log import RawRecord
from pipeline.kafka.cluster.admin import reader_group, topic_partitions
from pipeline.kafka.errors import KafkaAdapterError
from pipeline.kafka.reading.range_reads import closed_quietly, latest_offsets, read_ranges

_LOG = logging.getLogger("pipeline.kafka.librdkafka")
_METADATA_TIMEOUT_S = 10.0


class TopicFollower:
    """Reads a topic on from where it stopped, partition by partition, read_committed.

    A partition is read up to the end it had when asked, which for a read_committed consumer is the
    last stable offset: records of a transaction still open lie beyond it and come with a later call
    (`tests/integration/test_topic_follower.py`).
    """

    def __init__(self, client_config: dict[str, str], topic: str, start: Mapping[int, int] | None = None,
                 partitions: int | None = None) -> None:  # fmt: skip
        """Follows `topic` from `start` (partition -> first offset to read; the log's start for any other).

        `partitions`: the topic's partition count where the caller knows it (else asked on first use).
        """
        self.topic = topic
        self._config = client_config
        self._consumer: Consumer | None = None  # made on first use: a follower with nothing to read connects never
        self._next: dict[int, int] = dict(start or {})
        self._partitions = partitions

    def _connected(self) -> Consumer:
        """The follower's consumer, made on first use; its topic's metadata asked by name as it is made.

        Asked by name: a fresh consumer's first ListOffsets otherwise waited for librdkafka's own
        lookup of the topic, which it makes at most once a second (up to 0.7 s measured).
        """
        if self._consumer is None:
            consumer = Consumer(
                {**self._config, "group.id": reader_group("follow"), "enable.auto.commit": False,
                 "isolation.level": "read_committed", "enable.partition.eof": True, "fetch.wait.max.ms": 5,
                 "auto.offset.reset": "earliest"},  # from the log's start even if it no longer starts at 0
                logger=_LOG,
            )  # fmt: skip
            try:
                consumer.list_topics(self.topic, timeout=_METADATA_TIMEOUT_S)
            except KafkaException:
                consumer.close()
                raise
            self._consumer = consumer
        return self._consumer

    def _forget_consumer(self) -> None:
        """Drops a consumer whose request failed: the next call asks the cluster afresh (see range_reads.renewed)."""
        if self._consumer is not None:
            closed_quietly(self._consumer)
            self._consumer = None

    def partition_count(self) -> int:
        if self._partitions is None:
            self._partitions = topic_partitions(self._config, self.topic)
        return self._partitions

    def ends(self) -> dict[int, int]:
        """Every partition's end: its last stable offset (read_committed), all asked in one ListOffsets request.

        Asked through the consumer, whose leader metadata is refreshed as soon as a broker is lost; an
        AdminClient kept asking the dead leader, 10 s a time, until its metadata aged out. A
        read_committed consumer's "latest" offset is the last stable one, as its high watermark is.
        """
        return latest_offsets(self._connected(), self.topic, range(self.partition_count()))

    def skip_to(self, positions: Mapping[int, int]) -> None:
        """Goes on from `positions` where they are past this follower's own (what another reader has handled)."""
        for partition, offset in positions.items():
            if offset > self._next.get(partition, 0):
                self._next[partition] = offset

    def start_over(self, positions: Mapping[int, int]) -> None:
        """Goes on from exactly `positions` (the log's start for any other partition), earlier ones included."""
        self._next = dict(positions)

    def positions(self) -> dict[int, int]:
        """The first offset not read yet of each partition read so far (what `start` takes to go on from here)."""
        return dict(self._next)

    def new_records(self, ends: Mapping[int, int] | None = None) -> Iterator[RawRecord]:
        """The committed records written since the last call (all of them on the first).

        Up to `ends` (from an earlier `ends()`) when given: what came after is left for a later call.
        """
        try:
            ends = self.ends() if ends is None else ends
            behind = {p: (self._next.get(p, 0), high - 1) for p, high in ends.items() if self._next.get(p, 0) < high}
            if behind:
                for raw in read_ranges(self._connected(), self.topic, behind, timeout_s=10):
                    self._next[raw.position.partition] = raw.position.offset + 1
                    yield raw
            for partition in behind:
                self._next[partition] = ends[partition]  # past the transaction markers that ended the read
        except KafkaException as exc:
            self._forget_consumer()
            raise KafkaAdapterError(f"reading {self.topic} failed: {exc}") from exc

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
