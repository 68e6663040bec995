"""The broker is Apache Kafka itself: compaction configs, offsets, durability and transactions."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource, ResourceType

from pipeline.config.settings import Settings
from pipeline.kafka.cluster.admin import admin_client, fetch_metadata
from pipeline.kafka.cluster.topics import (
    ErasureBound,
    TopicNames,
    TopicSpec,
    create_pipeline_topics,
    ensure_topics,
    pipeline_topics,
    remove_pipeline,
)
from pipeline.kafka.errors import LocalBrokerError, TopicConflictError
from pipeline.kafka.local import local_broker
from pipeline.kafka.local.local_broker import free_cluster_port
from pipeline.services.cluster import private_cluster
from tests.kafka_support import unique_prefix
from tests.processes import dpm_cli


def _read_at(config: dict[str, str], topic: str, partition: int, offset: int, committed: bool = False) -> list[bytes]:
    """Reads from an explicit offset (assign, no group) until the partition's end."""
    consumer = Consumer(
        {
            **config,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
        }
    )
    consumer.assign([TopicPartition(topic, partition, offset)])
    values: list[bytes] = []
    try:
        while True:
            msg = consumer.poll(10.0)
            assert msg is not None, "timed out before reaching the end of the partition"
            error = msg.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF
                return values
            values.append(msg.value() or b"")
    finally:
        consumer.close()


def _produce(config: dict[str, str], topic: str, records: list[tuple[bytes, bytes]]) -> list[int]:
    offsets: list[int] = []

    def delivered(err: KafkaError | None, msg: object) -> None:
        assert err is None, err
        offsets.append(msg.offset())  # type: ignore[attr-defined]

    producer = Producer({**config, "enable.idempotence": True, "acks": "all"})
    for key, value in records:
        producer.produce(topic, value=value, key=key, partition=0, on_delivery=delivered)
    assert producer.flush(30) == 0
    return offsets


def test_events_topic_is_compacted_without_time_retention(
    kafka_config: dict[str, str], topic_names: TopicNames
) -> None:
    admin = admin_client(kafka_config)
    ensure_topics(admin, pipeline_topics(topic_names, partitions=2), replication_factor=1)
    resource = ConfigResource(ResourceType.TOPIC, topic_names.events)
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["retention.ms"].value == "-1"


def test_ensure_topics_is_idempotent_and_refuses_conflicts(kafka_config: dict[str, str]) -> None:
    admin = admin_client(kafka_config)
    names = TopicNames(unique_prefix())
    first = ensure_topics(admin, pipeline_topics(names, partitions=2), replication_factor=1)
    second = ensure_topics(admin, pipeline_topics(names, partitions=2), replication_factor=1)
    assert len(first.created) == 10
    assert second.created == ()
    assert len(second.existing) == 10
    assert second.drift == ()
    tighter = pipeline_topics(names, partitions=2, erasure=ErasureBound(max_lag_ms=60_000, tombstone_ms=1_000))
    drift = ensure_topics(admin, tighter, replication_factor=1).drift  # reported, not refused
    assert [d.split(":")[0] for d in drift] == [names.events, names.keys, names.segments]
    assert "max.compaction.lag.ms=3600000 (wants 60000)" in drift[0]
    with pytest.raises(TopicConflictError, match=r"partitions=2 \(needs 4\)"):
        ensure_topics(admin, pipeline_topics(names, partitions=4), replication_factor=1)
    delete_policy = (TopicSpec(names.events, 2, {"cleanup.policy": "delete"}),)
    with pytest.raises(TopicConflictError, match=r"cleanup.policy=compact \(needs delete\)"):
        ensure_topics(admin, delete_policy, replication_factor=1)


def test_keyed_records_are_read_back_by_explicit_offset(kafka_config: dict[str, str]) -> None:
    topic = unique_prefix("offsets")
    ensure_topics(admin_client(kafka_config), (TopicSpec(topic, 1),), replication_factor=1)
    records = [(f"acme/case-1/{i:06d}".encode(), f"event {i}".encode()) for i in range(20)]
    offsets = _produce(kafka_config, topic, records)
    assert offsets == list(range(20))
    assert _read_at(kafka_config, topic, 0, 15) == [f"event {i}".encode() for i in range(15, 20)]


