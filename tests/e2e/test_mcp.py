"""`dpm mcp` driven by the official MCP SDK's client: steps appended as tool calls, a decision back, explained."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import TextResourceContents

from pipeline.bench.generate import GenerationSpec, generate_cases
from pipeline.config.settings import Settings
from pipeline.core.events import CaseRef
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.services.api_keys import ApiKeys
from pipeline.services.cluster import pipeline_processes
from pipeline.services.erase import erase_case
from tests.conftest import free_port
from tests.pipeline_support import create_topics, small_cases, worker_env

pytestmark = [pytest.mark.e2e, pytest.mark.any_broker]  # this door's own behaviour


def _structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    data: dict[str, Any] = result.structured_content
    inner: dict[str, Any] = data.get("result", data)  # the SDK wraps a value that is not an object
    return inner


Done = tuple[list[int], dict[str, Any], dict[str, Any], list[str], Any]  # seqs, decision, explanation, list, reasons


async def _agent(client: Client, steps: list[tuple[str, str]], domain: str) -> Done:
    """What an agent does: its steps as tool calls, then a decision, its explanation, the case's decisions."""
    seqs = [_structured(await client.call_tool("append_event", {"case_id": "case-7", "kind": k, "text": t}))["seq"]
            for k, t in steps]  # fmt: skip
    asked = {"case_id": "case-7", "domain": domain, "budget_chars": 2000, "wait_s": 60}
    decided = _structured(await client.call_tool("request_decision", asked))
    explained = _structured(await client.call_tool("explain_decision", {"decision_id": decided["decision_id"]}))
    [listed] = (await client.read_resource("dpm://cases/case-7/decisions")).contents
    assert isinstance(listed, TextResourceContents)
    reasons = await client.call_tool("decision_reasons", {"decision_id": decided["decision_id"]})
    contests = await client.call_tool("decision_contests", {"decision_id": decided["decision_id"]})
    assert contests.structured_content == {"result": []}  # none yet: the reasons above are computed, not recorded
    return seqs, decided, explained, json.loads(listed.text), reasons


def test_an_agent_over_stdio_appends_its_steps_and_gets_a_cited_decision(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    create_topics(kafka_config, topic_names)
    case = small_cases(per_domain=1, tenant="acme")[0]
    steps = [(e.kind, e.text) for e in case.trajectory.events[:8]]
    env = worker_env(kafka_bootstrap, topic_names, tmp_path)
    server = StdioServerParameters(command=sys.executable, args=["-m", "pipeline", "mcp", "--tenant", "acme"],
                                   env={**env, "DPM_KEYS_DIR": os.environ["DPM_KEYS_DIR"]})  # fmt: skip

    settings = Settings.from_env({**env, "DPM_KEYS_DIR": os.environ["DPM_KEYS_DIR"]})
    after_erasure: list[Any] = []

    async def run() -> tuple[list[int], dict[str, Any], dict[str, Any], list[str], Any, list[str]]:
        async with Client(server) as client:
            tools = sorted(t.name for t in (await client.list_tools()).tools)
            done = await _agent(client, steps, case.task.domain)
            # erased by another process (`dpm erase`): the server's client learns it from the key topic
            await anyio.to_thread.run_sync(erase_case, settings, CaseRef("acme", "case-7"))
            await anyio.sleep(3)
            after_erasure.extend([
                await client.call_tool("get_decision", {"decision_id": done[1]["decision_id"], "wait_s": 5}),
                await client.call_tool("append_event", {"case_id": "case-7", "kind": "note", "text": "later"}),
            ])  # fmt: skip
            return (*done, tools)

    with pipeline_processes([["worker"]], env, tmp_path / "logs"):
        seqs, decided, explained, listed, reasons, tools = anyio.run(run)
    for refused in after_erasure:  # the reply the server's client kept is gone with the key
        assert refused.is_error
        assert "was erased" in refused.content[0].text
    assert tools == ["append_event", "decision_contests", "decision_reasons", "explain_decision", "get_decision",
                     "request_decision"]  # fmt: skip
    assert seqs == list(range(1, 9))
    assert decided["label"] in case.task.label_space
    assert all(c["text"] == steps[c["seq"] - 1][1] for f in explained["facts"] for c in f["cites"])
    assert listed == [decided["decision_id"]]
    _check_reasons(decided, reasons)


def _check_reasons(decided: dict[str, Any], reasons: Any) -> list[dict[str, Any]]:
    """An adverse decision's reasons (returned) each change it or are in its notice; an approval owes none."""
    if decided["label"] == "APPROVE":  # a tool error says so
        assert reasons.is_error
        assert "owes no reasons" in reasons.content[0].text
        return []
    given = _structured(reasons)
    assert (given["decision_id"], given["label"]) == (decided["decision_id"], decided["label"])
    assert given["heading"].startswith("Principal reasons for the adverse action")
    assert "not legal advice" in given["note"]
    assert all(r["changes_decision"] or r["in_notice"] for r in given["reasons"])
    return list(given["reasons"])


def test_over_http_each_request_acts_for_its_api_key_s_tenant(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    create_topics(kafka_config, topic_names)
    _, case = generate_cases(GenerationSpec(domains=("loan",), per_domain=2, events=(24, 30), chars=(6_000, 7_500),
                                            tenant="acme"))  # fmt: skip
    assert case.label == "DENY"  # whole, so that its decision is adverse and owes reasons
    steps = [(e.kind, e.text) for e in case.trajectory.events]
    keys = ApiKeys(tmp_path / "api-keys.json")
    acme, globex = keys.add("acme")[1], keys.add("globex")[1]
    port = free_port()
    env = {**worker_env(kafka_bootstrap, topic_names, tmp_path), "DPM_API_KEYS_FILE": str(keys.path)}
    url = f"http://127.0.0.1:{port}/mcp"

    async def as_tenant(key: str, work: Any) -> Any:
        async with AsyncExitStack() as stack:
            http = await stack.enter_async_context(httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"},
                                                                      timeout=180))  # fmt: skip
            client = await stack.enter_async_context(Client(streamable_http_client(url, http_client=http)))
            return await work(client)

    async def run() -> tuple[Any, Any, Any]:
        _, decided, _, _, reasons = await as_tenant(acme, lambda c: _agent(c, steps, case.task.domain))
        other = await as_tenant(globex, lambda c: c.call_tool("get_decision", {"decision_id": decided["decision_id"]}))
        return decided, reasons, other

    with pipeline_processes([["worker"], ["mcp", "--http", "--port", str(port)]], env, tmp_path / "logs"):
        _await_up(f"http://127.0.0.1:{port}/mcp")
        refused = _status(url, "Bearer dpm_unknown_key")
        decided, reasons, other = anyio.run(run)
    assert refused == 401
    assert decided["label"] == "DENY"
    assert _check_reasons(decided, reasons)  # a denial of the whole case has reasons (as `dpm explain --reasons`)
    assert other.is_error  # globex's key does not reach acme's decision
    assert "no decision" in other.content[0].text


def _status(url: str, authorization: str) -> int:
    request = urllib.request.Request(url, data=b"{}", headers={"Authorization": authorization,  # noqa: S310 - loopback
                                                               "Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - loopback
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def _await_up(url: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while _reachable(url) is False:
        assert time.monotonic() < deadline, f"{url} did not come up"
        time.sleep(0.5)


def _reachable(url: str) -> bool:
    try:
        _status(url, "Bearer x")
    except OSError:
        return False
    return True
