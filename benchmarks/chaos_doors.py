"""The chaos suite's door scenarios: agents appending keyed batches through door replicas while doors and brokers fail.

Each agent appends batches of events to a case of its own over HTTP, each batch with its own
Idempotency-Key, through the doors in turn; a batch not answered 201 (a connection refused or
cut, a 503) is sent again with the same key through the next door until it is answered. Then
every case's log is read back: every acknowledged batch must be there once, at the seqs its answer
gave, and every case's seqs must run 1, 2, 3, ... with no gap and no repeat.

  door-kill    three doors; one is SIGKILLed in the middle of the agents' batches (its partitions
               are appended by the others at once, and taken over once its session times out)
  door-outage  two doors; the only broker stopped and started again while the agents append: every
               refusal must be a 503 with Retry-After, and every acknowledged batch must survive
  door-storm   doors started and stopped every few seconds under load (SIGTERM and SIGKILL in turn):
               a rebalance storm of the doors' group
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson

from benchmarks.chaos import TENANT, Outcome, Stage, _cluster, _keep_logs, _spawn, _stage
from pipeline.config.settings import Settings, keys_folder
from pipeline.kafka.keytopic.keystore import kafka_case_keys
from pipeline.kafka.local import local_broker
from pipeline.kafka.local.local_broker import free_cluster_port
from pipeline.kafka.reading.range_reads import read_topic
from pipeline.keys.providers import LocalFileKeyProvider
from pipeline.services.api_keys import ApiKeys
from pipeline.wire.event import EventRecord
from pipeline.wire.sealing import open_body

EVENTS_PER_BATCH = 3
RETRY_PAUSE_S = 0.2
FINISH_S = 90.0  # how long an agent keeps retrying its last batch after the scenario's faults end


def _texts(case_id: str, batch: int) -> list[str]:
    return [f"{case_id} batch {batch} event {i}: " + "terms and conditions " * 8 for i in range(EVENTS_PER_BATCH)]


@dataclass
class _Agent:
    """One agent's case and what the doors answered it."""

    case_id: str
    acked: dict[int, list[int]] = field(default_factory=dict)  # batch -> the seqs its 201 gave
    refusals: Counter[str] = field(default_factory=Counter)  # what a failed attempt answered
    acked_at: list[float] = field(default_factory=list)  # when each 201 came


class _Fleet:
    """Agents on threads appending through the doors at `ports` (which a scenario may change under them)."""

    def __init__(self, ports: list[int], key: str, agents: int) -> None:
        self.ports, self._key = list(ports), key
        self.agents = [_Agent(f"door-agent-{n}") for n in range(agents)]
        self.broken: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=(a, n), daemon=True) for n, a in enumerate(self.agents)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def set_ports(self, ports: list[int]) -> None:
        with self._lock:
            self.ports = list(ports)

    def _port(self, turn: int) -> int:
        with self._lock:
            return self.ports[turn % len(self.ports)]

    def stop(self) -> None:
        """Asks the agents to stop after their current batch, and waits for them (each retries it up to FINISH_S)."""
        self._stop.set()
        for thread in self._threads:
            thread.join(FINISH_S + 30)

    def _run(self, agent: _Agent, n: int) -> None:
        headers = {"Authorization": f"Bearer {self._key}", "Content-Type": "application/json"}
        with httpx.Client(timeout=30) as http:
            batch, turn = 0, n
            while not self._stop.is_set():
                batch += 1
                body = orjson.dumps({"events": [{"kind": "note", "text": t} for t in _texts(agent.case_id, batch)]})
                finish_by = None
                while True:
                    turn += 1
                    url = f"http://127.0.0.1:{self._port(turn)}/v1/cases/{agent.case_id}/events"
                    answer = _post(http, url, body, {**headers, "Idempotency-Key": f"{agent.case_id}-{batch}"})
                    if answer is not None and answer.status_code == 201:
                        agent.acked[batch] = [e["seq"] for e in answer.json()["events"]]
                        agent.acked_at.append(time.monotonic())
                        break
                    self._refused(agent, batch, answer)
                    if self._stop.is_set():
                        finish_by = finish_by or time.monotonic() + FINISH_S
                        if time.monotonic() > finish_by:
                            return  # never acknowledged: may or may not be in the log, counted by neither
                    time.sleep(RETRY_PAUSE_S)
                time.sleep(0.05)

    def _refused(self, agent: _Agent, batch: int, answer: httpx.Response | None) -> None:
        if answer is None:
            agent.refusals["no answer"] += 1
            return
        kind = answer.json().get("type", "").rsplit("/", 1)[-1] if answer.content else ""
        agent.refusals[f"{answer.status_code} {kind}"] += 1
        if answer.status_code != 503:
            self.broken.append(f"{agent.case_id} batch {batch}: answered {answer.status_code} {kind}")
        elif "retry-after" not in answer.headers:
            self.broken.append(f"{agent.case_id} batch {batch}: a 503 without Retry-After")

    def recovered_after(self, since: float) -> float | None:
        """Seconds from `since` until every agent had a batch acknowledged after it (None: one never had)."""
        firsts = [next((t for t in a.acked_at if t >= since), None) for a in self.agents]
        return None if None in firsts else max(t for t in firsts if t is not None) - since


