"""The chaos suite: hostile input and faults against real worker, baseline and broker processes.

Scenarios (loopback only, bounded in count and time):
  fuzz      fuzzed records on the triggers and events topics while two workers and the baseline
            run, then valid triggers for both architectures
  kills     triggers while worker processes are SIGKILLed one after another (each replaced)
  baseline-kills  the same with Summ-only baseline members: each decision published once however
            the kill falls
  node-loss triggers on a 3-node cluster while one broker node is SIGKILLed
  outage    triggers for both architectures while a single-node cluster is stopped and started
            again; every trigger must be decided within 60 s of the broker's return by the same
            processes, and each must then stop on SIGTERM within its drain deadline
  poison    a trigger listing 10,000 far-apart positions among valid ones
  oversize  a 500 KB event before a valid case, at the Summ-only baseline
  big-records  a 900 KB trigger that is not JSON, a 900 KB event, 900 KB and 1 MB trace headers
  door-kill, door-outage, door-storm  agents appending keyed batches through door replicas while a
            door is killed, the broker is away, or doors join and leave every few seconds
            (benchmarks/chaos_doors.py: their "decided exactly once" counts acknowledged batches
            written once at the seqs they were answered)
  kms-outage  triggers while the way to the tenants' key service (AWS KMS, moto's server) is cut and
            restored; triggers refused `key-service-unavailable` are sent again, as agents do, and
            no case may be read as erased (benchmarks/chaos_keys.py)

It prints one table: injected, dead-lettered by reason, decided exactly once, lost, duplicated,
crashes and seconds to recover; and exits 1 if anything was lost or duplicated or crashed.
`--reduced` runs smaller counts (the CI run). `--secure` runs every scenario on secured clusters
(TLS, SCRAM users per role, the ACL plan and nothing more): workers and baseline members connect as
their own roles, the harness as the admin. `--tenancy topics` puts the cases' tenant on topics of its
own (DPM_TENANCY=topics): workers find it by pattern, the baseline by listing, each record's tenant
is its topic's.

    python benchmarks/chaos.py [--reduced] [--secure] [--tenancy topics]   # or: make chaos
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from pipeline.bench.generate import GenerationSpec, generate_cases
from pipeline.config.settings import Settings, read_properties
from pipeline.core.case import Case
from pipeline.core.events import CaseRef, Event, LogPosition
from pipeline.core.task import Architecture
from pipeline.kafka.cluster.acl_plan import plan
from pipeline.kafka.cluster.acls import apply_grants
from pipeline.kafka.cluster.credentials import USERS, credentials_dir, provision
from pipeline.kafka.cluster.partitioning import case_partition
from pipeline.kafka.cluster.topics import BaselineTopics, TopicNames, create_pipeline_topics
from pipeline.kafka.errors import KafkaAdapterError
from pipeline.kafka.keytopic.keystore import kafka_case_keys, key_provider
from pipeline.kafka.local import local_broker
from pipeline.kafka.reading.range_reads import read_topic
from pipeline.kafka.writing.producer import EventProducer
from pipeline.services.cluster import child_env, cluster, pipeline_processes, private_cluster
from pipeline.services.read_outputs import PublishedOutputs, load_outputs
from pipeline.wire.event import CaseOpening, EventRecord
from pipeline.wire.trigger import DecisionKey, DecisionRequest

BUDGET = 900
SEED = 20261130


@dataclass
class Outcome:
    """What one scenario did and what came of it."""

    scenario: str
    injected: int = 0
    dead_letters: Counter[str] = field(default_factory=Counter)
    expected: int = 0
    decided_once: int = 0
    lost: int = 0
    duplicated: int = 0
    crashes: int = 0
    recover_s: float | None = None
    recover_limit_s: float | None = None  # a recovery slower than this fails the scenario
    broken: list[str] = field(default_factory=list)  # other promises the scenario checks, when broken
    # What explains a failure, printed again below the last table: CI keeps only the end of the output.
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        slow = self.recover_limit_s is not None and (self.recover_s or 0) > self.recover_limit_s
        return self.lost == 0 and self.duplicated == 0 and self.crashes == 0 and not slow and not self.broken


@dataclass
class Stage:
    """A cluster, fresh topics on it and the environment of the processes a scenario starts."""

    config: dict[str, str]
    names: TopicNames  # the pipeline's: its prefix names the groups and the baseline's own topics
    scope: TopicNames  # the topics the cases' records are on: the shared ones, or their tenant's own
    env: dict[str, str]
    logs: Path
    credentials: Path | None = None  # a secured cluster's users' properties files

    def env_for(self, command: list[str]) -> dict[str, str]:
        """The environment of `python -m pipeline <command>`: on a secured cluster, as its role's user.

        A door (`api`) runs as the agents' principal: the producer, or with tenancy by topic the tenant's.
        """
        if self.credentials is None:
            return self.env
        user = command[0]
        if user == "api":
            user = f"tenant-{TENANT}" if _TENANCY[0] == "topics" else "producer"
        return {**self.env, "DPM_KAFKA_CONFIG": str(self.credentials / f"{user}.properties")}


# Secured clusters (--secure) by bootstrap servers: where their users' properties files are.
_SECURED: dict[str, Path] = {}
TENANT = "chaos"  # every generated case's tenant
_TENANCY = ["shared"]  # --tenancy: "shared", or "topics" (the tenant on topics of its own)


@contextmanager
def _cluster(settings: Settings, home: Path, nodes: int, *, secure: bool) -> Iterator[local_broker.RunningCluster]:
    """A private cluster for a scenario; secured ones get their users (credentials.provision)."""
    with private_cluster(settings, home, nodes=nodes, secure=secure) as running:
        if secure:
            _secure(running, home)
        yield running


def _secure(running: local_broker.RunningCluster, home: Path) -> None:
    provision(running.layout, home, (*USERS, f"tenant-{TENANT}"))  # the tenant's: its doors, tenancy by topic
    _SECURED[running.bootstrap] = credentials_dir(home)


def _cases(count: int) -> list[Case]:
    spec = GenerationSpec(per_domain=(count + 3) // 4, events=(24, 30), chars=(6_000, 7_500), tenant=TENANT)
    return generate_cases(spec)[:count]


@contextmanager
def _stage(bootstrap: str, scenario: str, work: Path, replication: int = 1, **env: str) -> Iterator[Stage]:
    stamp = dt.datetime.now(tz=dt.UTC).strftime("%H%M%S%f")
    names = TopicNames(f"chaos-{scenario}-{stamp}")
    by_topic = _TENANCY[0] == "topics"
    scope = names.of_tenant(TENANT) if by_topic else names
    credentials = _SECURED.get(bootstrap)
    config = {"bootstrap.servers": bootstrap}
    if credentials is not None:  # the harness acts as the admin; the processes it starts as their roles
        config = read_properties(credentials / "admin.properties")
        apply_grants(config, plan(names, tenants=[TENANT] if by_topic else []))
    create_pipeline_topics(config, scope, partitions=3, replication=replication)
    home = work / scenario
    home.mkdir(parents=True, exist_ok=True)
    settings = {"DPM_HOME": str(home), "DPM_KEYS_DIR": str(home / "keys"), "DPM_SESSION_TIMEOUT_MS": "6000",
                "DPM_BACKEND": "extractive", "DPM_TENANCY": _TENANCY[0], "DPM_TENANT_PARTITIONS": "3",
                **env}  # fmt: skip
    yield Stage(config, names, scope, child_env(bootstrap, names.prefix, **settings), home / "logs", credentials)


def _append(stage: Stage, cases: list[Case]) -> dict[CaseRef, tuple[LogPosition, ...]]:
    producer = EventProducer(stage.config, stage.scope)
    positions = {c.ref: tuple(producer.append(c.trajectory.events, CaseOpening(c.task, (BUDGET,)))) for c in cases}
    producer.close()
    return positions


def _trigger(stage: Stage, requests: list[DecisionRequest]) -> set[DecisionKey]:
    producer = EventProducer(stage.config, stage.scope)
    for request in requests:
        producer.trigger(request)
    producer.close()
    return {r.decision_key(a) for r in requests for a in r.architectures}


def _requests(cases: list[Case], positions: dict[CaseRef, tuple[LogPosition, ...]], count: int, prefix: str,
              archs: tuple[Architecture, ...]) -> list[DecisionRequest]:  # fmt: skip
    picked = [cases[n % len(cases)] for n in range(count)]
    return [DecisionRequest(f"{prefix}{n:04d}", c.ref, c.task, BUDGET, archs, positions[c.ref], len(positions[c.ref]))
            for n, c in enumerate(picked)]  # fmt: skip


def _outputs(stage: Stage) -> PublishedOutputs | None:
    """The published outputs, or None while the cluster cannot answer (a leader just died)."""
    keys = kafka_case_keys(
        stage.config, stage.scope.keys, key_provider(Settings.from_env(stage.env), stage.names.prefix)
    )
    try:
        return load_outputs(stage.config, stage.scope, cipher=keys, with_audits=False)
    except KafkaAdapterError:
        return None
    finally:
        keys.close()


def _settle(stage: Stage, outcome: Outcome, expected: set[DecisionKey], since: float, timeout_s: float) -> None:
    """Waits for every expected decision (or the timeout), then counts what was published."""
    deadline = time.monotonic() + timeout_s
    while True:
        outputs = _outputs(stage)
        if outputs is not None and (expected <= set(outputs.decisions) or time.monotonic() > deadline):
            break
        if time.monotonic() > deadline + 60:
            raise KafkaAdapterError(f"outputs of {stage.names.prefix} unreadable for a minute past the deadline")
        time.sleep(1.0)
    present = expected & set(outputs.decisions)
    outcome.expected = len(expected)
    outcome.decided_once = len(present)
    outcome.lost = len(expected - present)
    outcome.duplicated = outputs.duplicates
    outcome.recover_s = round(time.monotonic() - since, 1) if not outcome.lost else None
    letters = _dead_letters(stage)
    outcome.dead_letters = Counter(letter.get("reason", "?") for letter in letters)
    if outcome.lost:
        _diagnose(stage, outcome, sorted(str(d) for d in expected - present), letters)
    _report_stalls(stage, outcome.scenario)


def _report_stalls(stage: Stage, scenario: str) -> None:
    """Prints every input partition a baseline member found stalled and read again (app._look_for_stalls)."""
    for log in sorted(stage.logs.glob("*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if "made no progress" in line:
                print(f"  {scenario} {log.name}: {line[:600]}", flush=True)


def _diagnose(stage: Stage, outcome: Outcome, lost: list[str], letters: list[dict[str, Any]]) -> None:
    """Says what a loss looks like from outside: stalled (input left uncommitted) or skipped (committed past).

    Prints the lost ids, both groups' committed offsets against the inputs' ends, the baseline's
    published ledger, and the processes' last warnings; keeps their logs under out/chaos/. The lost
    ids, the dead letters' reasons and each process's last warning are kept as the outcome's notes.
    """
    scenario = outcome.scenario
    print(f"\n{scenario}: lost {', '.join(lost)}", flush=True)
    outcome.notes.append(f"lost {', '.join(lost[:6])}{' ...' if len(lost) > 6 else ''}")
    outcome.notes.extend(f"dead letter {letter.get('reason', '?')}: {str(letter.get('detail', '(sealed)'))[:240]}"
                         for letter in letters[-4:])  # fmt: skip
    for group in (f"{stage.names.prefix}-projection", f"{stage.names.prefix}-baseline"):
        reader = Consumer({**stage.config, "group.id": group, "enable.auto.commit": False})
        try:
            partitions = [TopicPartition(topic, p) for topic in (stage.scope.events, stage.scope.triggers)
                          for p in range(3)]  # fmt: skip
            for tp in reader.committed(partitions, timeout=10):
                _, end = reader.get_watermark_offsets(tp, timeout=10)
                print(f"  {group} {tp.topic}[{tp.partition}]: committed {tp.offset}, end {end}", flush=True)
        except KafkaException as exc:
            print(f"  committed offsets unavailable: {exc}", flush=True)
        finally:
            reader.close()
    try:
        latest = {
            r.key: r.value for r in read_topic(stage.config, BaselineTopics(f"{stage.names.prefix}-baseline").ledger)
        }
        for key, value in sorted(latest.items()):
            print(f"  ledger {key!r}: {value!r}", flush=True)
    except KafkaAdapterError as exc:
        print(f"  ledger unavailable: {exc}", flush=True)
    for log in sorted(stage.logs.glob("*.log")):
        noted = [line for line in log.read_text(errors="replace").splitlines() if '"level": "' in line
                 and ('"WARNING"' in line or '"ERROR"' in line)]  # fmt: skip
        for line in noted[-6:]:
            print(f"  {log.name}: {line[:400]}", flush=True)
        outcome.notes.extend(f"{log.name}: {line[:300]}" for line in noted[-1:])
    _keep_logs(stage, scenario)


def _dead_letters(stage: Stage) -> list[dict[str, Any]]:
    """The scope's dead letters as JSON objects, read once; a value that is not one JSON object counts as {}."""
    letters = []
    for record in read_topic(stage.config, stage.scope.dlq):
        try:
            letter = json.loads(record.value or b"{}")
        except ValueError:
            letter = {}
        letters.append(letter if isinstance(letter, dict) else {})
    return letters


