"""The front door's cost (`make bench` section `api`): what a decision pays for the client and the HTTP API.

Overhead of one decision = time from the call to the decision in hand, minus the worker's part:
from the trigger record's timestamp to the decision record's (queueing at the worker included).
What is left is the door: registering the case and sending the trigger in a transaction, the
reply reaching the waiting call through the one replies reader, the cited events read back, and
for HTTP the request and the JSON. Measured with 1, 50 and 500 decisions asked at once, the
offline backend, two workers, side by side on one broker.
"""

from __future__ import annotations

import asyncio
import gc
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import orjson

from pipeline.client import AsyncDecisionMemory
from pipeline.config.settings import Settings
from pipeline.kafka.local_broker import free_cluster_port
from pipeline.kafka.range_reads import read_topic
from pipeline.kafka.topics import TopicNames, create_pipeline_topics
from pipeline.services.api_keys import ApiKeys
from pipeline.services.cluster import child_env, pipeline_processes

WAITERS = tuple(int(n) for n in os.environ.get("DPM_BENCH_API_WAITERS", "1,50,500").split(","))
PARTITIONS = 6
STEPS = [("document", "Application: loan of 120,000 over 20 years."),
         ("tool", "Credit bureau: score 712, no defaults on record."),
         ("document", "Applicant income verified: 84,000 per year.")]  # fmt: skip
TARGETS = {"overhead_p50_ms": 30.0, "overhead_p99_ms": 150.0, "waiters_1000_rss_mb": 50.0}

Timed = tuple[str, float, float]  # decision id, called at, in hand at (time.time seconds)


def measure(bootstrap: str, workdir: Path) -> dict[str, Any]:
    """The `api` section of the figures file."""
    names = TopicNames(f"bench-api-{uuid.uuid4().hex[:8]}")
    config = {"bootstrap.servers": bootstrap}
    create_pipeline_topics(config, names, PARTITIONS, replication=1)
    env = child_env(bootstrap, names.prefix, DPM_HOME=str(workdir), DPM_BACKEND="extractive",
                    DPM_KEYS_DIR=str(workdir / "keys"), DPM_API_KEYS_FILE=str(workdir / "api-keys.json"),
                    DPM_API_RATE_PER_S="100000")  # fmt: skip
    settings = Settings.from_env(env)
    key = ApiKeys(workdir / "api-keys.json").add("bench")[1]
    port = free_cluster_port(1)
    commands = [["worker"], ["worker"], ["api", "--port", str(port)]]
    rows: list[dict[str, Any]] = []
    with pipeline_processes(commands, env, workdir / f"logs-{names.prefix}"):
        _await_api(port)
        memory = AsyncDecisionMemory("bench", settings=settings)
        try:
            for path in ("client", "http"):  # warm: the replies reader started, connections made (not counted)
                asyncio.run(_decisions(path, 2, memory, port, key))
            for waiters in WAITERS:
                for path in ("client", "http"):
                    timed = asyncio.run(_decisions(path, waiters, memory, port, key))
                    rows.append(_row(path, waiters, timed, config, names))
            appends_per_s = asyncio.run(_http_appends(port, key))
        finally:
            asyncio.run(memory.close())
    return {"rows": rows, "http_appends_per_s": appends_per_s, "waiters_1000_rss_mb": waiting_memory_mb(settings),
            "workers": 2, "backend": "extractive", "targets": TARGETS}  # fmt: skip


async def _decisions(path: str, waiters: int, memory: AsyncDecisionMemory, port: int, key: str) -> list[Timed]:
    """`waiters` cases, their steps appended first, then a decision of each asked for at once."""
    run = uuid.uuid4().hex[:6]
    cases = [f"{path}-{run}-{n}" for n in range(waiters)]
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=300,
                                 headers={"Authorization": f"Bearer {key}"},
                                 limits=httpx.Limits(max_connections=waiters)) as http:  # fmt: skip
        for case in cases:  # the agent's steps first, through the same door (its case's writer is then warm)
            if path == "client":
                await memory.append_many(case, STEPS)
            else:
                body = {"events": [{"kind": kind, "text": text} for kind, text in STEPS]}
                (await http.post(f"/v1/cases/{case}/events", json=body)).raise_for_status()
        ask: Callable[[str], Awaitable[Timed]] = (
            (lambda case: _by_client(memory, case)) if path == "client" else (lambda case: _by_http(http, case))
        )
        return list(await asyncio.gather(*(ask(case) for case in cases)))


