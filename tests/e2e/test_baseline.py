"""The faust Summ-only baseline against the real broker: N+1 audit records, offline parity, changelog recovery."""

from __future__ import annotations

from pathlib import Path

from pipeline.cluster_session import pipeline_processes as processes
from pipeline.core.hashing import text_digest
from pipeline.core.run import run_summ
from pipeline.core.task import Architecture, Budget
from pipeline.kafka.producer import EventProducer
from pipeline.kafka.topics import TopicNames
from pipeline.kafka.wire import CaseOpening, DecisionRequest
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.outputs_index import await_decisions
from tests.pipeline_support import create_topics, small_cases, worker_env

BUDGET = 900


def test_baseline_decides_with_n_plus_one_audits_and_recovers_its_summaries_after_restart(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    create_topics(kafka_config, topic_names)
    case = small_cases(per_domain=1)[0]
    producer = EventProducer(kafka_config, topic_names)
    positions = tuple(producer.append(case.trajectory.events, CaseOpening(case.task, (BUDGET,))))

    def trigger(trigger_id: str) -> None:
        producer.trigger(DecisionRequest(trigger_id, case.ref, case.task, BUDGET, (Architecture.SUMM,), positions,
                                         len(positions), case.label))  # fmt: skip

    env = worker_env(kafka_bootstrap, topic_names, tmp_path)
    trigger("first")
    with processes([["baseline", "--budgets", "700"]], env, tmp_path / "run1"):
        first = await_decisions(kafka_config, topic_names, 1, timeout_s=120)
    record = first.decisions["first:summ"]
    assert record["llm_calls"] == len(case.trajectory) + 1
    purposes = [a["purpose"] for a in sorted(first.audits["first:summ"], key=lambda a: a["call_index"])]
    assert purposes == ["summarize"] * len(case.trajectory) + ["decide"]
    offline = run_summ(case.trajectory, case.task, Budget(BUDGET), ExtractiveBackend())
    assert record["view_sha256"] == text_digest(offline.view_text), "the online baseline equals the offline run"

    # The events' offsets are committed: a new member must take the summaries from the changelog.
    trigger("second")
    producer.close()
    with processes([["baseline", "--budgets", "700"]], env, tmp_path / "run2"):
        second = await_decisions(kafka_config, topic_names, 2, timeout_s=120)
    assert second.decisions["second:summ"]["view_sha256"] == record["view_sha256"]
    assert second.decisions["second:summ"]["decision"]["label"] == record["decision"]["label"]

    def step_latencies(decision_id: str) -> list[float]:
        audits = sorted(second.audits[decision_id], key=lambda a: a["call_index"])
        return [a["latency_s"] for a in audits if a["purpose"] == "summarize"]

    # Measured latencies of the N steps are carried, not re-measured: the steps were recovered, not redone.
    assert step_latencies("second:summ") == step_latencies("first:summ")