def _post(http: httpx.Client, url: str, body: bytes, headers: dict[str, str]) -> httpx.Response | None:
    try:
        return http.post(url, content=body, headers=headers)
    except httpx.HTTPError:
        return None  # refused (a killed door) or cut mid-answer: sent again with the same key


def _logs(stage: Stage) -> dict[str, list[tuple[int, str]]]:
    """Each case's committed (seq, text) in log order, opened with its data key."""
    folder = keys_folder(Path(stage.env["DPM_KEYS_DIR"]), stage.names.prefix)
    keys = kafka_case_keys(stage.config, stage.scope.keys, LocalFileKeyProvider(folder))
    found: dict[str, list[tuple[int, str]]] = defaultdict(list)
    try:
        keys.sync()
        for record in read_topic({**stage.config, "isolation.level": "read_committed"}, stage.scope.events):
            if record.value:
                event = EventRecord.from_wire(open_body(orjson.loads(record.value), keys)).event
                found[event.case.case_id].append((event.seq, event.text))
    finally:
        keys.close()
    return found


def _count(stage: Stage, fleet: _Fleet, outcome: Outcome) -> None:
    """Every acknowledged batch once at its answered seqs, every case's seqs contiguous; what was refused, printed."""
    logs = _logs(stage)
    outcome.broken += fleet.broken[:10]
    for agent in fleet.agents:
        log = logs.get(agent.case_id, [])
        if [seq for seq, _ in log] != list(range(1, len(log) + 1)):
            outcome.broken.append(f"{agent.case_id}: seqs not 1..{len(log)}")
        seqs_of = defaultdict(list)
        for seq, text in log:
            seqs_of[text].append(seq)
        batches = {int(text.split(" batch ")[1].split(" ")[0]) for text in seqs_of}
        outcome.duplicated += sum(1 for b in batches if any(len(seqs_of[t]) > 1 for t in _texts(agent.case_id, b)))
        for batch, answered in agent.acked.items():
            outcome.expected += 1
            found = [seqs_of.get(text, []) for text in _texts(agent.case_id, batch)]
            if any(not seqs for seqs in found):
                outcome.lost += 1
            elif [seqs[0] for seqs in found] == answered:
                outcome.decided_once += 1
            else:
                outcome.broken.append(f"{agent.case_id} batch {batch}: answered seqs {answered}, written {found}")
    refusals = sum((a.refusals for a in fleet.agents), Counter())
    print(f"  {outcome.scenario}: {outcome.expected} batches acknowledged; refusals on the way: "
          f"{dict(refusals) or 'none'}", flush=True)  # fmt: skip


@dataclass
class _Doors:
    """The door processes of a scenario, by port; `killed` are those stopped on purpose."""

    stage: Stage
    key: str
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    stopped: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self) -> int:
        port = free_cluster_port(1)
        self.procs[port] = _spawn(self.stage, ["api", "--port", str(port)], f"api-{port}")
        _await_up(port)
        return port

    def kill(self, port: int, how: signal.Signals = signal.SIGKILL) -> None:
        proc = self.procs.pop(port)
        proc.send_signal(how)
        proc.wait(30)
        self.stopped.append(proc)

    def crashed(self, scenario: str) -> int:
        """How many doors not stopped on purpose have exited; each one's exit code and last log lines printed."""
        gone = {port: proc.returncode for port, proc in self.procs.items() if proc.poll() is not None}
        for port, code in gone.items():
            print(f"\n{scenario}: the door on port {port} exited with {code}; its last lines:", flush=True)
            for line in (self.stage.logs / f"api-{port}.log").read_text(errors="replace").splitlines()[-30:]:
                print(f"    {line[:600]}", flush=True)
        if gone:
            _keep_logs(self.stage, scenario)
        return len(gone)

    def close(self) -> None:
        for proc in self.procs.values():
            proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def _await_up(port: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"the door on port {port} did not come up")


