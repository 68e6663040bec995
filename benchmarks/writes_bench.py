"""Writes for a fleet (`make bench` section `writes`): what an append costs at the door, alone and under load.

Measured on one local broker, the offline backend, `dpm api` and two workers as children, agents as
aiohttp sessions (or the client library in this process) on the same two cores:

- the first append of a new case (p50/p99), on empty topics and after 1,000,000 events of other
  cases were written to the events topic, with the time the door took to fold them (warm: its head
  store had folded everything before; cold: a door started on an empty store restores them);
- append latency (p50/p99) with 1, 64, 500 and 2,000 agents, each on a case of its own appending a
  step every 2 s (an agent's pace: a model call between steps);
- decision overhead at 500 and 2,000 decisions asked at once (as the `api` section measures it);
- closed-loop throughput (64 agents appending back to back) over HTTP and through the client, and
  the door's CPU time per append, with 1, 2 and 3 door replicas (one process each, dividing the
  partitions in the doors' group, the agents spread over them);
- the same records written by a plain idempotent producer: the ceiling, and our share of it;
- the broker's transactional ids after 10,000 cases were appended to.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from confluent_kafka import Producer

from benchmarks.api_bench import Observer, _await_api, _decisions, _http_session, _posted, _row
from pipeline.client import AsyncDecisionMemory
from pipeline.config.settings import Settings
from pipeline.core.events import CaseRef, Event
from pipeline.kafka.cluster.partitioning import case_partition
from pipeline.kafka.cluster.topics import TopicNames, create_pipeline_topics
from pipeline.kafka.local.broker_runtime import ensure_broker_jars, java_executable
from pipeline.kafka.local.local_broker import free_cluster_port
from pipeline.services.api_keys import ApiKeys
from pipeline.services.cluster import child_env, pipeline_processes
from pipeline.wire.event import opened
from pipeline.wire.headers import standard_headers
from pipeline.wire.schema_ids import SchemaId

PARTITIONS = 6
FILLER_EVENTS = int(os.environ.get("DPM_BENCH_WRITES_FILLER", "1000000"))
PACED = tuple(int(n) for n in os.environ.get("DPM_BENCH_WRITES_PACED", "1,64,500,2000").split(","))
DECISIONS = tuple(int(n) for n in os.environ.get("DPM_BENCH_WRITES_DECISIONS", "500,2000").split(","))
REPLICAS = (1, 2, 3)
STEP = {"events": [{"kind": "tool", "text": "Credit bureau: score 712, no defaults on record."}]}
TARGETS = {"first_append_p50_ms": 50.0, "first_append_1m_ratio": 1.5, "paced_500_p99_ms": 250.0,
           "decision_500_overhead_p50_ms": 100.0, "decision_500_overhead_p99_ms": 500.0,
           "closed_loop_http_appends_per_s": 1_500.0, "door_cpu_ms_per_append": 1.0,
           "replica_cpu_ratio": 1.1, "transactional_ids_per_partition_replica": 2.0}  # fmt: skip


class Door:
    """`dpm api` and two projection workers on a pipeline of its own (a home of its own: one replica's volume)."""

    def __init__(self, bootstrap: str, workdir: Path, names: TopicNames) -> None:
        self.names, self.port = names, free_cluster_port(1)
        self.home = workdir / f"home-{uuid.uuid4().hex[:6]}"
        self.env = child_env(bootstrap, names.prefix, DPM_HOME=str(self.home), DPM_BACKEND="extractive",
                             DPM_KEYS_DIR=str(workdir / "keys"), DPM_API_KEYS_FILE=str(workdir / "api-keys.json"),
                             DPM_API_RATE_PER_S="1000000", DPM_API_MAX_WAIT_S="300")  # fmt: skip
        self.key = ApiKeys(workdir / "api-keys.json").add("bench")[1]
        self.logs = workdir / f"logs-{names.prefix}-{self.port}"
        self.pid = 0

    @contextmanager
    def running(self, workers: int = 2) -> Iterator[Door]:
        commands = [*[["worker"]] * workers, ["api", "--port", str(self.port)]]
        with pipeline_processes(commands, self.env, self.logs) as procs:
            self.pid = procs[-1].pid
            _await_api(self.port)
            yield self

    def cpu_s(self) -> float:
        """CPU seconds the door's processes (the api and its uvicorn workers) have used so far."""
        return sum(_cpu_s(pid) for pid in _tree(self.pid))


def measure(bootstrap: str, workdir: Path) -> dict[str, Any]:
    """The `writes` section of the figures file."""
    config = {"bootstrap.servers": bootstrap}
    names = TopicNames(f"bench-writes-{uuid.uuid4().hex[:8]}")
    create_pipeline_topics(config, names, PARTITIONS, replication=1)
    door = Door(bootstrap, workdir, names)
    figures: dict[str, Any] = {"partitions": PARTITIONS, "backend": "extractive", "workers": 2}
    with door.running():
        figures["first_append_empty"] = asyncio.run(_first_appends(door))
        filler_s = _fill(config, names, FILLER_EVENTS)
        fold_s = asyncio.run(_register(door))  # the first append per partition folds what was filled
        figures["first_append_1m"] = {**asyncio.run(_first_appends(door)), "filled_s": round(filler_s, 1),
                                      "fold_warm_s": round(fold_s, 2), "filler_events": FILLER_EVENTS}  # fmt: skip
        figures["paced"] = [asyncio.run(_paced(door, agents)) for agents in PACED]
        figures["closed_loop"] = _closed_loop(door, Settings.from_env(door.env))
        figures["decisions"] = _decision_rows(door, config)
    cold = Door(bootstrap, workdir, names)  # an empty store: the door restores the heads of every case
    with cold.running(workers=0):
        figures["first_append_1m"]["restore_cold_s"] = round(asyncio.run(_register(cold)), 2)
    figures["replicas"] = [_replica_row(bootstrap, workdir, n) for n in REPLICAS]
    figures["plain_producer"] = _plain_producer(config, names)
    figures["transactional_ids"] = _transactional_ids(bootstrap, workdir)
    return _with_targets(figures)


async def _first_appends(door: Door, cases: int = 200) -> dict[str, float]:
    """p50/p99 of a new case's first append, one case after another (the door's sequencers registered)."""
    await _register(door)
    async with _http_session(door.port, door.key, 1) as http:
        times = [await _first_append(http, f"first-{uuid.uuid4().hex[:8]}") for _ in range(cases)]
    return _quantiles(times)


async def _register(door: Door) -> float:
    """Seconds a first append to one new case of each partition takes in all (registering and folding each)."""
    wanted: dict[int, str] = {}
    while len(wanted) < PARTITIONS:
        case = f"first-{uuid.uuid4().hex[:8]}"
        wanted.setdefault(case_partition(CaseRef("bench", case), PARTITIONS), case)
    async with _http_session(door.port, door.key, 1) as http:
        took = [await _until_written(http, case) for case in wanted.values()]
    return sum(took)


async def _until_written(http: aiohttp.ClientSession, case: str) -> float:
    """A first append asked again after each 503, as an agent honouring Retry-After does: a fold longer than the
    door's broker wait (DPM_API_BROKER_WAIT_S) answers 503 and goes on from where it stopped."""
    started = time.perf_counter()
    while True:
        try:
            await _first_append(http, case)
            return time.perf_counter() - started
        except aiohttp.ClientResponseError as exc:
            if exc.status != 503:
                raise
            await asyncio.sleep(1.0)


async def _first_append(http: aiohttp.ClientSession, case: str) -> float:
    started = time.perf_counter()
    await _posted(http, f"/v1/cases/{case}/events", STEP)
    return time.perf_counter() - started


def _fill(config: dict[str, str], names: TopicNames, count: int, per_case: int = 100) -> float:
    """Writes `count` events of other cases (valid dpm.event.v1, unsealed) with a plain idempotent producer."""
    producer = Producer({**config, "enable.idempotence": True, "acks": "all", "linger.ms": 20,
                         "compression.type": "lz4", "batch.size": 1_000_000})  # fmt: skip
    started = time.monotonic()
    for first in range(0, count, per_case):
        case = CaseRef("filler", f"case-{first // per_case}")
        events = [Event(case, seq, "tool", f"step {seq}") for seq in range(1, min(per_case, count - first) + 1)]
        partition = case_partition(case, PARTITIONS)
        for record in opened(events, None):
            event = record.event
            headers = standard_headers(SchemaId.EVENT, source="/bench/filler", event_id=event.key, tenant="filler")
            while True:
                try:
                    producer.produce(names.events, key=event.key.encode(), value=orjson.dumps(record.to_wire()),
                                     partition=partition, headers=list(headers))  # fmt: skip
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)
    producer.flush(120)
    return time.monotonic() - started