def test_aborted_transaction_is_invisible_to_read_committed(kafka_config: dict[str, str]) -> None:
    topic = unique_prefix("txn")
    ensure_topics(admin_client(kafka_config), (TopicSpec(topic, 1),), replication_factor=1)
    producer = Producer({**kafka_config, "transactional.id": f"txn-{uuid.uuid4().hex}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"aborted", partition=0)
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"committed", partition=0)
    producer.commit_transaction(30)
    assert _read_at(kafka_config, topic, 0, 0, committed=True) == [b"committed"]
    assert _read_at(kafka_config, topic, 0, 0, committed=False) == [b"aborted", b"committed"]


@pytest.mark.slow
def test_broker_restart_loses_nothing(private_home: Path) -> None:
    topic = "durable"
    records = [(f"acme/c/{i:06d}".encode(), f"v{i}".encode()) for i in range(50)]
    with private_cluster(Settings.from_env(), private_home) as cluster:
        config = {"bootstrap.servers": cluster.bootstrap}
        ensure_topics(admin_client(config), (TopicSpec(topic, 1, {"cleanup.policy": "compact"}),), 1)
        _produce(config, topic, records)
    assert local_broker.read_running(private_home) is None
    settings = Settings.from_env()
    port = free_cluster_port(1)
    cluster, already = local_broker.start(
        private_home, settings.paths.cache_dir, settings.kafka.version, nodes=1, port=port
    )
    try:
        assert not already
        assert _read_at({"bootstrap.servers": cluster.bootstrap}, topic, 0, 0) == [v for _, v in records]
    finally:
        local_broker.stop(private_home)


@pytest.mark.slow
def test_second_up_reports_the_running_broker_and_failed_start_shows_logs(private_home: Path) -> None:
    settings = Settings.from_env()
    with private_cluster(Settings.from_env(), private_home) as cluster:
        again, already = local_broker.start(
            private_home, settings.paths.cache_dir, settings.kafka.version, nodes=1, port=cluster.port
        )
        assert already
        assert again.pids == cluster.pids
        with pytest.raises(LocalBrokerError, match="already running"):
            local_broker.start(
                private_home, settings.paths.cache_dir, settings.kafka.version, nodes=3, port=cluster.port
            )
    layout = local_broker.ClusterLayout(private_home, 1, cluster.port, settings.kafka.version)
    meta = layout.node_dir(1) / "data" / "meta.properties"
    meta.write_text(meta.read_text().replace("node.id=1", "node.id=7"))
    with pytest.raises(LocalBrokerError, match=r"server\.log") as failure:
        local_broker.start(
            private_home, settings.paths.cache_dir, settings.kafka.version, nodes=1, port=free_cluster_port(1)
        )
    assert "exited with code" in str(failure.value)
    assert local_broker.read_running(private_home) is None


@pytest.mark.slow
def test_three_node_cluster_replicates_with_min_isr_two(private_home: Path) -> None:
    with private_cluster(Settings.from_env(), private_home, nodes=3) as cluster:
        config = {"bootstrap.servers": cluster.bootstrap}
        # Each broker answers from its own metadata image: every one of them must list all three.
        layout = local_broker.ClusterLayout(private_home, cluster.nodes, cluster.port)
        for node_id in layout.node_ids:
            assert fetch_metadata({"bootstrap.servers": layout.broker_address(node_id)}).broker_ids == (1, 2, 3)
        names = TopicNames("rf3")
        admin = admin_client(config)
        ensure_topics(admin, pipeline_topics(names, partitions=3), replication_factor=3)
        metadata = admin.list_topics(names.events, timeout=10)
        assert all(len(p.replicas) == 3 for p in metadata.topics[names.events].partitions.values())
        resource = ConfigResource(ResourceType.TOPIC, names.events)
        configs = admin.describe_configs([resource])[resource].result(timeout=10)
        assert configs["min.insync.replicas"].value == "2"
        # A node that dies is named as down, and the status command fails.
        os.kill(cluster.pids[1], signal.SIGKILL)
        health = {n.node_id: n.up for n in local_broker.node_health(cluster)}
        assert health == {1: True, 2: False, 3: True}
        status = dpm_cli("broker", "status", env={"DPM_HOME": str(private_home)})
        assert status.returncode == 2, status.stdout
        assert "node 2 at" in status.stdout
        assert "down: process exited" in status.stdout
        assert "1 of 3 node(s) down: [2]" in status.stdout


def test_a_throwaway_pipeline_is_removed_whole(kafka_config: dict[str, str]) -> None:
    names = TopicNames(f"gone-{uuid.uuid4().hex[:8]}")
    create_pipeline_topics(kafka_config, names, partitions=1, replication=1)
    kept = TopicNames(f"{names.prefix}-2")  # a prefix that merely starts the same: another pipeline
    create_pipeline_topics(kafka_config, kept, partitions=1, replication=1)
    removed = remove_pipeline(kafka_config, names.prefix)
    assert len(removed) == 10
    deadline = time.monotonic() + 30
    while any(t.startswith(f"{names.prefix}.") for t in admin_client(kafka_config).list_topics(timeout=10).topics):
        assert time.monotonic() < deadline, "deleted topics still listed"
        time.sleep(0.5)
    assert f"{kept.prefix}.events" in admin_client(kafka_config).list_topics(timeout=10).topics
