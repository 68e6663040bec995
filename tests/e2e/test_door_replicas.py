"""Door replicas divide the events partitions through the doors' group and forward an append to its owner."""

from __future__ import annotations

import contextlib
import itertools
import signal
import threading
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from confluent_kafka import ConsumerGroupState
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from pipeline.core.events import CaseRef
from pipeline.kafka.cluster.admin import admin_client
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.keys.store import CaseKeys
from pipeline.services.api_keys import ApiKeys
from pipeline.services.cluster import pipeline_processes
from pipeline.services.door_routes import VIA
from tests.conftest import free_port
from tests.integration.test_client_appends import case_log
from tests.pipeline_support import create_topics, worker_env
from tests.processes import await_http

pytestmark = [pytest.mark.e2e, pytest.mark.any_broker]


def _await_doors(config: dict[str, str], names: TopicNames, members: int, timeout_s: float = 60) -> None:
    """Until the doors' group is stable with `members` members, each holding partitions."""
    admin = admin_client(config)
    deadline = time.monotonic() + timeout_s
    while True:
        group = admin.describe_consumer_groups([names.doors_group])[names.doors_group].result(10)
        holding = [m for m in group.members if m.assignment.topic_partitions]
        if group.state == ConsumerGroupState.STABLE and len(holding) == members == len(group.members):
            time.sleep(2.5)  # each door describes the group at least every 2 s
            return
        assert time.monotonic() < deadline, f"the doors' group did not settle: {group.state}, {len(group.members)}"
        time.sleep(0.3)


def _door_env(bootstrap: str, names: TopicNames, home: Path, keys: ApiKeys) -> dict[str, str]:
    return {**worker_env(bootstrap, names, home), "DPM_API_KEYS_FILE": str(keys.path),
            "DPM_API_MAX_BODY_BYTES": "8000000"}  # fmt: skip


