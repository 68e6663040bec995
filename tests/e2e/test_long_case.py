"""A case longer than the model's window, through Kafka: decided in segments, re-decided by another worker
reusing the views the first one published, replayed MATCH, and its views erased with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.bench.generate import GenerationSpec, generate_cases
from pipeline.core.events import Event
from pipeline.core.task import Architecture
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.reading.range_reads import read_topic
from pipeline.kafka.writing.producer import EventProducer
from pipeline.keys.store import CaseKeys
from pipeline.services.cluster import pipeline_processes
from pipeline.services.read_outputs import await_decisions
from pipeline.wire.trigger import DecisionRequest
from tests.pipeline_support import create_topics, worker_env
from tests.processes import dpm_cli

# What this proves is the command's own (parsing, rendering, reports, readers): `make test-kafka4` leaves it out.
pytestmark = pytest.mark.any_broker

# A reference-size case (about 27,000 characters) cut for a 4,096-token window: several segments.
_WINDOW = {"DPM_CONTEXT_TOKENS": "4096", "DPM_SEGMENT_TOKENS": "3000"}


def test_a_long_case_is_decided_in_segments_and_redecided_reusing_them(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    create_topics(kafka_config, topic_names)
    case = generate_cases(GenerationSpec(domains=("loan",), per_domain=1, tenant="long"))[0]
    producer = EventProducer(kafka_config, topic_names, case_keys)
    positions = tuple(producer.append(case.trajectory.events))
    env = {**worker_env(kafka_bootstrap, topic_names, tmp_path), **_WINDOW}

    def decide(trigger_id: str, at: tuple[object, ...], expected: int) -> None:
        producer.trigger(DecisionRequest(trigger_id, case.ref, case.task, 700, (Architecture.DPM,), at, len(at)))  # type: ignore[arg-type]
        with pipeline_processes([["worker"]], env, tmp_path / f"logs-{trigger_id}"):  # a fresh worker each time
            await_decisions(kafka_config, topic_names, expected, timeout_s=90, cipher=case_keys)

    decide("first", positions, 1)
    last = case.trajectory.events[-1]
    more = producer.append([Event(case.ref, last.seq + 1, "note", "Servicing note: reviewed again, no change.")])
    decide("again", (*positions, *more), 2)

    outputs = await_decisions(kafka_config, topic_names, 2, timeout_s=10, cipher=case_keys)
    by_trigger = {d.decision_id.trigger_id: d for d in outputs.decisions.values()}
    first, again = by_trigger["first"], by_trigger["again"]
    assert first.window is not None
    assert len([n for n in first.segments if n.level == 0]) > 2
    assert not any(n.reused for n in first.segments)
    reused = [n for n in again.segments if n.reused]
    assert reused  # the second worker found the first one's views on the segments topic
    assert again.llm_calls < first.llm_calls
    assert again.view_checks.citation_validity == 1.0

    cli_env = {"DPM_BOOTSTRAP": kafka_bootstrap, "DPM_TOPIC_PREFIX": topic_names.prefix}
    for mode in ((), ("--verify-recorded",)):
        replay = dpm_cli("replay", "--all", *mode, env=cli_env)
        assert replay.returncode == 0, replay.stdout + replay.stderr
        assert replay.stdout.count("MATCH") == 2, replay.stdout

    views = [r for r in read_topic(kafka_config, topic_names.segments) if r.value is not None]
    erased = dpm_cli("erase", "--tenant", case.ref.tenant, "--case", case.ref.case_id, env=cli_env)
    assert erased.returncode == 0, erased.stderr
    assert f"{len(views)} segment view tombstone(s)" in erased.stdout
    producer.close()
