"""Copying a generation of the case-partitioned topics into the next (services/growth.py), and what a growth checks.

A case's records all come from one partition of the source and go to one partition of the target
(its case's there), copied in offset order by one idempotent producer: the case's order holds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from pipeline.core.event_log import RawRecord
from pipeline.kafka.cluster.admin import admin_client, reader_group
from pipeline.kafka.cluster.partitioning import key_partition
from pipeline.kafka.errors import KafkaAdapterError
from pipeline.kafka.reading.range_reads import read_topic

Progress = Callable[[str], None]
_LIB_LOG = logging.getLogger("pipeline.kafka.librdkafka")


def end_offsets(config: dict[str, str], topic: str, partitions: int) -> dict[int, int]:
    """Each partition's end offset (high watermark)."""
    # Its library lines go to logging (dropped unless configured), never to the terminal: a consumer
    # closed while it still looked its group coordinator up logs a SASL "transport failure" on a
    # secured cluster, which is noise after a growth that succeeded.
    consumer = Consumer({**config, "group.id": reader_group("growth"), "enable.auto.commit": False},
                        logger=_LIB_LOG)  # fmt: skip
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    except KafkaException as exc:
        raise KafkaAdapterError(f"reading the end offsets of {topic} failed: {exc.args[0]}") from exc
    finally:
        consumer.close()


def undecided(config: dict[str, str], triggers: str, partitions: int, groups: Iterable[str]) -> dict[str, int]:
    """How many triggers each group has not committed yet (a group that never ran on `triggers` is left out)."""
    ends = end_offsets(config, triggers, partitions)
    admin = admin_client(config)
    pending = {}
    for group in groups:
        request = [ConsumerGroupTopicPartitions(group, [TopicPartition(triggers, p) for p in ends])]
        try:
            result = admin.list_consumer_group_offsets(request)[group].result(timeout=10)
        except KafkaException as exc:
            raise KafkaAdapterError(f"reading the offsets of group {group} failed: {exc.args[0]}") from exc
        committed = {tp.partition: tp.offset for tp in result.topic_partitions}
        if all(offset < 0 for offset in committed.values()):
            continue  # the group never ran on these topics
        pending[group] = sum(max(0, end - max(0, committed.get(p, -1))) for p, end in ends.items())
    return pending


def copy_by_case(config: dict[str, str], source: str, target: str, partitions: int, progress: Progress) -> int:
    """Copies every record of `source` to `target` in offset order, each to its case's partition there.

    Keys, values (tombstones too, so compaction keeps the same latest record per key), headers and
    timestamps are kept. One idempotent producer: records of one partition arrive in order.
    Returns how many records with a value were copied.
    """
    producer = Producer({**config, "enable.idempotence": True, "acks": "all", "linger.ms": 20,
                         "compression.type": "lz4"})  # fmt: skip
    failures: list[str] = []
    live = total = 0

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failures.append(err.str())

    try:
        for record in read_topic(config, source):
            _produce(producer, target, record, key_partition(record.key, record.position.partition, partitions),
                     delivered)  # fmt: skip
            total += 1
            live += record.value is not None
            if total % 10_000 == 0:
                progress(f"  {source}: {total} records copied")
        remaining = producer.flush(120)
    except (KafkaException, BufferError) as exc:
        raise KafkaAdapterError(f"copying {source} to {target} failed: {exc}") from exc
    if failures or remaining:
        why = failures[0] if failures else f"{remaining} record(s) not delivered"
        raise KafkaAdapterError(f"copying {source} to {target} failed: {why}")
    ends = end_offsets(config, target, partitions)
    if sum(ends.values()) != total:
        raise KafkaAdapterError(f"{target} holds {sum(ends.values())} records after copying {total} from {source}")
    return live


def _produce(producer: Producer, topic: str, record: RawRecord, partition: int,
             delivered: Callable[[KafkaError | None, Message], None]) -> None:  # fmt: skip
    while True:
        try:
            producer.produce(topic, key=record.key, value=record.value, partition=partition,
                             headers=list(record.headers), timestamp=record.timestamp_ms or 0,
                             on_delivery=delivered)  # fmt: skip
        except BufferError:  # the local queue is full: let deliveries drain it
            producer.poll(0.5)
        else:
            return
