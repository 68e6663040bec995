"""The baseline's own topics exist, partitioned and compacted like its tables need, before its faust app starts."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import ConfigResource, ResourceType

from pipeline.config.settings import Settings
from pipeline.kafka.cluster.admin import admin_client
from pipeline.kafka.cluster.topics import BASELINE_TABLES, BaselineTopics, TopicNames
from pipeline.workers.baseline.service import BaselineChoices, build_baseline
from tests.pipeline_support import create_topics


def test_the_baseline_creates_its_changelogs_and_ledger_before_it_starts(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    create_topics(kafka_config, topic_names, partitions=5)
    settings = Settings.from_env({"DPM_BOOTSTRAP": kafka_bootstrap, "DPM_TOPIC_PREFIX": topic_names.prefix,
                                  "DPM_HOME": str(tmp_path), "DPM_METRICS_PORT": "-1"})  # fmt: skip
    baseline = build_baseline(settings, BaselineChoices(worker_id="probe", budgets=(900,)))
    assert baseline.app.conf.topic_allow_declare is False  # faust never creates a topic of its own
    mine = BaselineTopics(f"{topic_names.prefix}-baseline")
    admin = admin_client(kafka_config)
    topics = admin.list_topics(timeout=10).topics
    for name in (*(mine.changelog(t) for t in BASELINE_TABLES), mine.ledger):
        assert len(topics[name].partitions) == 5, name  # co-partitioned with the events and triggers
        configs = admin.describe_configs([ConfigResource(ResourceType.TOPIC, name)])
        described = next(iter(configs.values())).result(timeout=10)
        assert described["cleanup.policy"].value == "compact", name
    assert len(topics[mine.leader].partitions) == 1
    baseline.publisher.close()
