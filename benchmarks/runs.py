"""The benchmark's measurements, each against real worker processes and a real broker (or in process, said so).

Every function returns plain figures (numbers in dicts) for `out/bench/figures.json`.
"""

from __future__ import annotations

import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import timeit
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import cycle
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from pipeline.bench.generate import GenerationSpec, generate_cases
from pipeline.config.settings import keys_folder
from pipeline.core.case import Case
from pipeline.core.events import CaseRef, Event, LogPosition
from pipeline.core.run import RunResult, run_dpm, run_summ
from pipeline.core.task import NAMED_BUDGET_FRACTIONS, Architecture, Budget
from pipeline.kafka.cluster.admin import admin_client
from pipeline.kafka.cluster.partitioning import case_partition
from pipeline.kafka.cluster.topics import TopicNames, TopicSpec, create_pipeline_topics, ensure_topics
from pipeline.kafka.keytopic.keystore import kafka_case_keys
from pipeline.kafka.local.local_broker import free_cluster_port
from pipeline.kafka.reading.reader import KafkaEventLog
from pipeline.kafka.writing.producer import EventProducer
from pipeline.keys.providers import LocalFileKeyProvider
from pipeline.keys.ring import KeyRing
from pipeline.keys.store import CaseKeys, MemoryKeyTopic
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.llm.latency import LatencyBackend
from pipeline.services.cluster import child_env, pipeline_processes
from pipeline.wire.decision import PositionsSource, Provenance
from pipeline.wire.event import EventRecord
from pipeline.wire.run_records import run_records
from pipeline.wire.sealing import seal_body
from pipeline.wire.trigger import DecisionId, DecisionRequest

# Short cases (24 to 30 events): a run measures the pipeline rather than the projection of long texts.
SHORT_CASES = GenerationSpec(per_domain=3, events=(24, 30), chars=(6_000, 7_500), tenant="bench")
# Smaller still, and many, so every trigger partition has cases (each worker then gets the same share
# of the triggers): the scale and memory runs measure
# waiting on the model and holding state, not the extractive backend's CPU.
SMALL_CASES = GenerationSpec(per_domain=16, events=(16, 18), chars=(3_000, 3_500), tenant="bench")
TRIGGER_PARTITIONS = 8  # divisible by 1, 2 and 4 workers: each member gets the same share
BUDGET = 800


@dataclass
class PipelineRun:
    """One set of worker processes over its own topics: when each trigger went out and each decision arrived."""

    sent: dict[str, float] = field(default_factory=dict)
    arrived: dict[str, float] = field(default_factory=dict)
    warmup: dict[str, float] = field(default_factory=dict)  # latency (ms) of each warm-up trigger

    def per_second(self) -> float:
        return len(self.arrived) / (max(self.arrived.values()) - min(self.sent.values()))

    def latencies_ms(self) -> list[float]:
        return [(self.arrived[t] - self.sent[t]) * 1000 for t in self.arrived if t in self.sent]


class _DecisionClock:
    """Notes when each decision becomes readable (read_committed), on its own thread."""

    def __init__(self, config: dict[str, str], topic: str, partitions: int) -> None:
        self._consumer = Consumer({**config, "group.id": f"bench-clock-{uuid.uuid4().hex}", "enable.auto.commit": False,
                                   "isolation.level": "read_committed", "fetch.wait.max.ms": 10})  # fmt: skip
        self._consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.arrived: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self._consumer.poll(0.1)
            if msg is None or msg.error() is not None:
                continue
            trigger = DecisionId.parse(orjson.loads(msg.value() or b"")["decision_id"]).trigger_id
            self.arrived.setdefault(trigger, time.time())

    def wait_for(self, count: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.arrived) < count:
            if time.monotonic() > deadline:
                raise SystemExit(f"only {len(self.arrived)} of {count} decisions arrived in {timeout_s:.0f} s")
            time.sleep(0.05)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._consumer.close()


def _group_ready(admin: AdminClient, group: str, members: int) -> bool:
    described = admin.describe_consumer_groups([group])[group].result(timeout=10)
    assigned = [m for m in described.members if m.assignment and m.assignment.topic_partitions]
    return described.state == ConsumerGroupState.STABLE and len(assigned) == members


def await_group(config: dict[str, str], group: str, members: int, timeout_s: float = 120) -> None:
    """Waits until the group is stable with `members` members that each hold partitions."""
    admin = admin_client(config)
    deadline = time.monotonic() + timeout_s
    while not _group_ready(admin, group, members):
        if time.monotonic() > deadline:
            raise SystemExit(f"group {group} never settled with {members} members")
        time.sleep(0.5)


