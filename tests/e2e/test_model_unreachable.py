"""A worker whose model cannot be reached: the agent's refusal and the worker's log say why and what fixes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.client import DecisionMemory, DecisionRefusedError
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.services.cluster import pipeline_processes
from tests.conftest import free_port
from tests.integration.test_client_appends import client_settings
from tests.pipeline_support import create_topics, small_cases, worker_env

pytestmark = [pytest.mark.e2e, pytest.mark.any_broker]


def test_a_model_server_nobody_started_is_named_in_the_refusal_with_its_fix(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    create_topics(kafka_config, topic_names)
    case = small_cases(per_domain=1, tenant="acme")[0]
    url = f"http://127.0.0.1:{free_port()}/v1"  # where `dpm model up` would serve, never started
    model = {"DPM_BACKEND": "openai", "DPM_MODEL": "local-model", "DPM_OPENAI_BASE_URL": url,
             "DPM_OPENAI_API_KEY": "sk-never-shown", "DPM_MODEL_MAX_RETRIES": "0"}  # fmt: skip
    env = {**worker_env(kafka_bootstrap, topic_names, tmp_path), **model}
    with DecisionMemory("acme", settings=client_settings(kafka_bootstrap, topic_names, tmp_path)) as memory:
        memory.append_many("case-1", [(e.kind, e.text) for e in case.trajectory.events])
        with pipeline_processes([["worker"]], env, tmp_path / "logs"), pytest.raises(DecisionRefusedError) as refused:
            memory.decide("case-1", task=case.task, budget=2_000, timeout=120)
    assert refused.value.reason == "model-error"
    detail = refused.value.detail
    assert detail.startswith(f"the model failed 3 times: Chat Completions at {url}: connection refused")
    assert "dpm model up" in detail
    assert "DPM_OPENAI_BASE_URL" in detail
    assert "DPM_BACKEND=extractive" in detail
    log = (tmp_path / "logs" / "worker-0.log").read_text()
    assert f"dead-lettered model-error: {detail}" in log
    assert "sk-never-shown" not in log + detail
    assert not any(e.text in log + detail for e in case.trajectory.events)
