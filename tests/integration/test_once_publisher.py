"""Exactly-once publication for an at-least-once consumer: one ledger, fenced producers, real broker."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from pipeline.core.events import LogPosition
from pipeline.kafka.cluster.admin import admin_client
from pipeline.kafka.cluster.topics import TopicSpec, ensure_topics
from pipeline.kafka.processing.once import OncePublisher
from pipeline.kafka.processing.steps import Output
from pipeline.kafka.writing.txn_producer import TransientPublishError
from pipeline.wire.ledger import PublishedLedger
from tests.pipeline_support import committed_records

INPUT = "in.triggers"


@pytest.fixture
def topics(kafka_config: dict[str, str]) -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:8]
    ledger, outputs = f"once-ledger-{suffix}", f"once-out-{suffix}"
    specs = (TopicSpec(ledger, 2, {"cleanup.policy": "compact"}), TopicSpec(outputs, 1))
    ensure_topics(admin_client(kafka_config), specs, replication_factor=1)
    return ledger, outputs


def _publisher(config: dict[str, str], ledger: str, prefix: str) -> OncePublisher:
    return OncePublisher(config, ledger, prefix, source="/test", call_timeout_s=10)


def _published(publisher: OncePublisher, offset: int, outputs_topic: str) -> bool:
    """Publishes the record at offset `offset` of partition 1, retrying once if its producer was taken over."""
    output = Output(outputs_topic, b"k", f"v{offset}".encode())
    try:
        return publisher.publish(INPUT, LogPosition(1, offset), [output])
    except TransientPublishError:  # fenced by a newer member: it registers again and reads the ledger again
        return publisher.publish(INPUT, LogPosition(1, offset), [output])


def test_each_offset_is_published_once_whoever_publishes_it(
    kafka_config: dict[str, str], topics: tuple[str, str]
) -> None:
    ledger, outputs = topics
    prefix = f"once-{uuid.uuid4().hex[:8]}"
    first = _publisher(kafka_config, ledger, prefix)
    assert _published(first, 5, outputs)
    assert not _published(first, 5, outputs)  # delivered again: found in the ledger
    second = _publisher(kafka_config, ledger, prefix)  # a member that takes partition 1 over
    assert second.published(INPUT, LogPosition(1, 5))
    assert _published(second, 6, outputs)
    assert _published(first, 7, outputs)  # the old member, fenced, registers again and reads the ledger again
    assert not _published(second, 6, outputs)  # ... and so does the one it fenced: 6 is there
    assert first.stats.ledger_reads >= 2
    # A member that died inside a transaction: outputs and ledger written, never committed.
    dead = Producer({**kafka_config, "transactional.id": f"{prefix}-{INPUT}-1"})
    dead.init_transactions(10)
    dead.begin_transaction()
    dead.produce(outputs, key=b"k", value=b"v8")
    ghost = PublishedLedger(INPUT, 1, ((5, 8),))
    dead.produce(ledger, key=ghost.key, value=ghost.encode(), partition=1)
    dead.flush(10)
    third = _publisher(kafka_config, ledger, prefix)  # its registration aborts the open transaction
    assert not third.published(INPUT, LogPosition(1, 8))
    assert _published(third, 8, outputs)
    values = sorted(r.value or b"" for r in committed_records(kafka_config, outputs, 4))  # read_committed
    assert values == [b"v5", b"v6", b"v7", b"v8"]
    for publisher in (first, second, third):
        publisher.close()