async def _by_client(memory: AsyncDecisionMemory, case: str) -> Timed:
    called = time.time()
    decision = await memory.decide(case, domain="loan", budget=2_000, timeout=300)
    return decision.decision_id, called, time.time()


async def _by_http(http: httpx.AsyncClient, case: str) -> Timed:
    called = time.time()
    answer = await http.post(f"/v1/cases/{case}/decisions", json={"domain": "loan", "budget_chars": 2_000,
                                                                   "wait_s": 300})  # fmt: skip
    answer.raise_for_status()
    return str(answer.json()["decision_id"]), called, time.time()


def _row(path: str, waiters: int, timed: list[Timed], config: dict[str, str], names: TopicNames) -> dict[str, Any]:
    """p50/p99 of the overhead: each call's time minus its worker's part (trigger to decision, by record times)."""
    triggered = {}
    for record in read_topic(config, names.triggers):
        trigger_id = orjson.loads(record.value or b"{}").get("trigger_id")
        triggered[f"{trigger_id}:dpm"] = record.timestamp_ms or 0
    decided = {(r.key or b"").decode(): r.timestamp_ms or 0 for r in read_topic(config, names.decisions)}
    overheads = [(done - called) * 1000 - (decided[d] - triggered[d]) for d, called, done in timed]
    q = statistics.quantiles(overheads, n=100) if len(overheads) > 1 else [overheads[0]] * 99
    total = statistics.median((done - called) * 1000 for _, called, done in timed)
    return {"path": path, "waiters": waiters, "overhead_p50_ms": round(q[49], 1), "overhead_p99_ms": round(q[98], 1),
            "total_p50_ms": round(total, 1)}  # fmt: skip


async def _http_appends(port: int, key: str, seconds: float = 5.0, concurrency: int = 8) -> float:
    """Appends per second over HTTP, `concurrency` agents each appending one step at a time to a case of its own."""
    stop = time.monotonic() + seconds
    done = 0

    async def agent(http: httpx.AsyncClient, n: int) -> None:
        nonlocal done
        case = f"appends-{uuid.uuid4().hex[:6]}-{n}"
        while time.monotonic() < stop:
            answer = await http.post(f"/v1/cases/{case}/events", json={"events": [{"kind": "tool", "text": "step"}]})
            answer.raise_for_status()
            done += 1

    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60,
                                 headers={"Authorization": f"Bearer {key}"}) as http:  # fmt: skip
        started = time.monotonic()
        await asyncio.gather(*(agent(http, n) for n in range(concurrency)))
        return round(done / (time.monotonic() - started), 1)


def waiting_memory_mb(settings: Settings, calls: int = 1_000) -> float:
    """The resident memory 1,000 waiting calls add to one process (each a coroutine on its decision's future)."""
    memory = AsyncDecisionMemory("bench-rss", settings=settings)

    async def wait_many() -> float:
        gc.collect()
        before = _rss_kb()
        waits = [asyncio.ensure_future(memory.wait(f"t-{uuid.uuid4().hex}:dpm", timeout=600)) for _ in range(calls)]
        await asyncio.sleep(1.0)  # every call is waiting now
        after = _rss_kb()
        for wait in waits:
            wait.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
        return round((after - before) / 1024, 2)

    try:
        return asyncio.run(wait_many())
    finally:
        asyncio.run(memory.close())


def _rss_kb() -> int:
    for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _await_api(port: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/openapi.json", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit("dpm api did not come up")
