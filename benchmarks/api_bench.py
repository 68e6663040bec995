"""The front door's cost (`make bench` section `api`): what a decision pays for the client and the HTTP API.

Overhead of one decision = time from the call to the decision in hand, minus the pipeline's part:
from the trigger record's timestamp (set when the door produces it) to the moment the committed
decision is first seen by a plain read_committed consumer in this process (the observer: queueing
at the workers, their work and their transaction's commit included). What is left is the door:
preparing and sending the trigger, the reply reaching the waiting call through the client's one
replies reader, the decision opened and typed with its cited events, and for HTTP the request and
the JSON both ways. Measured with 1, 50 and 500 decisions asked at once, the offline backend, two
workers, side by side on one broker.
"""

from __future__ import annotations

import asyncio
import gc
import os
import statistics
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import orjson
from confluent_kafka import Consumer, TopicPartition

from pipeline.client import AsyncDecisionMemory
from pipeline.config.settings import Settings
from pipeline.kafka.cluster.admin import reader_group, topic_partitions
from pipeline.kafka.cluster.topics import TopicNames, create_pipeline_topics
from pipeline.kafka.local.local_broker import free_cluster_port
from pipeline.kafka.reading.range_reads import read_topic
from pipeline.services.api_keys import ApiKeys
from pipeline.services.cluster import child_env, pipeline_processes

WAITERS = tuple(int(n) for n in os.environ.get("DPM_BENCH_API_WAITERS", "1,50,500").split(","))
PARTITIONS = 6
API_WORKERS = int(os.environ.get("DPM_BENCH_API_PROCESSES", "1"))  # `dpm api --workers`
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
                    DPM_API_RATE_PER_S="100000", DPM_API_MAX_WAIT_S="300")  # fmt: skip
    settings = Settings.from_env(env)
    key = ApiKeys(workdir / "api-keys.json").add("bench")[1]
    port = free_cluster_port(1)
    commands = [["worker"], ["worker"], ["api", "--port", str(port), "--workers", str(API_WORKERS)]]
    rows: list[dict[str, Any]] = []
    with pipeline_processes(commands, env, workdir / f"logs-{names.prefix}"), Observer(config, names.decisions) as seen:
        _await_api(port)
        memory = AsyncDecisionMemory("bench", settings=settings)
        try:
            for path in ("client", "http"):  # warm: the replies reader started, connections made (not counted)
                asyncio.run(_decisions(path, 2, memory, port, key))
            for waiters in WAITERS:
                for path in ("client", "http"):
                    timed = asyncio.run(_decisions(path, waiters, memory, port, key))
                    rows.append(_row(path, waiters, timed, config, names, seen=seen))
            appends_per_s = asyncio.run(_http_appends(port, key))
        finally:
            asyncio.run(memory.close())
    return {"rows": rows, "http_appends_per_s": appends_per_s, "waiters_1000_rss_mb": waiting_memory_mb(settings),
            "workers": 2, "backend": "extractive", "targets": TARGETS}  # fmt: skip


async def _decisions(path: str, waiters: int, memory: AsyncDecisionMemory, port: int, key: str) -> list[Timed]:
    """`waiters` cases, their steps appended first, then a decision of each asked for at once."""
    run = uuid.uuid4().hex[:6]
    cases = [f"{path}-{run}-{n}" for n in range(waiters)]
    async with _http_session(port, key, waiters) as http:
        ready = asyncio.Semaphore(16)

        async def steps(case: str) -> None:  # the agent's steps first, through the same door (its writer is warm)
            async with ready:
                if path == "client":
                    await memory.append_many(case, STEPS)
                else:
                    body = {"events": [{"kind": kind, "text": text} for kind, text in STEPS]}
                    await _posted(http, f"/v1/cases/{case}/events", body)

        await asyncio.gather(*(steps(case) for case in cases))
        if path == "http":  # an agent keeps its connection: opening `waiters` of them is not the door's cost
            await asyncio.gather(*(_posted(http, "/healthz", None) for _ in range(waiters)))
        ask: Callable[[str], Awaitable[Timed]] = (
            (lambda case: _by_client(memory, case)) if path == "client" else (lambda case: _by_http(http, case))
        )
        return list(await asyncio.gather(*(ask(case) for case in cases)))


