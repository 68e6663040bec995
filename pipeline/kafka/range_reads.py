"""Reads whole topics to their current end (read_committed): output inspection, compare and replay."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from pipeline.core.event_log import RawRecord
from pipeline.core.events import LogPosition
from pipeline.kafka.errors import KafkaAdapterError

_LOG = logging.getLogger("pipeline.kafka.librdkafka")


def read_topic(client_config: dict[str, str], topic: str, timeout_s: float = 30.0) -> Iterator[RawRecord]:
    """Every committed record of `topic` up to the end it had when called, partition by partition."""
    consumer = Consumer(
        {**client_config, "group.id": f"dpm-dump-{uuid.uuid4().hex}", "enable.auto.commit": False,
         "isolation.level": "read_committed", "enable.partition.eof": True, "fetch.wait.max.ms": 5},
        logger=_LOG,
    )  # fmt: skip
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            raise KafkaAdapterError(f"topic {topic} does not exist")
        for partition in sorted(found.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            if high > low:
                yield from read_range(consumer, topic, partition, low, last=high - 1, timeout_s=timeout_s)
    except KafkaException as exc:
        raise KafkaAdapterError(f"reading {topic} failed: {exc}") from exc
    finally:
        consumer.close()


def read_range(
    consumer: Consumer, topic: str, partition: int, first: int, *, last: int, timeout_s: float
) -> Iterator[RawRecord]:
    """Records of one partition from offset `first` through `last`, or to the partition's end if sooner.

    The partition is unassigned afterwards: an assigned partition is fetched in the background every
    fetch.wait.max.ms until it is unassigned, which between reads is CPU for nothing in the reader
    and in the broker.
    """
    consumer.assign([TopicPartition(topic, partition, first)])
    try:
        while True:
            msg = consumer.poll(timeout_s)
            if msg is None:
                raise KafkaAdapterError(f"timed out reading {topic}[{partition}] from offset {first}")
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return
                raise KafkaAdapterError(f"reading {topic}[{partition}] failed: {error.str()}")
            offset = msg.offset() or 0
            yield RawRecord(LogPosition(partition, offset), msg.key(), msg.value(), msg.timestamp()[1])
            if offset >= last:
                return
    finally:
        try:
            consumer.unassign()
        except (KafkaException, RuntimeError) as exc:  # RuntimeError: the consumer was closed first
            _LOG.debug("unassign after reading %s[%d] failed: %s", topic, partition, exc)
