"""The Summ-only baseline publishes each decision once, whenever it is killed (SIGKILL) while publishing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.core.task import Architecture
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.writing.producer import EventProducer
from pipeline.keys.store import CaseKeys
from pipeline.services.cluster import pipeline_processes
from pipeline.services.read_outputs import await_decisions, load_outputs
from pipeline.wire.event import CaseOpening
from pipeline.wire.trigger import DecisionRequest
from tests.pipeline_support import create_topics, small_cases, worker_env

BUDGET = 900


@pytest.mark.parametrize("point", ["after-commit", "before-commit"])
def test_a_baseline_killed_while_it_publishes_decides_each_trigger_once(
    point: str, kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path,
    case_keys: CaseKeys,
) -> None:  # fmt: skip
    create_topics(kafka_config, topic_names, partitions=1)  # every trigger in one partition: the kill hits its ledger
    cases = small_cases(per_domain=1)[:2]
    producer = EventProducer(kafka_config, topic_names)
    positions = {c.ref: tuple(producer.append(c.trajectory.events, CaseOpening(c.task, (BUDGET,)))) for c in cases}
    requests = [DecisionRequest(f"k{n}", c.ref, c.task, BUDGET, (Architecture.SUMM,), positions[c.ref],
                                len(positions[c.ref])) for n, c in enumerate(cases * 3)]  # fmt: skip
    producer.triggers(requests)
    producer.close()
    env = worker_env(kafka_bootstrap, topic_names, tmp_path)
    # The third trigger's publication dies: after its commit, or inside its transaction.
    doomed = subprocess.run([sys.executable, "-m", "tests.faults", f"{point}:3", "baseline", "--budgets", str(BUDGET)],
                            env=env, capture_output=True, timeout=300, check=False)  # fmt: skip
    assert doomed.returncode == -9, doomed.stderr[-2000:]
    with pipeline_processes([["baseline", "--budgets", str(BUDGET)]], env, tmp_path / "after"):
        await_decisions(kafka_config, topic_names, len(requests), timeout_s=180, cipher=case_keys)
    outputs = load_outputs(kafka_config, topic_names, cipher=case_keys)
    assert set(outputs.decisions) == {r.decision_key(Architecture.SUMM) for r in requests}
    assert outputs.duplicates == 0  # the committed decision was not published again, the aborted one was
    assert requests[2].decision_key(Architecture.SUMM) in outputs.views
