"""The only broker stops and comes back: the same worker and baseline processes decide every trigger once.

Runs on the Kafka release DPM_KAFKA_VERSION names (CI: 3.9.2, then 4.4.0, where the workers also
join with KIP-848's consumer protocol). `make chaos` runs the longer outage (60 s).
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from pipeline.config.settings import Settings, keys_folder
from pipeline.core.task import Architecture
from pipeline.kafka import local_broker
from pipeline.kafka.broker_runtime import KafkaRelease
from pipeline.kafka.keystore import kafka_case_keys
from pipeline.kafka.producer import EventProducer
from pipeline.kafka.range_reads import read_topic
from pipeline.kafka.topics import TopicNames
from pipeline.keys.providers import LocalFileKeyProvider
from pipeline.services.cluster import pipeline_processes, private_cluster
from pipeline.services.read_outputs import await_decisions
from pipeline.wire.event import CaseOpening
from pipeline.wire.trigger import DecisionRequest
from tests.pipeline_support import create_topics, small_cases, worker_env

BUDGET = 900
AWAY_S = 20
DRAIN_S = 8
_SETTINGS = Settings.from_env()
PROTOCOLS = ["classic", "consumer"] if KafkaRelease(_SETTINGS.kafka.version).major >= 4 else ["classic"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_after_an_outage_every_trigger_is_decided_once_by_the_same_processes(
    protocol: str, tmp_path: Path, keys_dir: Path
) -> None:
    home = tmp_path / "cluster"
    with private_cluster(_SETTINGS, home, nodes=1) as running:
        config = {"bootstrap.servers": running.bootstrap}
        names = TopicNames(f"outage-{protocol}")
        create_topics(config, names)
        keys = kafka_case_keys(config, names.keys, LocalFileKeyProvider(keys_folder(keys_dir, names.prefix)))
        producer = EventProducer(config, names, keys)
        cases = small_cases(per_domain=1)
        positions = {c.ref: tuple(producer.append(c.trajectory.events, CaseOpening(c.task, (BUDGET,)))) for c in cases}
        both = (Architecture.DPM, Architecture.SUMM)
        requests = [DecisionRequest(f"o{n}", c.ref, c.task, BUDGET, both, positions[c.ref], len(positions[c.ref]))
                    for n, c in enumerate(cases * 3)]  # fmt: skip
        env = {**worker_env(running.bootstrap, names, tmp_path), "DPM_GROUP_PROTOCOL": protocol,
               "DPM_DRAIN_S": str(DRAIN_S)}  # fmt: skip
        commands = [["worker"], ["baseline", "--budgets", str(BUDGET)]]
        with pipeline_processes(commands, env, tmp_path / "logs") as procs:
            producer.triggers(requests[:6])
            await_decisions(config, names, 12, timeout_s=120, cipher=keys)
            local_broker.stop(home)
            time.sleep(AWAY_S)
            local_broker.start(home, _SETTINGS.paths.cache_dir, _SETTINGS.kafka.version, nodes=1, port=running.port)
            back = time.monotonic()
            producer.triggers(requests[6:])
            outputs = await_decisions(config, names, 2 * len(requests), timeout_s=120, cipher=keys)
            recovered_s = time.monotonic() - back
            assert all(p.poll() is None for p in procs), "the same processes serve on"
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            stopped = time.monotonic()
            for proc in procs:
                try:
                    proc.wait(max(0.1, stopped + DRAIN_S + 5 - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pytest.fail(f"{proc.args!r} did not stop within its drain deadline of {DRAIN_S} s")
        producer.close()
        keys.close()
        letters = list(read_topic(config, names.dlq))
    assert outputs.decision_ids() == {r.decision_id(a) for r in requests for a in both}
    assert outputs.duplicates == 0
    assert recovered_s < 60
    assert letters == []  # nothing dead-lettered: Kafka away is no record's fault
