"""The pipeline on a real model: workers and the baseline on the openai backend, a loopback llama.cpp server.

SmolLM2-135M is weak; these tests prove the plumbing: decisions through Kafka for both
architectures, replay from the recorded answers, and a model server that dies mid-run.
"""

from __future__ import annotations

import os
import time
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from pipeline.bench.generate import GenerationSpec, generate_cases
from pipeline.config.settings import keys_folder
from pipeline.core.case import Case
from pipeline.core.events import Event, Trajectory
from pipeline.core.task import Architecture
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.keytopic.keystore import kafka_case_keys
from pipeline.kafka.reading.range_reads import read_topic
from pipeline.kafka.writing.producer import EventProducer
from pipeline.keys.providers import LocalFileKeyProvider
from pipeline.keys.store import CaseKeys
from pipeline.llm import local_model
from pipeline.services.cluster import pipeline_processes
from pipeline.services.read_outputs import await_decisions
from pipeline.wire.dead_letter import DeadLetterRecord
from pipeline.wire.event import CaseOpening
from pipeline.wire.rejection import Rejection
from pipeline.wire.trigger import DecisionId, DecisionKey, DecisionRequest
from tests.cases import load_fixture, shortened
from tests.conftest import free_port
from tests.pipeline_support import create_topics, worker_env
from tests.processes import dpm_cli

pytestmark = pytest.mark.model
CASE = shortened(load_fixture(), 4)
BUDGET = 400


def _model_env(base: dict[str, str], running: local_model.RunningModel) -> dict[str, str]:
    """A slow model needs room: two minutes a call, one attempt (2 x 120 s + read deadline < half the poll interval)."""
    return {**base, "DPM_BACKEND": "openai", "DPM_OPENAI_BASE_URL": running.base_url, "DPM_MODEL": running.model,
            "DPM_MODEL_TIMEOUT_S": "120", "DPM_MODEL_MAX_RETRIES": "0"}  # fmt: skip


def _trigger(config: dict[str, str], names: TopicNames, trigger_id: str, archs: tuple[Architecture, ...]) -> None:
    producer = EventProducer(config, names)
    positions = tuple(producer.append(CASE.trajectory.events, CaseOpening(CASE.task, (BUDGET,))))
    producer.trigger(DecisionRequest(trigger_id, CASE.ref, CASE.task, BUDGET, archs, positions, len(positions),
                                     CASE.label))  # fmt: skip
    producer.close()


def test_both_architectures_decide_through_kafka_and_replay_from_the_record(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys,
    local_llm: local_model.RunningModel,
) -> None:  # fmt: skip
    create_topics(kafka_config, topic_names)
    env = _model_env(worker_env(kafka_bootstrap, topic_names, tmp_path), local_llm)
    _trigger(kafka_config, topic_names, "local", (Architecture.DPM, Architecture.SUMM))
    summ = ["baseline", "--budgets", str(BUDGET), "--trigger-wait", "300"]
    with pipeline_processes([["worker", "--batch-size", "1"], summ], env, tmp_path / "logs"):
        outputs = await_decisions(kafka_config, topic_names, 2, timeout_s=480, cipher=case_keys)
    assert outputs.decision_ids() == {DecisionId("local", a) for a in Architecture}, "both decided"
    for record in outputs.decisions.values():
        assert (record.backend, record.model) == ("openai", local_llm.model)
        assert record.outcome.label in (*CASE.task.label_space, None)
    trails = [a for trail in outputs.audits.values() for a in trail]
    assert trails, "the audit records were read"
    assert all(dict(a.call.response.serving)["sha256"] == local_llm.sha256 for a in trails)  # the model file's
    summ_calls = outputs.decisions[DecisionKey(CASE.ref.tenant, DecisionId("local", Architecture.SUMM))].llm_calls
    assert summ_calls == len(CASE.trajectory) + 1
    replayed = dpm_cli("replay", "--all", "--verify-recorded", env=env)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert replayed.stdout.count("MATCH") == 2


def test_a_model_server_that_dies_gives_retries_then_model_error_dead_letters_never_a_crash(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys,
) -> None:  # fmt: skip
    model_home = tmp_path / "model-home"
    cli_env = {"DPM_HOME": str(model_home)}
    port = str(free_port())
    assert dpm_cli("model", "status", env=cli_env).returncode == 3
    up = dpm_cli("model", "up", "--port", port, env=cli_env)
    if up.returncode != 0 and "not installed" in up.stderr and not os.environ.get("DPM_REQUIRE_LOCAL_MODEL"):
        pytest.skip(up.stderr.strip())
    assert up.returncode == 0, up.stderr
    running = local_model.read_running(model_home)
    assert running is not None
    assert dpm_cli("model", "status", env=cli_env).returncode == 0
    create_topics(kafka_config, topic_names)
    # Two attempts a call: 2 x 120 s x 2 + 30 s must fit in half the poll interval.
    env = {**_model_env(worker_env(kafka_bootstrap, topic_names, tmp_path), running), "DPM_MODEL_MAX_RETRIES": "1",
           "DPM_MAX_POLL_INTERVAL_MS": "1200000"}  # fmt: skip
    with pipeline_processes([["worker", "--batch-size", "1"]], env, tmp_path / "logs") as (worker,):
        assert "stopped" in dpm_cli("model", "down", env=cli_env).stdout  # the server dies under a running worker
        _trigger(kafka_config, topic_names, "dead-model", (Architecture.DPM,))
        letters: list[DeadLetterRecord] = []
        deadline = time.monotonic() + 120
        while not letters and time.monotonic() < deadline:
            time.sleep(1)
            letters = [DeadLetterRecord.from_wire(orjson.loads(r.value or b""))
                       for r in read_topic(kafka_config, topic_names.dlq)]  # fmt: skip
        assert [letter.reason for letter in letters] == [Rejection.MODEL_ERROR]
        assert "unreachable" in letters[0].detail or "failed" in letters[0].detail
        assert worker.poll() is None, "the worker survived"
        assert dpm_cli("model", "up", "--port", port, env=cli_env).returncode == 0  # the server comes back
        _trigger(kafka_config, topic_names, "back", (Architecture.DPM,))
        outputs = await_decisions(kafka_config, topic_names, 1, timeout_s=240, cipher=case_keys)
        dpm_cli("model", "down", env=cli_env)
    assert outputs.decision_ids() == {DecisionId("back", Architecture.DPM)}


