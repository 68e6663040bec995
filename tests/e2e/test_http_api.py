"""`dpm api` against a running worker: a tenant's whole round trip over HTTP, its limits, and a kill mid-batch."""

from __future__ import annotations

import contextlib
import itertools
import signal
import threading
from pathlib import Path

import httpx
import pytest

from pipeline.api.app import DecisionOut
from pipeline.core.events import CaseRef
from pipeline.kafka.cluster.partitioning import case_partition
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.keys.store import CaseKeys
from pipeline.services.api_keys import ApiKeys
from pipeline.services.cluster import pipeline_processes
from tests.conftest import free_port
from tests.integration.test_client_appends import case_log
from tests.pipeline_support import create_topics, small_cases, worker_env
from tests.processes import await_http

pytestmark = [pytest.mark.e2e, pytest.mark.any_broker]  # the door's own behaviour


def test_a_tenant_appends_decides_explains_replays_and_lists_over_http(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    create_topics(kafka_config, topic_names)
    case = small_cases(per_domain=1, tenant="acme")[0]
    keys = ApiKeys(tmp_path / "api-keys.json")
    acme, globex = keys.add("acme")[1], keys.add("globex")[1]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**worker_env(kafka_bootstrap, topic_names, tmp_path), "DPM_API_KEYS_FILE": str(keys.path),
           "DPM_API_MAX_BODY_BYTES": "4000000"}  # fmt: skip
    steps = {"events": [{"kind": e.kind, "text": e.text} for e in case.trajectory.events]}
    with pipeline_processes([["worker"], ["api", "--port", str(port)]], env, tmp_path / "logs"):
        await_http(base)
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {acme}"}, timeout=180) as http:
            appended = http.post("/v1/cases/case-7/events", json=steps)
            too_large = http.post("/v1/cases/case-7/events", json={"events": [{"kind": "document",
                                                                                "text": "x" * 999_000}]})  # fmt: skip
            task = {"domain": case.task.domain, "task": case.task.task, "label_space": list(case.task.label_space)}
            decided = http.post("/v1/cases/case-7/decisions", json={"task": task, "budget_chars": 2_000, "wait_s": 60})
            decision_id = decided.json()["decision_id"]
            explained = http.get(f"/v1/decisions/{decision_id}/explanation")
            replayed = http.get(f"/v1/decisions/{decision_id}/replay")
            reasons = http.get(f"/v1/decisions/{decision_id}/reasons")
            contests = http.get(f"/v1/decisions/{decision_id}/contests")
            listed = http.get("/v1/cases/case-7/decisions")
            pages = [http.get("/v1/cases/case-7/decisions", params=asked).json()
                     for asked in ({"limit": 1}, {"after": decision_id}, {"after": "none-such:dpm"})]  # fmt: skip
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {globex}"}, timeout=60) as other:
            theirs = [other.get(f"/v1/decisions/{decision_id}{tail}").status_code
                      for tail in ("", "/explanation", "/replay", "/reasons", "/contests")]  # fmt: skip
            their_list = other.get("/v1/cases/case-7/decisions").json()
    assert appended.status_code == 201
    assert [e["seq"] for e in appended.json()["events"]] == list(range(1, len(case.trajectory) + 1))
    assert too_large.status_code == 413
    problem = too_large.json()
    assert problem["type"].endswith("/event-too-large")
    assert "events[0]" in problem["detail"]
    assert "x" * 20 not in problem["detail"]  # the size named, never the value
    assert decided.status_code == 200
    body = decided.json()
    assert DecisionOut.model_validate(body).model_dump() == body  # the answer is exactly the documented shape
    assert body["label"] in case.task.label_space
    assert explained.status_code == 200
    assert explained.json()["events_unreadable"] is None
    assert all(f["citations_valid"] for f in explained.json()["facts"])
    assert replayed.json()["status"] == "MATCH"
    if body["label"] == "APPROVE":  # owes no reasons: told so as a problem
        assert (reasons.status_code, reasons.json()["type"].rsplit("/", 1)[-1]) == (409, "not-adverse")
    else:
        assert reasons.status_code == 200, reasons.text
    assert listed.json() == {"case_id": "case-7", "decision_ids": [decision_id], "next_after": None}
    # a full page says where the next starts
    assert [(p["decision_ids"], p["next_after"]) for p in pages[:2]] == [([decision_id], decision_id), ([], None)]
    assert pages[2]["type"].endswith("/unknown-cursor")  # a cursor that is none of the case's: refused, not page one
    assert contests.json() == {"decision_id": decision_id, "contests": []}  # reasons are computed, not recorded
    assert theirs == [404, 404, 404, 404, 404]  # another tenant's key: as unknown, never 403
    assert their_list["decision_ids"] == []


def _one_case_per_partition(tenant: str, prefix: str, count: int, *, partitions: int) -> list[str]:
    """`count` case ids of `tenant` whose events fall on different partitions."""
    found: dict[int, str] = {}
    for n in itertools.count():
        case_id = f"{prefix}-{n}"
        found.setdefault(case_partition(CaseRef(tenant, case_id), partitions), case_id)
        if len(found) == count:
            return list(found.values())
    raise AssertionError("unreachable")


def test_the_api_killed_mid_batch_leaves_each_batch_whole_or_absent(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    create_topics(kafka_config, topic_names)
    keys = ApiKeys(tmp_path / "api-keys.json")
    acme = keys.add("acme")[1]
    env = {**worker_env(kafka_bootstrap, topic_names, tmp_path), "DPM_API_KEYS_FILE": str(keys.path),
           "DPM_API_MAX_BODY_BYTES": "8000000"}  # fmt: skip
    batch = {"events": [{"kind": "document", "text": f"page {n}: " + "terms and conditions " * 200}
                        for n in range(400)]}  # fmt: skip
    # A writer killed inside its transaction holds read_committed readers of its partition back at
    # that transaction until the broker aborts it (the transaction timeout): each round's case has a
    # partition of its own, so a later round's committed opening is not hidden behind an earlier kill.
    cases = _one_case_per_partition("acme", "kill", 3, partitions=3)
    outcomes: list[list[tuple[int, str]]] = []
    for round_, delay_s in enumerate((0.05, 0.3, 0.8)):
        case_id = cases[round_]
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        with pipeline_processes([["api", "--port", str(port)]], env, tmp_path / f"logs-{round_}") as (api,):
            await_http(base)
            with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {acme}"}, timeout=60) as http:
                opened = http.post(f"/v1/cases/{case_id}/events", json={"events": [{"kind": "note", "text": "opened"}]})
                assert opened.status_code == 201, opened.text
                killer = threading.Timer(delay_s, api.send_signal, (signal.SIGKILL,))
                killer.start()
                with contextlib.suppress(httpx.HTTPError):  # the process dies under the request (or just after it)
                    http.post(f"/v1/cases/{case_id}/events", json=batch)
                killer.join()
            assert api.wait(10) == -signal.SIGKILL
        outcomes.append(case_log(kafka_config, topic_names, CaseRef("acme", case_id), case_keys))
    for log in outcomes:
        assert len(log) in (1, 1 + len(batch["events"])), "a batch is appended whole or not at all"
        assert [seq for seq, _ in log] == list(range(1, len(log) + 1))
