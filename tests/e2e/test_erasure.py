"""The right to erasure: `dpm erase` tombstones a case, compaction removes it, replay reports ERASED."""

from __future__ import annotations

import time
from pathlib import Path

from pipeline.core.task import Architecture
from pipeline.kafka.admin import admin_client
from pipeline.kafka.producer import EventProducer
from pipeline.kafka.reader import KafkaEventLog
from pipeline.kafka.topics import TopicNames, TopicSpec, ensure_topics
from pipeline.keys.store import CaseKeys
from pipeline.services.cluster import pipeline_processes
from pipeline.services.read_outputs import await_decisions
from pipeline.wire.trigger import DecisionRequest
from tests.pipeline_support import create_topics, small_cases, worker_env
from tests.processes import dpm_cli

# Compaction within seconds instead of hours: tiny segments, any dirt is cleanable, short tombstone life.
FAST_COMPACTION = {
    "cleanup.policy": "compact",
    "retention.ms": "-1",
    "segment.ms": "200",
    "min.cleanable.dirty.ratio": "0.001",
    "delete.retention.ms": "100",
    "min.compaction.lag.ms": "0",
}


def test_an_erased_case_replays_as_erased(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    ensure_topics(admin_client(kafka_config), (TopicSpec(topic_names.events, 3, FAST_COMPACTION),), 1)
    create_topics(kafka_config, topic_names)
    gone, kept = small_cases(per_domain=1)[:2]
    producer = EventProducer(kafka_config, topic_names)
    positions = {c.ref: tuple(producer.append(c.trajectory.events)) for c in (gone, kept)}
    for case in (gone, kept):
        producer.trigger(DecisionRequest(case.ref.case_id, case.ref, case.task, 900, (Architecture.DPM,),
                                         positions[case.ref]))  # fmt: skip
    with pipeline_processes([["worker"]], worker_env(kafka_bootstrap, topic_names, tmp_path), tmp_path / "logs"):
        await_decisions(kafka_config, topic_names, 2, timeout_s=60, cipher=case_keys)
    env = {"DPM_BOOTSTRAP": kafka_bootstrap, "DPM_TOPIC_PREFIX": topic_names.prefix}
    erased = dpm_cli("erase", "--tenant", gone.ref.tenant, "--case", gone.ref.case_id, env=env)
    assert erased.returncode == 0, erased.stderr
    assert f"1 data key(s) destroyed, {len(gone.trajectory)} event tombstone(s) written" in erased.stdout
    log = KafkaEventLog(kafka_config, topic_names.events)
    deadline = time.monotonic() + 60
    while not log.read(positions[gone.ref]).missing:  # new records roll segments, so the cleaner can run
        assert time.monotonic() < deadline, "compaction did not remove the erased events"
        producer.append(small_cases(per_domain=1, tenant=f"roll{int(time.monotonic() * 10)}")[0].trajectory.events[:1])
        time.sleep(1)
    log.close()
    producer.close()
    replay = dpm_cli("replay", "--all", env=env)
    assert replay.returncode == 2
    lines = {line.split()[1]: line for line in replay.stdout.splitlines() if ":dpm" in line}
    assert "ERASED" in lines[f"{gone.ref.case_id}:dpm"]
    assert "MATCH" in lines[f"{kept.ref.case_id}:dpm"]