async def _paced(door: Door, agents: int, steps: int = 5, pace_s: float = 2.0) -> dict[str, Any]:
    """Append latency with `agents` on cases of their own, each appending a step every `pace_s`."""
    times: list[float] = []
    run = uuid.uuid4().hex[:6]

    async def agent(http: aiohttp.ClientSession, n: int) -> None:
        await asyncio.sleep(pace_s * n / agents)  # agents spread over the pace, as a fleet's steps are
        for _ in range(steps):
            started = time.perf_counter()
            await _posted(http, f"/v1/cases/paced-{run}-{n}/events", STEP)
            took = time.perf_counter() - started
            times.append(took)
            await asyncio.sleep(max(0.0, pace_s - took))

    async with _http_session(door.port, door.key, agents) as http:
        await asyncio.gather(*(agent(http, n) for n in range(agents)))
    return {"agents": agents, "appends": len(times), **_quantiles(times)}


def _closed_loop(door: Door, settings: Settings, agents: int = 64, seconds: float = 8.0) -> dict[str, Any]:
    """Appends per second with `agents` appending back to back, over HTTP and through the client library."""
    before = door.cpu_s()
    http_rate, http_done, errors = asyncio.run(_http_loop([door.port], door.key, agents, seconds))
    cpu_ms = (door.cpu_s() - before) * 1000 / max(1, http_done)
    client_rate = asyncio.run(_client_loop(settings, agents, seconds))
    return {"agents": agents, "http_appends_per_s": http_rate, "client_appends_per_s": client_rate,
            "door_cpu_ms_per_append": round(cpu_ms, 3), "http_errors": errors}  # fmt: skip