def _keep_logs(stage: Stage, scenario: str) -> None:
    kept = Path("out/chaos") / f"{scenario}-logs"
    shutil.rmtree(kept, ignore_errors=True)
    shutil.copytree(stage.logs, kept)
    print(f"  logs kept in {kept}", flush=True)


def _crashed(procs: list[subprocess.Popen[bytes]], killed: set[int], stage: Stage, scenario: str) -> int:
    """How many processes not killed on purpose have exited; their exit codes and last log lines printed, logs kept.

    The logs kept are gone with CI's machine: the lines printed are what explains a crash there.
    """
    crashed = [(i, p.returncode) for i, p in enumerate(procs) if i not in killed and p.poll() is not None]
    if crashed:
        print(f"\n{scenario}: process(es) exited: {', '.join(f'#{i} with {code}' for i, code in crashed)}",
              flush=True)  # fmt: skip
        for i, _ in crashed:
            for log in sorted(stage.logs.glob(f"*-{i}.log")):  # pipeline_processes names them <command>-<index>
                print(f"  last lines of {log.name}:", flush=True)
                for line in log.read_text(errors="replace").splitlines()[-30:]:
                    print(f"    {line[:600]}", flush=True)
        _keep_logs(stage, scenario)
    return len(crashed)


# --- fuzzed records -----------------------------------------------------------------------------


