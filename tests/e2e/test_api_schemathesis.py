"""`dpm api` on the real broker against its own served OpenAPI document, by schemathesis.

Every phase (the document's examples, its boundaries and their negations, generated requests,
and stateful sequences following the links and Location headers), with a tenant's key and with
the admin key: a 5xx, a status the document does not list, or an answer that violates its schema
fails the test. Bounded by examples per operation, so the tier takes well under two minutes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from pipeline.kafka.cluster.topics import TopicNames
from pipeline.services.api_keys import ADMIN, ApiKeys
from pipeline.services.cluster import pipeline_processes
from tests.conftest import free_port
from tests.pipeline_support import create_topics, worker_env
from tests.processes import await_http

pytestmark = [pytest.mark.e2e, pytest.mark.any_broker]  # the door's own contract

_CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"
_MAX_EXAMPLES = 12  # per operation and phase: eight operations, two keys, about a minute on two cores


def _schemathesis(base: str, key: str, reports: Path) -> subprocess.CompletedProcess[str]:
    command = [str(Path(sys.executable).parent / "schemathesis"), "run", f"{base}/openapi.json",
               "--url", base, "--phases", "examples,coverage,fuzzing,stateful", "--checks", _CHECKS,
               "--max-examples", str(_MAX_EXAMPLES), "--header", f"Authorization: Bearer {key}",
               "--request-timeout", "30", "--seed", "46", "--continue-on-failure",
               "--report", "junit", "--report-dir", str(reports)]  # fmt: skip
    # run in the report directory: schemathesis keeps its cache of crashes in its working directory
    reports.mkdir(parents=True, exist_ok=True)
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, cwd=reports)


def test_the_served_openapi_holds_for_every_answer_with_a_tenant_s_key_and_the_admin_key(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    create_topics(kafka_config, topic_names)
    keys = ApiKeys(tmp_path / "api-keys.json")
    acme, admin = keys.add("acme")[1], keys.add(ADMIN)[1]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    # no worker: a decision asked for answers 202 within the short maximum wait, as documented
    env = {**worker_env(kafka_bootstrap, topic_names, tmp_path), "DPM_API_KEYS_FILE": str(keys.path),
           "DPM_API_MAX_WAIT_S": "1", "DPM_API_RATE_PER_S": "10000"}  # fmt: skip
    with pipeline_processes([["api", "--port", str(port)]], env, tmp_path / "logs"):
        await_http(base)
        appended = httpx.post(f"{base}/v1/cases/case-1/events", headers={"Authorization": f"Bearer {acme}"},
                              json={"events": [{"kind": "document", "text": "income 84,000"}]}, timeout=60)  # fmt: skip
        assert appended.status_code == 201, appended.text
        runs = {who: _schemathesis(base, key, tmp_path / who) for who, key in (("tenant", acme), ("admin", admin))}
    log = "\n".join(p.read_text() for p in (tmp_path / "logs").iterdir())
    for who, run in runs.items():
        assert run.returncode == 0, f"with the {who} key:\n{run.stdout[-6000:]}\n{run.stderr[-2000:]}"
    assert "Traceback" not in log, log[-4000:]