@contextmanager
def _doors(bootstrap: str, scenario: str, work: Path, count: int) -> Iterator[_Doors]:
    with _stage(bootstrap, scenario, work) as stage:
        key = ApiKeys(work / scenario / "api-keys.json").add(TENANT)[1]
        stage.env.update(DPM_API_KEYS_FILE=str(work / scenario / "api-keys.json"), DPM_API_RATE_PER_S="100000")
        doors = _Doors(stage, key)
        try:
            for _ in range(count):
                doors.start()
            time.sleep(3)  # the doors' group settles
            yield doors
        finally:
            doors.close()


def door_kill(bootstrap: str, work: Path, agents: int, run_s: float) -> Outcome:
    outcome = Outcome("door-kill", injected=1, recover_limit_s=30.0)
    with _doors(bootstrap, outcome.scenario, work, 3) as doors:
        fleet = _Fleet(list(doors.procs), doors.key, agents)
        fleet.start()
        time.sleep(run_s / 2)
        victim = next(iter(doors.procs))
        doors.kill(victim)  # mid-batch: agents' batches are in flight through it
        killed_at = time.monotonic()
        fleet.set_ports(list(doors.procs))
        time.sleep(run_s / 2)
        fleet.stop()
        outcome.recover_s = fleet.recovered_after(killed_at)
        outcome.crashes = doors.crashed(outcome.scenario)
        _count(doors.stage, fleet, outcome)
        _kept_if_broken(doors.stage, outcome)
    return outcome


def door_outage(work: Path, agents: int, away_s: float, *, secure: bool = False) -> Outcome:
    outcome = Outcome("door-outage", injected=1, recover_limit_s=60.0)
    home = work / "door-outage-cluster"
    settings = Settings.from_env()
    with _cluster(settings, home, 1, secure=secure) as running, \
            _doors(running.bootstrap, outcome.scenario, work, 2) as doors:  # fmt: skip
        fleet = _Fleet(list(doors.procs), doors.key, agents)
        fleet.start()
        time.sleep(5)
        local_broker.stop(home)  # in the middle of the doors' group commits
        time.sleep(away_s)
        local_broker.start(home, settings.paths.cache_dir, settings.kafka.version, nodes=1, port=running.port,
                           secure=secure)  # fmt: skip
        back_at = time.monotonic()
        time.sleep(15)
        fleet.stop()
        outcome.recover_s = fleet.recovered_after(back_at)
        outcome.crashes = doors.crashed(outcome.scenario)
        _count(doors.stage, fleet, outcome)
        _kept_if_broken(doors.stage, outcome)
    return outcome


def door_storm(bootstrap: str, work: Path, agents: int, changes: int, every_s: float) -> Outcome:
    outcome = Outcome("door-storm", injected=changes, recover_limit_s=30.0)
    with _doors(bootstrap, outcome.scenario, work, 2) as doors:
        fleet = _Fleet(list(doors.procs), doors.key, agents)
        fleet.start()
        changed_at = time.monotonic()
        for change in range(changes):
            time.sleep(every_s)
            if change % 2 == 0 or len(doors.procs) < 2:
                fleet.set_ports([*doors.procs, doors.start()])  # a door joins
            else:
                victim = next(iter(doors.procs))
                fleet.set_ports([p for p in doors.procs if p != victim])
                doors.kill(victim, signal.SIGTERM if change % 4 == 1 else signal.SIGKILL)  # leaves, or dies
            changed_at = time.monotonic()
        time.sleep(every_s)
        fleet.stop()
        outcome.recover_s = fleet.recovered_after(changed_at)
        outcome.crashes = doors.crashed(outcome.scenario)
        _count(doors.stage, fleet, outcome)
        _kept_if_broken(doors.stage, outcome)
    return outcome


def _kept_if_broken(stage: Stage, outcome: Outcome) -> None:
    if not outcome.ok and not outcome.crashes:  # a crash keeps them already
        _keep_logs(stage, outcome.scenario)


def door_scenarios(big: bool, secure: bool) -> dict[str, Callable[[str, Path], Outcome]]:
    """The door scenarios by name, as chaos.py's: each takes the shared cluster's bootstrap servers and a folder."""
    agents = 16 if big else 8
    return {
        "door-kill": lambda b, w: door_kill(b, w, agents=agents, run_s=40 if big else 20),
        "door-outage": lambda _, w: door_outage(w, agents=agents, away_s=30 if big else 20, secure=secure),
        "door-storm": lambda b, w: door_storm(b, w, agents=agents, changes=12 if big else 6, every_s=4.0),
    }