def _fuzz_value(rng: random.Random, valid: dict[str, Any]) -> bytes:
    """Random bytes, cut JSON, wrong types, huge numbers, control characters or a mutated valid record."""
    choice = rng.randrange(6)
    if choice == 0:
        return rng.randbytes(rng.randint(0, 400))
    text = json.dumps(valid)
    if choice == 1:
        return text[: rng.randint(0, len(text) - 1)].encode()
    odd: list[Any] = [None, True, -1, 0, 2**70, 10**30, 1.5, "", "\u0000", "x" * 5000, [], {}, [[2**31, 0]],
                      {"domain": "nuclear"}]  # fmt: skip
    mutated = dict(valid)
    for key in rng.sample(sorted(valid), rng.randint(1, 3)):
        mutated[key] = rng.choice(odd)
    if choice == 2:
        mutated.pop(rng.choice(sorted(valid)), None)
    if choice == 3:
        return json.dumps([mutated]).encode()
    return json.dumps(mutated).encode()


def _fuzz(stage: Stage, rng: random.Random, count: int, trigger: dict[str, Any], event: dict[str, Any]) -> None:
    producer = Producer({**stage.config, "linger.ms": 20})
    for n in range(count):
        on_triggers = n % 2 == 0
        valid = {**trigger, "trigger_id": f"fz-{n}"} if on_triggers else {**event, "case_id": f"fz-{n}"}
        topic = stage.scope.triggers if on_triggers else stage.scope.events
        # Keyed and placed as the record was before its value was fuzzed, as a real producer would have.
        case = CaseRef(valid["tenant"], valid["case_id"])
        key = case.key if on_triggers else f"{case.key}/{valid['seq']:08d}"
        producer.produce(topic, value=_fuzz_value(rng, valid), key=key.encode(), partition=case_partition(case, 3))
        producer.poll(0)
    producer.flush(60)