# The window the backend is told (DPM_CONTEXT_TOKENS) instead of the server's 8,192 tokens: what is proven
# (segments counted by the server's tokenizer, an event folded in parts) does not depend on the size, and
# on two cores a window a quarter the size takes a fraction of the time.
WINDOW_TOKENS = 3000
# The smallest budget a view may have: each call's answer is bounded by it, and answers are most of a call's time here.
LONG_BUDGET = 200


def _long_cases() -> tuple[Case, Case]:
    """A 10,500-character case, longer than the window, and a short one holding one event larger than the window.

    Each model call costs seconds here: the cases are as small as still proves the point (two segments; one
    event folded in parts).
    """
    longer = generate_cases(GenerationSpec(domains=("claim",), per_domain=1, chars=(10_500, 11_000), events=(30, 33),
                                           tenant="window"))[0]  # fmt: skip
    short = shortened(load_fixture(), 2)
    first = short.trajectory.events[0]
    report = Event(first.case, 3, "document", "Appraisal report, continued. " * 550)  # about 16,000 characters
    with_big_event = replace(short, trajectory=Trajectory(short.ref, (*short.trajectory.events, report)))
    return longer, with_big_event


@pytest.mark.timeout(2400)
def test_cases_longer_than_the_models_window_are_decided_and_replay_from_the_record(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, keys_dir: Path,
    local_llm: local_model.RunningModel,
) -> None:  # fmt: skip
    """A window the case does not fit: DPM in segments counted by the server's tokenizer, Summ-only in parts.

    One architecture at a time, each on its own topics: the server answers one request at a time, and
    Summ-only folding every event of the DPM cases would keep it busy for an hour.
    """
    longer, with_big_event = _long_cases()
    summ_names = TopicNames(f"{topic_names.prefix}-summ")
    # Calls as long as the server's speed says (pacing.py); segmented decisions make several: a long poll interval.
    extra = {"DPM_MODEL_TIMEOUT_S": "60", "DPM_MODEL_MAX_RETRIES": "1", "DPM_MAX_POLL_INTERVAL_MS": "3600000",
             "DPM_CONTEXT_TOKENS": str(WINDOW_TOKENS)}  # fmt: skip
    decisions = {}
    for names, cases, command, architecture in (
        (topic_names, (longer,), ["worker", "--batch-size", "1"], Architecture.DPM),
        (summ_names, (with_big_event,), ["baseline", "--budgets", str(LONG_BUDGET), "--trigger-wait", "900"],
         Architecture.SUMM),
    ):  # fmt: skip
        create_topics(kafka_config, names)
        producer = EventProducer(kafka_config, names)
        for case in cases:
            positions = tuple(producer.append(case.trajectory.events, CaseOpening(case.task, (LONG_BUDGET,))))
            producer.trigger(DecisionRequest(case.ref.case_id, case.ref, case.task, LONG_BUDGET, (architecture,),
                                             positions, len(positions)))  # fmt: skip
        producer.close()
        env = {**_model_env(worker_env(kafka_bootstrap, names, tmp_path), local_llm), **extra}
        provider = LocalFileKeyProvider(keys_folder(keys_dir, names.prefix))
        with closing(kafka_case_keys(kafka_config, names.keys, provider)) as keys, \
                pipeline_processes([command], env, tmp_path / f"logs-{architecture.value}"):  # fmt: skip
            outputs = await_decisions(kafka_config, names, len(cases), timeout_s=1200, cipher=keys)
        assert list(read_topic(kafka_config, names.dlq)) == [], "no dead letter, for size or time"
        decisions.update({d.case.case_id: d for d in outputs.decisions.values()})
        replayed = dpm_cli("replay", "--all", "--verify-recorded", env=env)
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        assert replayed.stdout.count("MATCH") == len(cases)
    assert set(decisions) == {c.ref.case_id for c in (longer, with_big_event)}
    segmented = decisions[longer.ref.case_id]
    assert segmented.window is not None
    assert segmented.window.tokens == WINDOW_TOKENS
    assert segmented.window.counted_by.startswith("llama.cpp tokenizer")
    assert len([n for n in segmented.segments if n.level == 0]) >= 2
    folded = decisions[with_big_event.ref.case_id]
    assert folded.window is not None  # its large event was folded in parts
    assert folded.llm_calls > len(with_big_event.trajectory) + 1
