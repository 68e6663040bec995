"""The pipeline on a real model: workers and the baseline on the openai backend, a loopback llama.cpp server.

SmolLM2-135M is weak; these tests prove the plumbing: decisions through Kafka for both
architectures, replay from the recorded answers, and a model server that dies mid-run.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import orjson
import pytest

from pipeline.core.task import Architecture
from pipeline.kafka.producer import EventProducer
from pipeline.kafka.range_reads import read_topic
from pipeline.kafka.topics import TopicNames
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