def balanced(cases: Sequence[Case], count: int, partitions: int) -> list[Case]:
    """`count` cases to trigger, round robin over the trigger partitions that hold cases, and within each."""
    by_partition: dict[int, list[Case]] = {}
    for case in cases:
        by_partition.setdefault(case_partition(case.ref, partitions), []).append(case)
    groups = [by_partition[p] for p in sorted(by_partition)]
    return [groups[n % len(groups)][n // len(groups) % len(groups[n % len(groups)])] for n in range(count)]


@dataclass(frozen=True)
class RunSpec:
    """What one pipeline run starts and sends."""

    workers: int
    triggers: int
    cases: GenerationSpec = SHORT_CASES
    rate: float | None = None  # None: every trigger at once (a backlog); else paced (latency)
    warmup: int = 0  # triggers decided first, one at a time, outside the figures (a fresh worker's first is slow)
    settings: tuple[tuple[str, str], ...] = ()  # DPM_* settings of the workers
    # Called with the worker pids and the run's topic names once the group is ready.
    on_started: Callable[[list[int], TopicNames], None] | None = None


def run_pipeline(bootstrap: str, workdir: Path, spec: RunSpec) -> PipelineRun:
    """Starts `spec.workers` projection workers on fresh topics, sends the triggers, times every decision."""
    config = {"bootstrap.servers": bootstrap}
    names = TopicNames(f"bench-{uuid.uuid4().hex[:8]}")
    create_pipeline_topics(config, names, partitions=TRIGGER_PARTITIONS)
    keys = kafka_case_keys(config, names.keys, LocalFileKeyProvider(keys_folder(workdir / "keys", names.prefix)))
    settings = dict(spec.settings)
    producer = EventProducer(config, names, keys if settings.get("DPM_ENCRYPTION", "on") == "on" else None)
    cases = generate_cases(spec.cases)
    positions = {c.ref: tuple(producer.append(c.trajectory.events)) for c in cases}
    env = child_env(bootstrap, names.prefix, DPM_HOME=str(workdir), DPM_BACKEND="extractive",
                    DPM_SESSION_TIMEOUT_MS="6000", DPM_TRANSACTION_TIMEOUT_MS="10000",
                    DPM_KEYS_DIR=str(workdir / "keys"), **settings)  # fmt: skip
    run = PipelineRun()
    clock = _DecisionClock(config, names.decisions, TRIGGER_PARTITIONS)
    chosen = balanced(cases, spec.warmup + spec.triggers, TRIGGER_PARTITIONS)
    requests = [DecisionRequest(f"w{n}" if n < spec.warmup else f"b{n}", c.ref, c.task, BUDGET, (Architecture.DPM,),
                                positions[c.ref], len(positions[c.ref])) for n, c in enumerate(chosen)]  # fmt: skip
    try:
        with pipeline_processes([["worker"]] * spec.workers, env, workdir / f"logs-{names.prefix}") as procs:
            await_group(config, f"{names.prefix}-projection", spec.workers)
            if spec.on_started is not None:
                spec.on_started([p.pid for p in procs], names)
            for n, warmup in enumerate(requests[: spec.warmup], start=1):
                _send(producer, [warmup], None, run)
                clock.wait_for(n, timeout_s=120)
            _send(producer, requests[spec.warmup :], spec.rate, run)
            clock.wait_for(len(requests), timeout_s=900)
    finally:
        clock.close()
        producer.close()
        keys.close()
    run.arrived = {t: at for t, at in clock.arrived.items() if not t.startswith("w")}
    run.warmup = {t: (at - run.sent[t]) * 1000 for t, at in clock.arrived.items() if t.startswith("w")}
    return run


def _send(producer: EventProducer, requests: list[DecisionRequest], rate: float | None, run: PipelineRun) -> None:
    if rate is None:
        now = time.time()
        run.sent.update((r.trigger_id, now) for r in requests)
        producer.triggers(requests)
        return
    started = time.monotonic()
    for n, request in enumerate(requests):
        time.sleep(max(0.0, started + n / rate - time.monotonic()))
        run.sent[request.trigger_id] = time.time()
        producer.trigger(request)  # flushed: on the broker now


# --- reads ----------------------------------------------------------------------------------------


def _noisy_case(config: dict[str, str], noise: int) -> tuple[KafkaEventLog, list[LogPosition]]:
    """A 90-event case in a one-partition topic holding `noise` other records before each of its events."""
    names = TopicNames(f"readcost-{uuid.uuid4().hex[:8]}")
    ensure_topics(admin_client(config), (TopicSpec(names.events, 1),), replication_factor=1)
    producer = EventProducer(config, names)
    case = CaseRef("bench", "target")
    positions = []
    for seq in range(1, 91):
        if noise:
            producer.append([Event(CaseRef("bench", f"other-{seq}-{i}"), 1, "doc", "x" * 300) for i in range(noise)])
        positions += producer.append([Event(case, seq, "doc", "y" * 300)])
    producer.close()
    return KafkaEventLog(config, names.events), positions


def _timed_ms(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return (time.perf_counter() - started) * 1000


def _median_ms(work: Callable[[], object], repeats: int) -> float:
    work()  # warm: connections made, readers started
    return statistics.median(_timed_ms(work) for _ in range(repeats))


def _read_one_each(log: KafkaEventLog, positions: Iterator[LogPosition]) -> None:
    log.read([next(positions)])


_READS = ((0, "alone_ms"), (100, "foreign_100x_ms"), (1000, "foreign_1000x_ms"))


def read_costs(bootstrap: str, repeats: int = 15, warm_s: float = 10.0) -> dict[str, float]:
    """Median ms to read one 90-event case by offset, alone and among 100x and 1000x other traffic.

    Far-apart positions: ms per position within the 1000x read (90 seeks), and for a read of one alone.
    The three reads take turns, so each is timed against the same broker. A broker that has just
    started serves fetches several times slower until its JVM has compiled the fetch path, and one in
    service is warm: the figures are timed after `warm_s` of these reads; `cold_*` are the median of
    their first 5 (after one that makes the connections), on the broker as the section found it.
    """
    config = {"bootstrap.servers": bootstrap}
    cases = {name: _noisy_case(config, noise) for noise, name in _READS}

    def read(name: str) -> None:
        log, positions = cases[name]
        if len(log.read(positions).records) != len(positions):
            raise SystemExit("a read came back short")

    figures = {f"cold_{name}": _median_ms(partial(read, name), 5) for name in cases}
    warm_until = time.monotonic() + warm_s
    while time.monotonic() < warm_until:
        for name in cases:
            read(name)
    timings: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name in cases:
            timings[name].append(_timed_ms(partial(read, name)))
    figures |= {name: statistics.median(times) for name, times in timings.items()}
    log, positions = cases["foreign_1000x_ms"]  # its positions are 1,001 records apart: each is sought
    figures["far_position_ms"] = figures["foreign_1000x_ms"] / len(positions)
    figures["one_far_position_ms"] = _median_ms(partial(_read_one_each, log, cycle(positions)), 30)
    for log, _ in cases.values():
        log.close()
    return figures


# --- memory ---------------------------------------------------------------------------------------


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"no VmRSS for process {pid}")


def _decided(admin: AdminClient, group: str, topic: str) -> int:
    """Triggers the group has committed (the sum of its committed offsets)."""
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(TRIGGER_PARTITIONS)])]
    result = admin.list_consumer_group_offsets(request)[group].result(timeout=10)
    return sum(max(0, tp.offset) for tp in result.topic_partitions)