def fuzz(bootstrap: str, work: Path, records: int, valid: int) -> Outcome:
    outcome = Outcome("fuzz", injected=records)
    with _stage(bootstrap, "fuzz", work, DPM_TRIGGER_DEADLINE_S="5") as stage:
        cases = _cases(8)
        positions = _append(stage, cases)
        requests = _requests(cases, positions, valid, "ok", (Architecture.DPM, Architecture.SUMM))
        with pipeline_processes([["worker"], ["worker"], ["baseline", "--trigger-wait", "30"]], stage.env_for,
                                stage.logs) as procs:  # fmt: skip
            event = EventRecord(Event(cases[0].ref, 1, "doc", "text")).to_wire()
            _fuzz(stage, random.Random(SEED), records, requests[0].to_wire(), event)
            since = time.monotonic()
            expected = _trigger(stage, requests)
            _settle(stage, outcome, expected, since, timeout_s=240)
            outcome.crashes = _crashed(procs, set(), stage, outcome.scenario)
    return outcome


# --- worker kills, node loss ---------------------------------------------------------------------


def kills(bootstrap: str, work: Path, triggers: int, kill_count: int, *, baseline: bool = False) -> Outcome:
    """Triggers while members are SIGKILLed one after another, each replaced: projection workers or baseline members."""
    name = "baseline-kills" if baseline else "kills"
    outcome = Outcome(name, injected=kill_count)
    command = ["baseline", "--budgets", str(BUDGET)] if baseline else ["worker", "--batch-size", "2"]
    architecture = Architecture.SUMM if baseline else Architecture.DPM
    with _stage(bootstrap, name, work) as stage:
        cases = _cases(8)
        positions = _append(stage, cases)
        with pipeline_processes([command] * (2 if baseline else 3), stage.env_for, stage.logs) as procs:
            expected = _trigger(stage, _requests(cases, positions, triggers, "k", (architecture,)))
            killed: set[int] = set()
            for k in range(kill_count):
                _await_count(stage, triggers * (k + 1) // (kill_count + 1), 180)
                victim = k % len(procs)
                procs[victim].send_signal(signal.SIGKILL)
                killed.add(victim)
                procs.append(_spawn(stage, command, f"replacement-{k}"))
            since = time.monotonic()
            _settle(stage, outcome, expected, since, timeout_s=240)
            outcome.crashes = _crashed(procs, killed, stage, outcome.scenario)
    return outcome


def _spawn(stage: Stage, command: list[str], name: str) -> subprocess.Popen[bytes]:
    stage.logs.mkdir(parents=True, exist_ok=True)
    log = (stage.logs / f"{name}.log").open("wb")
    return subprocess.Popen([sys.executable, "-m", "pipeline", *command], env=stage.env_for(command), stdout=log,
                            stderr=subprocess.STDOUT)  # fmt: skip


def _await_count(stage: Stage, count: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        outputs = _outputs(stage)
        if outputs is not None and len(outputs.decisions) >= count:
            return
        time.sleep(0.5)


def node_loss(work: Path, triggers: int, *, secure: bool = False) -> Outcome:
    outcome = Outcome("node-loss", injected=1)
    home = work / "node-loss-cluster"
    with _cluster(Settings.from_env({}), home, 3, secure=secure) as running:
        stage_context = _stage(running.bootstrap, "node-loss", work, replication=3)
        with stage_context as stage, _pipeline(stage, [["worker"], ["worker"]]) as procs:
            cases = _cases(8)
            positions = _append(stage, cases)
            expected = _trigger(stage, _requests(cases, positions, triggers, "n", (Architecture.DPM,)))
            _await_count(stage, triggers // 3, 180)
            os.kill(running.pids[1], signal.SIGKILL)
            since = time.monotonic()
            _settle(stage, outcome, expected, since, timeout_s=300)
            outcome.crashes = _crashed(procs, set(), stage, outcome.scenario)
    return outcome


def _pipeline(stage: Stage, commands: list[list[str]]) -> Any:  # noqa: ANN401 - a context manager
    return pipeline_processes(commands, stage.env_for, stage.logs)


# --- the broker away -----------------------------------------------------------------------------

DRAIN_S = 10.0  # the processes' drain deadline in the outage scenario (DPM_DRAIN_S)


def outage(work: Path, triggers: int, away_s: float, *, secure: bool = False) -> Outcome:
    """The only broker stopped for `away_s` while triggers flow, then started again on the same port and data."""
    outcome = Outcome("outage", injected=1, recover_limit_s=60.0)
    home = work / "outage-cluster"
    settings = Settings.from_env()
    commands = [["worker"], ["worker"], ["baseline", "--budgets", str(BUDGET)]]
    with (
        _cluster(settings, home, 1, secure=secure) as running,
        _stage(running.bootstrap, "outage", work, DPM_DRAIN_S=str(DRAIN_S)) as stage,
    ):
        cases = _cases(8)
        positions = _append(stage, cases)
        requests = _requests(cases, positions, triggers, "u", (Architecture.DPM, Architecture.SUMM))
        with _pipeline(stage, commands) as procs:
            before, after = requests[: triggers // 2], requests[triggers // 2 :]
            expected = _trigger(stage, before)
            _await_count(stage, len(before), 180)
            local_broker.stop(home)
            time.sleep(away_s)
            local_broker.start(
                home, settings.paths.cache_dir, settings.kafka.version, nodes=1, port=running.port, secure=secure
            )  # its users and ACLs are in its metadata: they come back with it
            since = time.monotonic()
            expected |= _trigger(stage, after)
            _settle(stage, outcome, expected, since, timeout_s=180)
            outcome.crashes = _crashed(procs, set(), stage, outcome.scenario) + _stopped_late(procs, DRAIN_S + 5)
    return outcome


def _stopped_late(procs: list[subprocess.Popen[bytes]], limit_s: float) -> int:
    """SIGTERM to each process; counts those that were not gone within `limit_s` (then killed)."""
    late = 0
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + limit_s
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            late += 1
            proc.kill()
            proc.wait(10)
    return late


# --- one poison trigger, one oversize event ------------------------------------------------------


def poison(bootstrap: str, work: Path) -> Outcome:
    outcome = Outcome("poison", injected=1)
    with _stage(bootstrap, "poison", work, DPM_TRIGGER_DEADLINE_S="2") as stage:
        cases = _cases(4)
        positions = _append(stage, cases)
        far_apart = tuple(LogPosition(0, 1_000 * n) for n in range(10_000))
        bad = DecisionRequest("poison", cases[0].ref, cases[0].task, BUDGET, (Architecture.DPM,), far_apart)
        with pipeline_processes([["worker"]], stage.env_for, stage.logs) as procs:
            _trigger(stage, [bad])
            since = time.monotonic()
            expected = _trigger(stage, _requests(cases, positions, 5, "p", (Architecture.DPM,)))
            _settle(stage, outcome, expected, since, timeout_s=120)
            outcome.crashes = _crashed(procs, set(), stage, outcome.scenario)
    return outcome


def oversize(bootstrap: str, work: Path) -> Outcome:
    outcome = Outcome("oversize", injected=1)
    with _stage(bootstrap, "oversize", work) as stage:
        big, later = _cases(2)
        producer = EventProducer(stage.config, stage.scope)
        producer.append([Event(big.ref, 1, "document", "Scanned appendix. " * 28_000)])
        producer.close()
        positions = _append(stage, [later])
        with pipeline_processes([["baseline", "--trigger-wait", "30"]], stage.env_for, stage.logs) as procs:
            since = time.monotonic()
            expected = _trigger(stage, _requests([later], positions, 1, "o", (Architecture.SUMM,)))
            _settle(stage, outcome, expected, since, timeout_s=120)
            outcome.crashes = _crashed(procs, set(), stage, outcome.scenario)
    return outcome


# --- records near Kafka's size limit --------------------------------------------------------------

_BIG = 900_000


def big_records(bootstrap: str, work: Path) -> Outcome:
    """A 900 KB trigger that is not JSON, a 900 KB event, and triggers with 900 KB and 1 MB traceparent headers.

    Each is followed in its partition by valid triggers for both architectures, which must all be
    decided; no dead letter or output may exceed a record's size, and no invalid trace header may
    be copied onto an output.
    """
    outcome = Outcome("big-records", injected=4)
    with _stage(bootstrap, "big-records", work) as stage:
        case, huge = _cases(2)
        positions = _append(stage, [case])
        both = (Architecture.DPM, Architecture.SUMM)
        header_900k, header_1m = _requests([case], positions, 2, "big-header", both)
        later = _requests([case], positions, 4, "after-big", both)
        partition = case_partition(case.ref, 3)
        raw = Producer({**stage.config, "message.max.bytes": 1_048_000})
        raw.produce(stage.scope.triggers, key=case.ref.key.encode(), value=b"\x00" * _BIG, partition=partition)
        event = EventRecord(Event(huge.ref, 1, "document", "Scanned appendix. " * (_BIG // 18))).encode()
        raw.produce(stage.scope.events, key=f"{huge.ref.key}/00000001".encode(), value=event,
                    partition=case_partition(huge.ref, 3))  # fmt: skip
        for request, size in ((header_900k, _BIG), (header_1m, 1_040_000 - len(header_1m.encode()))):
            raw.produce(stage.scope.triggers, key=case.ref.key.encode(), value=request.encode(), partition=partition,
                        headers=[("traceparent", b"0" * size)])  # fmt: skip
        with _pipeline(stage, [["worker"], ["baseline", "--budgets", str(BUDGET)]]) as procs:
            since = time.monotonic()
            expected = _trigger(stage, later) | {r.decision_key(a) for r in (header_900k, header_1m) for a in both}
            _settle(stage, outcome, expected, since, timeout_s=180)
            outcome.crashes = _crashed(procs, set(), stage, outcome.scenario)
        outcome.broken = _oversized_outputs(stage)
    return outcome


def _oversized_outputs(stage: Stage) -> list[str]:
    """Output or dead-letter records over 400 KB, or carrying a trace header that is not W3C trace context."""
    found = []
    for topic in (stage.scope.views, stage.scope.decisions, stage.scope.audit, stage.scope.dlq):
        for record in read_topic(stage.config, topic):
            size = len(record.value or b"") + sum(len(v) for _, v in record.headers)
            if size > 400_000 or any(name == "traceparent" and len(value) != 55 for name, value in record.headers):
                found.append(f"{topic} {record.position}: {size} bytes")
    return found


# --- the table -----------------------------------------------------------------------------------


def _row(o: Outcome) -> str:
    letters = ", ".join(f"{reason} {n}" for reason, n in sorted(o.dead_letters.items())) or "none"
    recover = "-" if o.recover_s is None else f"{o.recover_s:.1f}"
    return (f"| {o.scenario} | {o.injected} | {letters} | {o.decided_once}/{o.expected} | {o.lost} | "
            f"{o.duplicated} | {o.crashes} | {recover} |")  # fmt: skip


def _scenarios(big: bool, secure: bool = False) -> dict[str, Callable[[str, Path], Outcome]]:
    """Every scenario by name; each takes the shared cluster's bootstrap servers (some start their own) and a folder."""
    from benchmarks.chaos_doors import door_scenarios  # noqa: PLC0415 - it builds on this module's stages
    from benchmarks.chaos_keys import key_scenarios  # noqa: PLC0415 - as chaos_doors

    return {
        "fuzz": lambda b, w: fuzz(b, w, records=2_000 if big else 400, valid=20 if big else 10),
        "kills": lambda b, w: kills(b, w, triggers=200 if big else 60, kill_count=3 if big else 1),
        "baseline-kills": lambda b, w: kills(
            b, w, triggers=80 if big else 30, kill_count=3 if big else 1, baseline=True
        ),
        "poison": poison,
        "oversize": oversize,
        "big-records": big_records,
        "node-loss": lambda _, w: node_loss(w, triggers=100 if big else 40, secure=secure),
        "outage": lambda _, w: outage(w, triggers=100 if big else 40, away_s=60 if big else 30, secure=secure),
        **door_scenarios(big, secure),
        **key_scenarios(big),
    }


@contextmanager
def _shared_cluster(work: Path, secure: bool) -> Iterator[str]:
    """The cluster most scenarios share: the local broker (started if need be), or a secured one of the run's own."""
    if not secure:
        with cluster(Settings.from_env(), print) as bootstrap:
            yield bootstrap
        return
    with _cluster(Settings.from_env(), work / "secured-cluster", 1, secure=True) as running:
        print(f"secured Kafka started at {running.bootstrap}", flush=True)
        yield running.bootstrap


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reduced", action="store_true", help="smaller counts, for CI")
    parser.add_argument("--only", action="append", default=[], help="run only this scenario (repeatable)")
    parser.add_argument("--secure", action="store_true", help="on secured clusters, each process as its role")
    parser.add_argument("--tenancy", choices=("shared", "topics"), default="shared",
                        help="topics: the cases' tenant on topics of its own (DPM_TENANCY)")  # fmt: skip
    args = parser.parse_args()
    _TENANCY[0] = args.tenancy
    big = not args.reduced
    scenarios = _scenarios(big, args.secure)
    unknown = sorted(set(args.only) - set(scenarios))
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(scenarios)}")
    chosen = [name for name in scenarios if not args.only or name in args.only]
    outcomes = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dpm-chaos-") as tmp, _shared_cluster(Path(tmp), args.secure) as bootstrap:
        for name in chosen:
            outcomes.append(scenarios[name](bootstrap, Path(tmp)))
            print(_row(outcomes[-1]), flush=True)
    print(f"\nchaos suite ({'full' if big else 'reduced'}{', secured' if args.secure else ''}, "
          f"tenancy {args.tenancy}), "
          f"{time.monotonic() - started:.0f} s\n")  # fmt: skip
    for outcome in outcomes:
        for broken in outcome.broken:
            print(f"{outcome.scenario}: {broken}")
    print("| scenario | injected | dead-lettered by reason | decided exactly once | lost | duplicated | crashes "
          "| seconds to recover |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for outcome in outcomes:
        print(_row(outcome))
    failed = [o.scenario for o in outcomes if not o.ok]
    for outcome in [o for o in outcomes if not o.ok and o.notes]:
        print(f"\n{outcome.scenario}, why:")
        for note in outcome.notes:
            print(f"  {note}")
    if failed:
        print(f"\nFAILED: {', '.join(failed)} lost, duplicated, crashed or recovered too slowly")
    return 1 if failed else 0


if __name__ == "__main__":
    # Run as a script this file is `__main__`, and chaos_doors imports `benchmarks.chaos`: a second copy
    # whose _SECURED and _TENANCY main() never set. Running that copy's main keeps one set of them.
    sys.exit(importlib.import_module("benchmarks.chaos").main())
