"""The topic follower reads each committed record once, including those of a transaction still open when asked."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Producer

from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.reading.follow import TopicFollower
from tests.pipeline_support import create_topics


def test_records_of_a_transaction_open_during_a_read_come_with_a_later_read(
    kafka_config: dict[str, str], topic_names: TopicNames
) -> None:
    create_topics(kafka_config, topic_names, partitions=1)
    topic = topic_names.decisions
    plain = Producer(kafka_config)
    plain.produce(topic, value=b"before", partition=0)
    plain.flush(10)
    follower = TopicFollower(kafka_config, topic)
    assert [r.value for r in follower.new_records()] == [b"before"]

    transactional = Producer({**kafka_config, "transactional.id": f"tx-{uuid.uuid4().hex}"})
    transactional.init_transactions(30)
    transactional.begin_transaction()
    transactional.produce(topic, value=b"in-flight", partition=0)
    transactional.flush(10)
    plain.produce(topic, value=b"after", partition=0)  # written past the open transaction
    plain.flush(10)
    assert list(follower.new_records()) == []  # read_committed stops at the open transaction

    transactional.commit_transaction(30)
    # The commit markers reach the partition just after commit_transaction returns: read until they have.
    deadline = time.monotonic() + 10
    read: list[bytes | None] = []
    while not read and time.monotonic() < deadline:
        read = [r.value for r in follower.new_records()]
    assert read == [b"in-flight", b"after"]
    assert list(follower.new_records()) == []  # each record once
    follower.close()
