"""The producer and the offset reader against the real broker."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from pipeline.core.event_log import ReadDeadlineError
from pipeline.core.events import CaseRef, Event, InvalidEventError, LogPosition
from pipeline.kafka.cluster.partitioning import case_partition
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.errors import KafkaAdapterError
from pipeline.kafka.reading.reader import KafkaEventLog
from pipeline.kafka.writing.producer import EventProducer
from pipeline.wire.headers import TENANT_HEADER
from pipeline.wire.validation import SchemaError
from tests.pipeline_support import create_topics
from tests.reader_contract import EventLogContract


class TestKafkaEventLog(EventLogContract):
    @pytest.fixture(autouse=True)
    def _topics(self, kafka_config: dict[str, str], topic_names: TopicNames) -> None:
        create_topics(kafka_config, topic_names)
        self._producer = EventProducer(kafka_config, topic_names)
        self._reader = KafkaEventLog(kafka_config, topic_names.events)
        self._config, self._topic = kafka_config, topic_names.events

    def log(self) -> KafkaEventLog:
        return self._reader

    def append(self, events: list[Event]) -> list[LogPosition]:
        return self._producer.append(events)

    def erased_position(self) -> LogPosition:
        """A tombstone's own offset: what is left at a position once compaction has run is read the same way."""
        delivered: list[LogPosition] = []
        producer = Producer(self._config)
        producer.produce(self._topic, key=b"tenant-e/gone/00000001", value=None, partition=0,
                         on_delivery=lambda _err, msg: delivered.append(LogPosition(0, msg.offset() or 0)))  # fmt: skip
        producer.flush(30)
        return delivered[0]


def test_a_case_stays_in_one_partition_in_order_with_the_tenant_header(
    kafka_config: dict[str, str], topic_names: TopicNames
) -> None:
    create_topics(kafka_config, topic_names, partitions=6)
    producer = EventProducer(kafka_config, topic_names)
    case = CaseRef("acme", "c-77")
    positions = producer.append([Event(case, seq, "doc", f"text {seq}") for seq in range(1, 21)])
    assert {p.partition for p in positions} == {case_partition(case, 6)}
    assert [p.offset for p in positions] == sorted(p.offset for p in positions)
    consumer = Consumer({**kafka_config, "group.id": "hdr", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic_names.events, positions[0].partition, positions[0].offset)])
    msg = consumer.poll(10)
    consumer.close()
    assert msg is not None
    assert msg.key() == b"acme/c-77/00000001"
    assert dict(msg.headers() or [])[TENANT_HEADER] == b"acme"


def test_an_invalid_event_sends_nothing(kafka_config: dict[str, str], topic_names: TopicNames) -> None:
    create_topics(kafka_config, topic_names)
    producer = EventProducer(kafka_config, topic_names)
    case = CaseRef("acme", "c-1")
    with pytest.raises(InvalidEventError, match="kind"):  # a kind the schema refuses cannot even be made
        Event(case, 2, "k" * 101, "kind too long for the schema")
    events = [Event(case, 1, "doc", "fine"), Event(case, 2, "doc", "a NUL \x00 the schema refuses")]
    with pytest.raises(SchemaError):
        producer.append(events)
    assert KafkaEventLog(kafka_config, topic_names.events).scan(case).records == ()


def test_producing_to_a_missing_topic_is_a_clear_error(kafka_config: dict[str, str]) -> None:
    producer = EventProducer(kafka_config, TopicNames("never-created"))
    with pytest.raises(KafkaAdapterError, match="dpm topics create"):
        producer.append([Event(CaseRef("a", "b"), 1, "doc", "x")])


def test_reading_far_apart_positions_stops_at_the_deadline(
    kafka_config: dict[str, str], topic_names: TopicNames
) -> None:
    create_topics(kafka_config, topic_names)
    producer = Producer({**kafka_config, "linger.ms": 20})
    for n in range(60_000):  # small records: 230 positions 260 apart are each read by a seek
        producer.produce(topic_names.events, key=b"tenant-z/noise/%08d" % n, value=b"{}", partition=0)
        if n % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    reader = KafkaEventLog(kafka_config, topic_names.events)
    far_apart = [LogPosition(0, 260 * n) for n in range(230)]
    assert len(reader.read(far_apart[:20]).records) == 20  # warm: connections made
    with pytest.raises(ReadDeadlineError, match="far-apart"):
        reader.read(far_apart, deadline=time.monotonic() + 0.005)
    assert len(reader.read(far_apart).records) == 230  # the readers are usable again afterwards
    reader.close()