def worker_memory(bootstrap: str, workdir: Path, triggers: int, warm_after: int = 500) -> dict[str, float]:
    """One worker's resident memory: started and idle, after `warm_after` decisions, after all `triggers`."""
    figures: dict[str, float] = {"triggers": triggers}
    config = {"bootstrap.servers": bootstrap}

    def watch(pids: list[int], names: TopicNames) -> None:
        figures["idle_mb"] = _rss_mb(pids[0])
        threading.Thread(target=sample, args=(pids[0], names), daemon=True).start()

    def sample(pid: int, names: TopicNames) -> None:
        admin = admin_client(config)
        group, topic = f"{names.prefix}-projection", names.triggers
        while "end_mb" not in figures:
            decided = _decided(admin, group, topic)
            if decided >= warm_after and "warm_mb" not in figures:
                figures["warm_mb"] = _rss_mb(pid)
            if decided >= triggers:
                figures["end_mb"] = _rss_mb(pid)
            time.sleep(0.5)

    run_pipeline(bootstrap, workdir, RunSpec(workers=1, triggers=triggers, cases=SMALL_CASES, on_started=watch))
    deadline = time.monotonic() + 30
    while "end_mb" not in figures and time.monotonic() < deadline:
        time.sleep(0.2)
    figures["growth_pct"] = (figures["end_mb"] / figures["warm_mb"] - 1) * 100
    return figures


