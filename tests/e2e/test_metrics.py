"""Scrape a running worker during an end-to-end run: counters and histograms move by the expected amounts."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pipeline.core.case import Case
from pipeline.core.events import CaseRef, LogPosition
from pipeline.core.task import Architecture
from pipeline.kafka.cluster.partitioning import case_partition
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.local.local_broker import free_cluster_port
from pipeline.kafka.writing.producer import EventProducer
from pipeline.keys.store import CaseKeys
from pipeline.services.cluster import pipeline_processes
from pipeline.services.read_outputs import await_decisions
from pipeline.wire.event import CaseOpening
from pipeline.wire.trigger import DecisionRequest
from tests.pipeline_support import create_topics, small_cases, worker_env

# What this proves is the command's own (parsing, rendering, reports, readers): `make test-kafka4` leaves it out.
pytestmark = pytest.mark.any_broker

DECISIONS = 5


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }


def _total(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return sum(v for (n, lbls), v in samples.items() if n == name and labels.items() <= dict(lbls).items())


def _metered_case(
    bootstrap: str, config: dict[str, str], names: TopicNames, home: Path, partitions: int, **settings: str
) -> tuple[int, dict[str, str], EventProducer, Case, tuple[LogPosition, ...]]:
    """Topics, a free metrics port, the worker's environment and one short case's events appended."""
    create_topics(config, names, partitions=partitions)
    env = {**worker_env(bootstrap, names, home), "DPM_METRICS_ADDR": "127.0.0.1", **settings}
    producer = EventProducer(config, names)
    case = small_cases(per_domain=1)[0]
    return free_cluster_port(1), env, producer, case, tuple(producer.append(case.trajectory.events))


def _first_scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The first answer of an endpoint that is starting."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return _scrape(port)
        except OSError:
            assert time.monotonic() < deadline, "metrics endpoint never came up"
            time.sleep(0.3)


def test_worker_metrics_move_by_the_expected_amounts(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    port, env, producer, case, positions = _metered_case(kafka_bootstrap, kafka_config, topic_names, tmp_path, 3,
                                                         DPM_METRICS_TENANTS="e2e")  # fmt: skip
    with pipeline_processes([["worker", "--metrics-port", str(port)]], env, tmp_path / "logs"):
        before = _first_scrape(port)  # before any trigger: everything counted below is this run's
        assert _total(before, "dpm_decisions_total") == 0
        for n in range(DECISIONS):
            producer.trigger(DecisionRequest(f"m{n}", case.ref, case.task, 900, (Architecture.DPM,), positions))
        thief = CaseRef("intruder", case.ref.case_id)
        producer.trigger(DecisionRequest("steal", thief, case.task, 900, (Architecture.DPM,), positions))
        producer._producer.produce(
            topic_names.triggers, value=b"{not json", key=b"x/y", partition=case_partition(case.ref, 3)
        )  # a raw bad record, as a buggy agent sends
        producer.close()
        await_decisions(kafka_config, topic_names, DECISIONS, timeout_s=60, cipher=case_keys)
        time.sleep(6)  # one tick of the lag gauge
        after = _scrape(port)
        health = urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)
        assert health.status == 200
        assert health.read().startswith(b"ok")
    assert _total(after, "dpm_decisions_total", architecture="dpm", tenant="e2e") == DECISIONS
    assert _total(after, "dpm_model_calls_total", architecture="dpm", purpose="project") == DECISIONS
    assert _total(after, "dpm_model_calls_total", architecture="dpm", purpose="decide") == DECISIONS
    assert _total(after, "dpm_model_input_tokens_total", architecture="dpm") > 0
    assert _total(after, "dpm_memory_build_seconds_count", architecture="dpm") == DECISIONS
    assert _total(after, "dpm_decision_call_seconds_count", architecture="dpm") == DECISIONS
    assert _total(after, "dpm_end_to_end_seconds_count", architecture="dpm") == DECISIONS
    assert _total(after, "dpm_replay_results_total", outcome="MATCH") == DECISIONS
    assert _total(after, "dpm_dead_letters_total", reason="cross-tenant") == 1
    assert _total(after, "dpm_dead_letters_total", reason="not-json") == 1
    assert _total(after, "dpm_isolation_violations_total") == 1
    assert any(name == "dpm_consumer_lag" for name, _ in after)
    assert _total(after, "dpm_consumer_lag") == 0


def test_the_lag_gauge_grows_while_the_worker_waits_on_one_long_model_call(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    port, env, producer, case, positions = _metered_case(kafka_bootstrap, kafka_config, topic_names, tmp_path, 1,
                                                         DPM_MODEL_LATENCY_MS="12000")  # fmt: skip

    def trigger(n: int) -> None:
        producer.trigger(DecisionRequest(f"slow{n}", case.ref, case.task, 900, (Architecture.DPM,), positions))

    trigger(0)
    with pipeline_processes([["worker", "--metrics-port", str(port), "--batch-size", "1"]], env, tmp_path / "logs"):
        _first_scrape(port)
        time.sleep(3)  # the worker is inside its first 12 s model call
        for n in range(1, 7):
            trigger(n)
        time.sleep(7)  # more than one probe interval, less than the call
        during = _scrape(port)
    producer.close()
    assert _total(during, "dpm_decisions_total") == 0, "still inside the first call"
    assert _total(during, "dpm_consumer_lag", topic=topic_names.triggers) >= 6


def test_baseline_metrics_count_every_step_and_the_decision(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    create_topics(kafka_config, topic_names)
    port = free_cluster_port(1)
    env = {**worker_env(kafka_bootstrap, topic_names, tmp_path), "DPM_METRICS_ADDR": "127.0.0.1"}
    case = small_cases(per_domain=1)[0]
    producer = EventProducer(kafka_config, topic_names)
    positions = tuple(producer.append(case.trajectory.events, CaseOpening(case.task, (900,))))
    producer.trigger(DecisionRequest("b1", case.ref, case.task, 900, (Architecture.SUMM,), positions, len(positions)))
    producer.close()
    with pipeline_processes([["baseline", "--budgets", "900", "--metrics-port", str(port)]], env, tmp_path / "logs"):
        await_decisions(kafka_config, topic_names, 1, timeout_s=90, cipher=case_keys)
        time.sleep(6)  # one tick of the lag timer
        after = _scrape(port)
    steps = len(case.trajectory)
    assert _total(after, "dpm_decisions_total", architecture="summ") == 1
    assert _total(after, "dpm_model_calls_total", architecture="summ", purpose="summarize") == steps
    assert _total(after, "dpm_model_calls_total", architecture="summ", purpose="decide") == 1
    assert _total(after, "dpm_memory_build_seconds_count", architecture="summ") == 1
    assert _total(after, "dpm_replay_results_total", outcome="MATCH") == 1
    assert _total(after, "dpm_consumer_lag", topic=topic_names.events) == 0
    assert any(name == "dpm_consumer_lag" for name, _ in after)