async def _http_loop(ports: list[int], key: str, agents: int, seconds: float) -> tuple[float, int, dict[str, int]]:
    """Appends per second with `agents` back to back, how many were written, and the answers that were errors.

    Agent n talks to the door on `ports[n % len(ports)]`, as a balancer spreading connections would.
    """
    stop, done = time.monotonic() + seconds, 0
    errors: dict[str, int] = {}
    run = uuid.uuid4().hex[:6]
    body = orjson.dumps(STEP)

    async def agent(http: aiohttp.ClientSession, n: int) -> None:
        nonlocal done
        while time.monotonic() < stop:
            async with http.post(f"/v1/cases/loop-{run}-{n}/events", data=body,
                                 headers={"Content-Type": "application/json"}) as answer:  # fmt: skip
                await answer.read()
                if answer.status == 201:
                    done += 1
                else:
                    errors[str(answer.status)] = errors.get(str(answer.status), 0) + 1

    sessions = [_http_session(port, key, agents) for port in ports]
    try:
        started = time.monotonic()
        await asyncio.gather(*(agent(sessions[n % len(ports)], n) for n in range(agents)))
        return round(done / (time.monotonic() - started), 1), done, errors
    finally:
        for session in sessions:
            await session.close()


async def _client_loop(settings: Settings, agents: int, seconds: float) -> float:
    memory = AsyncDecisionMemory("bench", settings=settings, threads=agents)
    stop, done = time.monotonic() + seconds, 0
    run = uuid.uuid4().hex[:6]
    step = STEP["events"][0]

    async def agent(n: int) -> None:
        nonlocal done
        while time.monotonic() < stop:
            await memory.append(f"client-{run}-{n}", kind=step["kind"], text=step["text"])
            done += 1

    try:
        await memory.append(f"client-{run}-warm", kind=step["kind"], text=step["text"])
        started = time.monotonic()
        await asyncio.gather(*(agent(n) for n in range(agents)))
        return round(done / (time.monotonic() - started), 1)
    finally:
        await memory.close()