async def _by_client(memory: AsyncDecisionMemory, case: str) -> Timed:
    called = time.time()
    decision = await memory.decide(case, domain="loan", budget=2_000, timeout=300)
    return decision.decision_id, called, time.time()


def _http_session(port: int, key: str, connections: int) -> aiohttp.ClientSession:
    """The agents' HTTP client: aiohttp. (httpx took 340-440 ms here to send 50 concurrent requests to a
    route that does nothing, which aiohttp sent in 15-18 ms: with httpx this would measure httpx.)"""
    return aiohttp.ClientSession(f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key}"},
                                 connector=aiohttp.TCPConnector(limit=connections),
                                 timeout=aiohttp.ClientTimeout(total=300))  # fmt: skip


async def _posted(http: aiohttp.ClientSession, url: str, body: dict[str, Any] | None) -> dict[str, Any]:
    """POSTs the body (GET without one); the answer's JSON, raising for an error status."""
    request = http.post(url, json=body) if body is not None else http.get(url)
    async with request as answer:
        answer.raise_for_status()
        parsed: dict[str, Any] = await answer.json()
        return parsed


async def _by_http(http: aiohttp.ClientSession, case: str) -> Timed:
    called = time.time()
    answer = await _posted(http, f"/v1/cases/{case}/decisions", {"domain": "loan", "budget_chars": 2_000,
                                                                 "wait_s": 300})  # fmt: skip
    return str(answer["decision_id"]), called, time.time()


class Observer:
    """A plain read_committed consumer of the decisions topic from its end: when each decision was first visible."""

    def __init__(self, config: dict[str, str], topic: str) -> None:
        self._consumer = Consumer({**config, "group.id": reader_group("bench-observer"), "enable.auto.commit": False,
                                   "isolation.level": "read_committed", "fetch.wait.max.ms": 5})  # fmt: skip
        ends = []
        for partition in range(topic_partitions(config, topic)):
            _, high = self._consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            ends.append(TopicPartition(topic, partition, high))
        self._consumer.assign(ends)
        self.first_seen: dict[str, float] = {}  # decision id -> time.time() seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():  # as the replies reader does: one record waited for, then what else is there
            first = self._consumer.poll(0.2)
            for message in [] if first is None else [first, *self._consumer.consume(500, 0)]:
                if message.error() is None:
                    self.first_seen.setdefault((message.key() or b"").decode(), time.time())

    def __enter__(self) -> Observer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._consumer.close()


def _row(path: str, waiters: int, timed: list[Timed], config: dict[str, str], names: TopicNames,
         *, seen: Observer) -> dict[str, Any]:  # fmt: skip
    """p50/p99 of the overhead: each call's time minus the pipeline's part (trigger record time to decision seen)."""
    triggered = {}
    for record in read_topic(config, names.triggers):
        trigger_id = orjson.loads(record.value or b"{}").get("trigger_id")
        triggered[f"{trigger_id}:dpm"] = (record.timestamp_ms or 0) / 1000
    overheads = [((done - called) - (seen.first_seen[d] - triggered[d])) * 1000 for d, called, done in timed]
    q = statistics.quantiles(overheads, n=100) if len(overheads) > 1 else [overheads[0]] * 99
    total = statistics.median((done - called) * 1000 for _, called, done in timed)
    return {"path": path, "waiters": waiters, "overhead_p50_ms": round(q[49], 1), "overhead_p99_ms": round(q[98], 1),
            "total_p50_ms": round(total, 1)}  # fmt: skip


async def _http_appends(port: int, key: str, seconds: float = 5.0, concurrency: int = 8) -> float:
    """Appends per second over HTTP, `concurrency` agents each appending one step at a time to a case of its own."""
    stop = time.monotonic() + seconds
    done = 0

    async def agent(http: aiohttp.ClientSession, n: int) -> None:
        nonlocal done
        case = f"appends-{uuid.uuid4().hex[:6]}-{n}"
        while time.monotonic() < stop:
            await _posted(http, f"/v1/cases/{case}/events", {"events": [{"kind": "tool", "text": "step"}]})
            done += 1

    async with _http_session(port, key, concurrency) as http:
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
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit("dpm api did not come up")
