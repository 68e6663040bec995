"""`dpm api` on the real broker, sent what an attacker or a careless agent sends: 4xx problems, never a 5xx.

Each refusal names the field and never the value, in the answer and in the server's log; erasing
is idempotent; with tenancy by topic, a key whose tenant has no topics answers 404.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.reading.range_reads import read_topic
from pipeline.services.api_keys import ADMIN, ApiKeys
from pipeline.services.cluster import pipeline_processes
from tests.conftest import free_port
from tests.pipeline_support import create_topics, worker_env
from tests.processes import await_http

pytestmark = [pytest.mark.e2e, pytest.mark.any_broker]  # the door's own behaviour

PRIVATE = "PRIVATE-4711"  # in every refused value: found in no answer and no log line


def _serve(env: dict[str, str], logs: Path, asks: list[tuple[str, str, str, dict[str, object] | None]],
           headers: dict[str, str] | None = None) -> list[int]:  # fmt: skip
    """The statuses of (method, path, key, JSON body) asked of a fresh `dpm api`, each on its own connection."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    statuses: list[int] = []
    with pipeline_processes([["api", "--port", str(port)]], env, logs):
        await_http(base)
        for method, path, key, body in asks:
            answer = httpx.request(method, base + path, json=body,
                                   headers={"Authorization": f"Bearer {key}", **(headers or {})},
                                   timeout=60)  # fmt: skip
            assert PRIVATE not in answer.text
            statuses.append(answer.status_code)
    log = "\n".join(p.read_text() for p in logs.iterdir())
    assert PRIVATE not in log
    assert "Traceback" not in log, log[-3000:]
    return statuses


def test_hostile_input_and_repeated_erasure_answer_4xx_or_204_and_the_log_holds_no_value(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    create_topics(kafka_config, topic_names)
    keys = ApiKeys(tmp_path / "api-keys.json")
    acme, admin = keys.add("acme")[1], keys.add(ADMIN)[1]
    env = {**worker_env(kafka_bootstrap, topic_names, tmp_path), "DPM_API_KEYS_FILE": str(keys.path)}

    def events(kind: str, text: str) -> dict[str, object]:
        return {"events": [{"kind": kind, "text": text}]}

    task = {"domain": "loan", "task": PRIVATE, "label_space": [PRIVATE, PRIVATE]}
    asks: list[tuple[str, str, str, dict[str, object] | None]] = [
        ("POST", "/v1/cases/c-1/events", acme, events(f"a\x01{PRIVATE}", PRIVATE)),
        ("POST", "/v1/cases/c-1/events", acme, events(f"a\x7f{PRIVATE}", PRIVATE)),
        ("POST", "/v1/cases/c-1/events", acme, events(f"a\n{PRIVATE}", PRIVATE)),
        ("POST", "/v1/cases/c-1/events", acme, events("note", f"{PRIVATE}\x00")),
        ("POST", "/v1/cases/c-1/events", acme, events("note", "written")),
        ("POST", "/v1/cases/c-1/decisions", acme, {"task": task, "wait_s": 0}),
        ("GET", f"/v1/decisions/{PRIVATE}", acme, None),
        ("DELETE", "/v1/tenants/acme/cases/never-written", admin, None),
        ("DELETE", "/v1/tenants/acme/cases/c-1", admin, None),
        ("DELETE", "/v1/tenants/acme/cases/c-1", admin, None),
        ("DELETE", "/v1/tenants/ACME/cases/c-1", admin, None),
    ]
    statuses = _serve(env, tmp_path / "logs", asks)
    assert statuses == [400, 400, 400, 400, 201, 400, 400, 204, 204, 204, 204]


def test_with_tenancy_by_topic_a_key_whose_tenant_has_no_topics_answers_404(
    kafka_bootstrap: str, topic_names: TopicNames, tmp_path: Path
) -> None:
    env = {**worker_env(kafka_bootstrap, topic_names, tmp_path), "DPM_TENANCY": "topics"}
    subprocess.run([sys.executable, "-m", "pipeline", "tenants", "add", "acme"], env=env, check=True,
                   capture_output=True, timeout=120)  # fmt: skip
    keys = ApiKeys(tmp_path / "api-keys.json")
    acme, globex, admin = keys.add("acme")[1], keys.add("globex")[1], keys.add(ADMIN)[1]
    env["DPM_API_KEYS_FILE"] = str(keys.path)
    asks: list[tuple[str, str, str, dict[str, object] | None]] = [
        ("POST", "/v1/cases/c-1/events", acme, {"events": [{"kind": "note", "text": "acme's"}]}),
        ("GET", "/v1/decisions/k-1:dpm", globex, None),
        ("GET", "/v1/cases/c-1/decisions", globex, None),
        ("POST", "/v1/cases/c-1/events", globex, {"events": [{"kind": "note", "text": PRIVATE}]}),
        ("DELETE", "/v1/tenants/globex/cases/c-1", admin, None),  # nothing of a tenant without topics: erased
    ]
    assert _serve(env, tmp_path / "logs", asks) == [201, 404, 404, 404, 204]


def test_a_key_reused_for_other_events_and_an_erased_case_answer_their_problems_and_write_nothing(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    create_topics(kafka_config, topic_names)
    keys = ApiKeys(tmp_path / "api-keys.json")
    acme, admin = keys.add("acme")[1], keys.add(ADMIN)[1]
    env = {**worker_env(kafka_bootstrap, topic_names, tmp_path), "DPM_API_KEYS_FILE": str(keys.path)}
    step: dict[str, object] = {"events": [{"kind": "note", "text": "score 700"}]}
    other: dict[str, object] = {"events": [{"kind": "note", "text": "score 540"}]}
    asks: list[tuple[str, str, str, dict[str, object] | None]] = [
        ("POST", "/v1/cases/c-2/events", acme, step),
        ("POST", "/v1/cases/c-2/events", acme, step),  # a retry: the first answer, nothing written
        ("POST", "/v1/cases/c-2/events", acme, other),  # the same key, other events: refused
        ("DELETE", "/v1/tenants/acme/cases/c-2", admin, None),
        ("POST", "/v1/cases/c-2/events", acme, other),
        ("GET", "/v1/cases/c-2/decisions", acme, None),
    ]
    statuses = _serve(env, tmp_path / "logs", asks, headers={"Idempotency-Key": "step-1"})
    assert statuses == [201, 201, 422, 204, 410, 410]
    written = {r.key for r in read_topic(kafka_config, topic_names.events) if r.key}
    assert written == {b"acme/c-2/00000001"}  # one event, however often it was sent