def _decision_rows(door: Door, config: dict[str, str]) -> list[dict[str, Any]]:
    """Decision overhead (as the `api` section measures it) with many asked at once, through the client and HTTP.

    The client in the benchmark's process writes the door's partitions with sequencers of its own, so
    each path runs all its rows in turn, after a warm-up that hands the partitions over (not counted):
    alternating them would measure hand-overs, which a deployment with doors never makes.
    """
    settings = Settings.from_env(door.env)
    rows = []
    memory = AsyncDecisionMemory("bench", settings=settings)
    try:
        with Observer(config, door.names.decisions) as seen:
            for path in ("client", "http"):
                asyncio.run(_decisions(path, 2, memory, door.port, door.key))  # warm (not counted)
                for waiters in DECISIONS:
                    timed = asyncio.run(_decisions(path, waiters, memory, door.port, door.key))
                    rows.append(_row(path, waiters, timed, config, door.names, seen=seen))
    finally:
        asyncio.run(memory.close())
    return rows


def _replica_row(bootstrap: str, workdir: Path, processes: int) -> dict[str, Any]:
    """Closed-loop HTTP appends through `processes` door replicas (one process each, a port and a home of its own).

    The replicas divide the partitions in the doors' group; the agents are spread over them, so an
    append reaching a replica that does not own its case is forwarded to the one that does. Their
    CPU per append counts both.
    """
    names = TopicNames(f"bench-replicas-{uuid.uuid4().hex[:8]}")
    create_pipeline_topics({"bootstrap.servers": bootstrap}, names, PARTITIONS, replication=1)
    doors = [Door(bootstrap, workdir, names) for _ in range(processes)]
    with ExitStack() as running:
        for door in doors:
            running.enter_context(door.running(workers=0))
        time.sleep(3)  # the doors' group settles
        ports = [door.port for door in doors]
        asyncio.run(_http_loop(ports, doors[0].key, 8, 1.0))  # every owner's sequencers registered (not counted)
        before = sum(door.cpu_s() for door in doors)
        rate, done, errors = asyncio.run(_http_loop(ports, doors[0].key, 64, 8.0))
        cpu_ms = (sum(door.cpu_s() for door in doors) - before) * 1000 / max(1, done)
    return {"processes": processes, "http_appends_per_s": rate, "door_cpu_ms_per_append": round(cpu_ms, 3),
            "answers_409_or_412": errors.get("409", 0) + errors.get("412", 0), "http_errors": errors}  # fmt: skip


def _plain_producer(config: dict[str, str], names: TopicNames, count: int = 100_000) -> dict[str, Any]:
    """The ceiling: the same records written by one plain idempotent producer (acks=all), as fast as it can."""
    producer = Producer({**config, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                         "compression.type": "lz4"})  # fmt: skip
    value = orjson.dumps(STEP["events"][0]) * 3  # about an event record's size
    started = time.monotonic()
    for n in range(count):
        while True:
            try:
                producer.produce(names.events, key=f"plain/case-{n % 5000}/{n:08d}".encode(), value=value,
                                 partition=n % PARTITIONS)  # fmt: skip
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)
    return {"records": count, "records_per_s": round(count / (time.monotonic() - started), 1)}


def _transactional_ids(bootstrap: str, workdir: Path, cases: int = 10_000) -> dict[str, Any]:
    """Transactional ids the broker holds after `cases` new cases were appended to through the client."""
    names = TopicNames(f"bench-tids-{uuid.uuid4().hex[:8]}")
    create_pipeline_topics({"bootstrap.servers": bootstrap}, names, PARTITIONS, replication=1)
    env = child_env(bootstrap, names.prefix, DPM_HOME=str(workdir / f"tids-{names.prefix}"),
                    DPM_KEYS_DIR=str(workdir / "keys"))  # fmt: skip
    memory = AsyncDecisionMemory("bench", settings=Settings.from_env(env), threads=64)

    async def append_all() -> None:
        gate = asyncio.Semaphore(64)

        async def one(n: int) -> None:
            async with gate:
                await memory.append(f"case-{n}", kind="tool", text="a step")

        try:
            await asyncio.gather(*(one(n) for n in range(cases)))
        finally:
            await memory.close()

    started = time.monotonic()
    asyncio.run(append_all())
    took = time.monotonic() - started
    listed = _kafka_transactions(bootstrap)
    ours = [t for t in listed if t.startswith(names.writer_prefix)]
    return {"cases": cases, "appended_s": round(took, 1), "ids": len(ours), "partitions": PARTITIONS,
            "replicas": 1}  # fmt: skip