def test_two_doors_append_one_case_alternately_through_its_owner_without_a_conflict(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    create_topics(kafka_config, topic_names)
    keys = ApiKeys(tmp_path / "api-keys.json")
    acme = keys.add("acme")[1]
    ports = [free_port(), free_port()]
    bases = [f"http://127.0.0.1:{p}" for p in ports]
    cases = [f"alt-{n}" for n in range(8)]
    answers: list[tuple[str, int, int, bool]] = []  # (case, door, status, forwarded)
    env = _door_env(kafka_bootstrap, topic_names, tmp_path, keys)
    with pipeline_processes([["api", "--port", str(p)] for p in ports], env, tmp_path / "logs"):
        for base in bases:
            await_http(base)
        _await_doors(kafka_config, topic_names, members=2)
        doors = [httpx.Client(base_url=b, headers={"Authorization": f"Bearer {acme}"}, timeout=60) for b in bases]
        for step, case_id in itertools.product(range(4), cases):
            door = step % 2
            body = {"events": [{"kind": "note", "text": f"step {step + 1} of {case_id}"}]}
            sent = doors[door].post(
                f"/v1/cases/{case_id}/events", json=body, headers={"Idempotency-Key": f"{case_id}-{step}"}
            )
            answers.append((case_id, door, sent.status_code, sent.headers.get("via") == VIA))
        # a retry of the last step through the other door answers as the first and writes nothing
        last = {"events": [{"kind": "note", "text": f"step 4 of {cases[0]}"}]}
        again = doors[0].post(f"/v1/cases/{cases[0]}/events", json=last, headers={"Idempotency-Key": f"{cases[0]}-3"})
        for http in doors:
            http.close()
    assert {status for *_, status, _ in answers} == {201}, answers
    assert again.status_code == 201
    for case_id in cases:
        mine = [(door, forwarded) for case, door, _, forwarded in answers if case == case_id]
        # one door owns the case: its answers are its own, the other's are forwarded to it
        owner = next(door for door, forwarded in mine if not forwarded)
        assert all(forwarded == (door != owner) for door, forwarded in mine), (case_id, mine)
        log = case_log(kafka_config, topic_names, CaseRef("acme", case_id), case_keys)
        assert [seq for seq, _ in log] == [1, 2, 3, 4]
    owners = {next(d for c, d, _, f in answers if c == case_id and not f) for case_id in cases}
    assert owners == {0, 1}, "both doors own some of the cases' partitions"


def test_a_door_killed_mid_batch_loses_nothing_and_its_partitions_are_appended_by_the_others(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    create_topics(kafka_config, topic_names)
    keys = ApiKeys(tmp_path / "api-keys.json")
    acme = keys.add("acme")[1]
    ports = [free_port(), free_port()]
    bases = [f"http://127.0.0.1:{p}" for p in ports]
    env = _door_env(kafka_bootstrap, topic_names, tmp_path, keys)
    batch = {"events": [{"kind": "document", "text": f"page {n}: " + "terms and conditions " * 200}
                        for n in range(400)]}  # fmt: skip
    with pipeline_processes([["api", "--port", str(p)] for p in ports], env, tmp_path / "logs") as (_, doomed):
        for base in bases:
            await_http(base)
        _await_doors(kafka_config, topic_names, members=2)
        survivor = httpx.Client(base_url=bases[0], headers={"Authorization": f"Bearer {acme}"}, timeout=60)
        victim = httpx.Client(base_url=bases[1], headers={"Authorization": f"Bearer {acme}"}, timeout=60)
        # a case the doomed door owns: appended through the survivor, which forwards it
        opening = {"events": [{"kind": "note", "text": "opened"}]}
        case_id = next(c for c in (f"kill-{n}" for n in range(200))
                       if survivor.post(f"/v1/cases/{c}/events", json=opening).headers.get("via") == VIA)  # fmt: skip
        killer = threading.Timer(0.3, doomed.send_signal, (signal.SIGKILL,))
        killer.start()
        with contextlib.suppress(httpx.HTTPError):  # the door dies under the batch (or just after it)
            victim.post(f"/v1/cases/{case_id}/events", json=batch, headers={"Idempotency-Key": f"{case_id}-batch"})
        killer.join()
        assert doomed.wait(10) == -signal.SIGKILL
        started = time.monotonic()
        retried = survivor.post(
            f"/v1/cases/{case_id}/events", json=batch, headers={"Idempotency-Key": f"{case_id}-batch"}
        )
        retry_s = time.monotonic() - started
        after = survivor.post(f"/v1/cases/{case_id}/events", json={"events": [{"kind": "note", "text": "after"}]})
        survivor.close()
        victim.close()
    assert retried.status_code == 201, retried.text
    assert retried.headers.get("via") is None, "the owner refused the connection: appended by the survivor"
    assert retry_s < 15, f"the retry took {retry_s:.1f} s (at most the dead writer's transaction timeout)"
    assert after.status_code == 201, after.text
    log = case_log(kafka_config, topic_names, CaseRef("acme", case_id), case_keys)
    assert [seq for seq, _ in log] == list(range(1, 2 + len(batch["events"]) + 1)), "the batch written once, whole"


def test_an_mcp_door_and_an_http_door_share_the_partitions_and_forward_to_each_other(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    create_topics(kafka_config, topic_names)
    keys = ApiKeys(tmp_path / "api-keys.json")
    acme = keys.add("acme")[1]
    api_port, mcp_port = free_port(), free_port()
    base = f"http://127.0.0.1:{api_port}"
    cases = [f"mixed-{n}" for n in range(6)]
    env = _door_env(kafka_bootstrap, topic_names, tmp_path, keys)

    async def by_mcp(case_id: str, text: str) -> Any:
        async with AsyncExitStack() as stack:
            http = await stack.enter_async_context(httpx2.AsyncClient(headers={"Authorization": f"Bearer {acme}"},
                                                                      timeout=60))  # fmt: skip
            client = await stack.enter_async_context(
                Client(streamable_http_client(f"http://127.0.0.1:{mcp_port}/mcp", http_client=http))
            )
            return await client.call_tool("append_event", {"case_id": case_id, "kind": "note", "text": text})

    commands = [["api", "--port", str(api_port)], ["mcp", "--http", "--port", str(mcp_port)]]
    with pipeline_processes(commands, env, tmp_path / "logs"):
        await_http(base)
        _await_doors(kafka_config, topic_names, members=2)
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {acme}"}, timeout=60) as http:
            by_http = [http.post(f"/v1/cases/{c}/events", json={"events": [{"kind": "note", "text": "one"}]})
                       for c in cases]  # fmt: skip
            tools = [anyio.run(by_mcp, c, "two") for c in cases]
            again = [http.post(f"/v1/cases/{c}/events", json={"events": [{"kind": "note", "text": "three"}]})
                     for c in cases]  # fmt: skip
    assert [a.status_code for a in by_http + again] == [201] * 2 * len(cases)
    assert [t.is_error for t in tools] == [False] * len(cases), [t.content for t in tools]
    forwarded = [a.headers.get("via") == VIA for a in by_http]
    assert any(forwarded), "the MCP door owns some partitions and takes the HTTP door's forwarded appends"
    assert not all(forwarded)
    for case_id in cases:
        log = case_log(kafka_config, topic_names, CaseRef("acme", case_id), case_keys)
        assert log == [(1, "one"), (2, "two"), (3, "three")]