# --- start-up -------------------------------------------------------------------------------------


def _command_s(args: Sequence[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pipeline", *args], env=env, capture_output=True, check=False, timeout=60)
    return time.perf_counter() - started


def startup(workdir: Path, repeats: int = 5) -> dict[str, float]:
    """Seconds until `dpm --help` and `dpm broker status` (no broker running) return: first and median of the rest."""
    env = {**os.environ, "DPM_HOME": str(workdir / "startup-home")}
    figures: dict[str, float] = {}
    for name, args in (("help", ["--help"]), ("broker_status", ["broker", "status"])):
        timings = [_command_s(args, env) for _ in range(repeats + 1)]
        figures[f"{name}_first_s"], figures[f"{name}_s"] = timings[0], statistics.median(timings[1:])
    return figures


# --- per decision, in process ---------------------------------------------------------------------


def _calls_and_tokens(result: RunResult) -> dict[str, float]:
    return {
        "calls": len(result.calls),
        "tokens": sum(c.response.usage.input_tokens + c.response.usage.output_tokens for c in result.calls),
        "wall_s": result.wall_s,
    }


def per_decision(latency_ms: int) -> dict[str, Any]:
    """DPM against Summ-only on one short case at the tight and moderate budgets, every call `latency_ms` slow."""
    case = generate_cases(SHORT_CASES)[0]
    backend = LatencyBackend(ExtractiveBackend(), latency_ms)
    figures: dict[str, Any] = {"latency_ms": latency_ms, "events": len(case.trajectory)}
    for name in ("tight", "moderate"):
        budget = Budget(max(200, round(NAMED_BUDGET_FRACTIONS[name] * case.trajectory.char_length)))
        dpm = _calls_and_tokens(run_dpm(case.trajectory, case.task, budget, backend))
        summ = _calls_and_tokens(run_summ(case.trajectory, case.task, budget, backend))
        figures[name] = {"budget_chars": budget.chars, "dpm": dpm, "summ": summ,
                         "speedup": summ["wall_s"] / dpm["wall_s"]}  # fmt: skip
    return figures


# --- sealing, in process --------------------------------------------------------------------------


def sealing_cpu(repeats: int = 200) -> dict[str, float]:
    """What sealing adds to one decision on this CPU, without Kafka: opening its events, sealing its outputs."""
    case = generate_cases(SHORT_CASES)[0]
    with tempfile.TemporaryDirectory() as tmp:
        keys = CaseKeys(KeyRing(LocalFileKeyProvider(Path(tmp))), MemoryKeyTopic())
        bodies = [EventRecord(e).to_wire() for e in case.trajectory.events]
        sealed, clear = [orjson.dumps(seal_body(b, keys)) for b in bodies], [orjson.dumps(b) for b in bodies]
        budget = Budget(BUDGET)
        started = time.perf_counter()
        result = run_dpm(case.trajectory, case.task, budget, ExtractiveBackend())
        decide_s = time.perf_counter() - started
        positions = tuple(LogPosition(0, n) for n in range(len(bodies)))
        provenance = Provenance(
            DecisionId("cpu", Architecture.DPM), positions, PositionsSource.TRIGGER, "extractive", "b"
        )
        published = run_records(result, case.trajectory, task=case.task, budget=budget, provenance=provenance)
        outputs = [published.view.to_wire(), published.decision.to_wire(), *(a.to_wire() for a in published.audits)]

        def per_call(work: Callable[[], object]) -> float:
            return timeit.timeit(work, number=repeats) / repeats

        open_s = per_call(lambda: [EventRecord.decode(v, cipher=keys) for v in sealed])
        open_s -= per_call(lambda: [EventRecord.decode(v) for v in clear])
        seal_s = per_call(lambda: [orjson.dumps(seal_body(o, keys)) for o in outputs])
        seal_s -= per_call(lambda: [orjson.dumps(o) for o in outputs])
    return {"events": len(bodies), "outputs": len(outputs), "open_ms": open_s * 1000, "seal_ms": seal_s * 1000,
            "decide_ms": decide_s * 1000}  # fmt: skip


# --- the auditor's pages ----------------------------------------------------------------------------


def _call(base: str, path: str, token: str, form: dict[str, str] | None = None) -> tuple[int, float]:
    """One page (a POST when `form` is given): its status and how long it took (s)."""
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    request = urllib.request.Request(f"{base}{path}", data=data, headers={"Authorization": f"Bearer {token}"})  # noqa: S310
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:  # noqa: S310 - loopback
            answer.read()
            status = answer.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    return status, time.perf_counter() - started


@dataclass
class _Load:
    """Pages served and replays run while clients read at once, until `stop_at`."""

    stop_at: float
    latencies: list[float] = field(default_factory=list)
    replays: int = 0
    failures: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def client(self, call: Callable[[int], tuple[int, float]], start: int, *, replaying: bool) -> None:
        for n in itertools.count(start):
            if time.monotonic() > self.stop_at:
                return
            status, took = call(n)
            with self.lock:
                if status != 200:
                    self.failures += 1
                elif replaying:
                    self.replays += 1
                else:
                    self.latencies.append(took)


def ui_pages(bootstrap: str, workdir: Path, *, readers: int = 20, seconds: float = 20.0, replayers: int = 0,
             model_latency_ms: int = 0) -> dict[str, float]:  # fmt: skip
    """Decision pages per second `dpm ui` serves to `readers` clients at once; each page reads events and audits.

    With `replayers`, that many more clients press "Replay now" over and over meanwhile, the model
    answering `model_latency_ms` late: pages must not wait for replays.
    """
    config = {"bootstrap.servers": bootstrap}
    names = TopicNames(f"bench-ui-{uuid.uuid4().hex[:8]}")
    create_pipeline_topics(config, names, partitions=TRIGGER_PARTITIONS)
    keys = kafka_case_keys(config, names.keys, LocalFileKeyProvider(keys_folder(workdir / "keys", names.prefix)))
    producer = EventProducer(config, names, keys)
    ids = []
    for n, case in enumerate(generate_cases(SHORT_CASES)):
        positions = tuple(producer.append(case.trajectory.events))
        producer.trigger(DecisionRequest(f"ui{n}", case.ref, case.task, BUDGET, (Architecture.DPM,), positions,
                                         len(positions)))  # fmt: skip
        ids.append(f"ui{n}:dpm")
    producer.close()
    token, port = uuid.uuid4().hex, free_cluster_port(1)
    env = child_env(bootstrap, names.prefix, DPM_HOME=str(workdir), DPM_BACKEND="extractive",
                    DPM_KEYS_DIR=str(workdir / "keys"), DPM_UI_ADMIN_TOKEN=token,
                    DPM_MODEL_LATENCY_MS=str(model_latency_ms))  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    with pipeline_processes([["worker"], ["ui", "--port", str(port)]], env, workdir / f"logs-{names.prefix}"):
        deadline = time.monotonic() + 120
        while _indexed(base) < len(ids):
            if time.monotonic() > deadline:
                raise SystemExit("dpm ui did not index the benchmark's decisions in time")
            time.sleep(0.5)
        for decision in ids:  # warm: connections made, the JIT of the broker's fetch path
            _call(base, f"/decision?tenant=bench&id={decision}", token)
        load = _Load(time.monotonic() + seconds)

        def page(n: int) -> tuple[int, float]:
            return _call(base, f"/decision?tenant=bench&id={ids[n % len(ids)]}", token)

        def replay(n: int) -> tuple[int, float]:
            return _call(base, "/decision/replay", token, {"tenant": "bench", "id": ids[n % len(ids)]})

        threads = [threading.Thread(target=load.client, args=(page, r), kwargs={"replaying": False})
                   for r in range(readers)]  # fmt: skip
        threads += [threading.Thread(target=load.client, args=(replay, r), kwargs={"replaying": True})
                    for r in range(replayers)]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    keys.close()
    q = statistics.quantiles(load.latencies, n=100)
    return {"readers": readers, "replayers": replayers, "model_latency_ms": model_latency_ms, "seconds": seconds,
            "pages": len(load.latencies), "replays": load.replays, "failures": load.failures,
            "pages_per_s": len(load.latencies) / seconds, "p50_ms": q[49] * 1000, "p99_ms": q[98] * 1000}  # fmt: skip


def _indexed(base: str) -> int:
    """How many decisions `dpm ui` has indexed (-1 while it does not answer yet)."""
    try:
        with urllib.request.urlopen(f"{base}/healthz", timeout=5) as answer:  # noqa: S310 - loopback
            return int(answer.read().decode().split()[1])
    except OSError:
        return -1