def _kafka_transactions(bootstrap: str) -> list[str]:
    """The transactional ids the cluster lists (Kafka's own kafka-transactions tool, from the broker's jars)."""
    settings = Settings.from_env()
    libs = ensure_broker_jars(settings.paths.cache_dir, settings.kafka.version)
    java = java_executable(settings.paths.java_home)
    done = subprocess.run([java, "-Xmx256m", "-cp", f"{libs}/*", "org.apache.kafka.tools.TransactionsCommand",
                           "--bootstrap-server", bootstrap, "list"], capture_output=True, text=True, timeout=180,
                          check=True)  # fmt: skip
    return [line.split()[0] for line in done.stdout.splitlines()[1:] if line.strip()]


def _quantiles(seconds: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in seconds]
    q = statistics.quantiles(ms, n=100) if len(ms) > 1 else [ms[0]] * 99
    return {"p50_ms": round(q[49], 1), "p99_ms": round(q[98], 1)}


def _with_targets(figures: dict[str, Any]) -> dict[str, Any]:
    """The figures with what each target asked and whether every one was met."""
    empty, filled = figures["first_append_empty"]["p50_ms"], figures["first_append_1m"]["p50_ms"]
    paced = {row["agents"]: row for row in figures["paced"]}
    decisions = {(row["path"], row["waiters"]): row for row in figures["decisions"]}
    replicas = {row["processes"]: row for row in figures["replicas"]}
    one_cpu = replicas[1]["door_cpu_ms_per_append"] or 1e-9
    tids = figures["transactional_ids"]
    met = {
        "first_append_p50_ms": empty <= TARGETS["first_append_p50_ms"],
        "first_append_1m_ratio": filled <= TARGETS["first_append_1m_ratio"] * empty,
        "paced_500_p99_ms": 500 not in paced or paced[500]["p99_ms"] <= TARGETS["paced_500_p99_ms"],
        "decision_500_overhead_p50_ms": all(
            r["overhead_p50_ms"] <= TARGETS["decision_500_overhead_p50_ms"]
            for (_, n), r in decisions.items()
            if n == 500
        ),
        "decision_500_overhead_p99_ms": all(
            r["overhead_p99_ms"] <= TARGETS["decision_500_overhead_p99_ms"]
            for (_, n), r in decisions.items()
            if n == 500
        ),
        "closed_loop_http_appends_per_s": figures["closed_loop"]["http_appends_per_s"]
        >= TARGETS["closed_loop_http_appends_per_s"],
        "door_cpu_ms_per_append": figures["closed_loop"]["door_cpu_ms_per_append"] <= TARGETS["door_cpu_ms_per_append"],
        "replica_cpu_ratio": all(
            r["door_cpu_ms_per_append"] <= TARGETS["replica_cpu_ratio"] * one_cpu and r["answers_409_or_412"] == 0
            for r in replicas.values()
        ),
        "transactional_ids_per_partition_replica": tids["ids"]
        <= TARGETS["transactional_ids_per_partition_replica"] * tids["partitions"] * tids["replicas"],
    }
    figures["first_append_1m"]["ratio_to_empty"] = round(filled / empty, 2) if empty else None
    figures["shares"] = {"http_of_plain_producer": round(figures["closed_loop"]["http_appends_per_s"]
                                                         / figures["plain_producer"]["records_per_s"], 4)}  # fmt: skip
    return {**figures, "targets": TARGETS, "met": met, "targets_met": all(met.values())}


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def _cpu_s(pid: int) -> float:
    """User and system CPU seconds of one process, from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
