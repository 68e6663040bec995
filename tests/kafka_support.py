"""Test helpers for the real-broker tiers: unique topics, and every record of a topic as stored."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

from confluent_kafka import Consumer, KafkaError, TopicPartition

from pipeline.core.event_log import RawRecord
from pipeline.kafka.reading.range_reads import raw_record


def unique_prefix(label: str = "t") -> str:
    """A topic prefix no other test uses, so tests never see each other's records."""
    return f"{label}-{uuid.uuid4().hex[:10]}"


def every_record(config: dict[str, str], topic: str, *, committed_only: bool = True) -> Iterator[RawRecord]:
    """Every record of `topic` from the start of each partition, read with a plain consumer.

    With `committed_only` False, records of open and aborted transactions are read too (read_uncommitted).
    """
    isolation = "read_committed" if committed_only else "read_uncommitted"
    consumer = Consumer({**config, "group.id": f"scan-{uuid.uuid4().hex}", "enable.partition.eof": True,
                         "isolation.level": isolation, "enable.auto.commit": False})  # fmt: skip
    try:
        for partition in consumer.list_topics(topic, timeout=10).topics[topic].partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, partition, low)])
            while True:
                msg = consumer.poll(10)
                assert msg is not None, f"timed out reading {topic}[{partition}]"
                error = msg.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    break
                assert error is None, error
                yield raw_record(msg)
    finally:
        consumer.close()
