"""The only broker stops and comes back: the same worker and baseline processes decide every trigger once.

Runs on the Kafka release DPM_KAFKA_VERSION names (CI: 3.9.2 with the classic group protocol, then
4.4.0 with KIP-848's consumer protocol). `make chaos` runs the longer outage (60 s).
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from pipeline.client import ClusterUnavailableError, DecisionMemory, DecisionTimeoutError
from pipeline.config.settings import Settings, keys_folder
from pipeline.core.events import CaseRef
from pipeline.core.task import Architecture
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.keytopic.keystore import kafka_case_keys
from pipeline.kafka.local import local_broker
from pipeline.kafka.local.broker_runtime import KafkaRelease
from pipeline.kafka.reading.range_reads import read_topic
from pipeline.kafka.writing.producer import EventProducer
from pipeline.keys.providers import LocalFileKeyProvider
from pipeline.services.api_keys import ApiKeys
from pipeline.services.cluster import pipeline_processes, private_cluster
from pipeline.services.read_outputs import await_decisions
from pipeline.wire.event import CaseOpening
from pipeline.wire.trigger import DecisionRequest
from tests.conftest import free_port
from tests.integration.test_client_appends import case_log, client_settings
from tests.pipeline_support import create_topics, small_cases, worker_env
from tests.processes import where_it_waits

BUDGET = 900
AWAY_S = 20
DRAIN_S = 8
_SETTINGS = Settings.from_env()
# The classic protocol's outage on 3.9.2; on 4.x the consumer protocol's (KIP-848), the one it adds: the
# classic protocol on 4.x is exercised by every other test of that tier.
PROTOCOLS = ["consumer"] if KafkaRelease(_SETTINGS.kafka.version).major >= 4 else ["classic"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_after_an_outage_every_trigger_is_decided_once_by_the_same_processes(
    protocol: str, tmp_path: Path, keys_dir: Path
) -> None:
    home = tmp_path / "cluster"
    with private_cluster(_SETTINGS, home, nodes=1) as running:
        config = {"bootstrap.servers": running.bootstrap}
        names = TopicNames(f"outage-{protocol}")
        create_topics(config, names)
        keys = kafka_case_keys(config, names.keys, LocalFileKeyProvider(keys_folder(keys_dir, names.prefix)))
        producer = EventProducer(config, names, keys)
        cases = small_cases(per_domain=1)
        positions = {c.ref: tuple(producer.append(c.trajectory.events, CaseOpening(c.task, (BUDGET,)))) for c in cases}
        both = (Architecture.DPM, Architecture.SUMM)
        requests = [DecisionRequest(f"o{n}", c.ref, c.task, BUDGET, both, positions[c.ref], len(positions[c.ref]))
                    for n, c in enumerate(cases * 3)]  # fmt: skip
        env = {**worker_env(running.bootstrap, names, tmp_path), "DPM_GROUP_PROTOCOL": protocol,
               "DPM_DRAIN_S": str(DRAIN_S)}  # fmt: skip
        commands = [["worker"], ["baseline", "--budgets", str(BUDGET)]]
        expected = {r.decision_id(a) for r in requests for a in both}
        logs = tmp_path / "logs"
        with pipeline_processes(commands, env, logs) as procs:
            producer.triggers(requests[:6])
            await_decisions(config, names, 12, timeout_s=120, cipher=keys)
            local_broker.stop(home)
            time.sleep(AWAY_S)
            local_broker.start(home, _SETTINGS.paths.cache_dir, _SETTINGS.kafka.version, nodes=1, port=running.port)
            back = time.monotonic()
            producer.triggers(requests[6:])
            outputs = await_decisions(config, names, 2 * len(requests), timeout_s=120, cipher=keys)
            recovered_s = time.monotonic() - back
            missing = expected - outputs.decision_ids()
            if missing:  # say where each process waits
                waits = "\n".join(f"{c[0]}: {where_it_waits(p, logs / f'{c[0]}-{i}.log')}"
                                   for i, (c, p) in enumerate(zip(commands, procs, strict=True)))  # fmt: skip
                raise AssertionError(f"not decided within 120 s of the broker's return: {sorted(map(str, missing))}\n"
                                     f"{waits}")  # fmt: skip
            assert all(p.poll() is None for p in procs), "the same processes serve on"
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            stopped = time.monotonic()
            for proc in procs:
                try:
                    proc.wait(max(0.1, stopped + DRAIN_S + 5 - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pytest.fail(f"{proc.args!r} did not stop within its drain deadline of {DRAIN_S} s")
        producer.close()
        keys.close()
        letters = list(read_topic(config, names.dlq))
    assert outputs.decision_ids() == expected
    assert outputs.duplicates == 0
    assert recovered_s < 60
    assert letters == []  # nothing dead-lettered: Kafka away is no record's fault


@pytest.mark.any_broker  # the client's own retries and errors: on 3.9.2 only (the worker's outage runs on both)
def test_a_client_during_outages_fails_clearly_or_waits_and_loses_no_acknowledged_append(
    tmp_path: Path, keys_dir: Path
) -> None:
    """The front door while the only broker is away, twice: acknowledged appends survive, a failed append leaves
    nothing, a decision asked before any reply was read is refused (nothing requested), and one the broker did not
    acknowledge in time is decided once it is back, collected by its id."""
    home = tmp_path / "cluster"
    case = small_cases(per_domain=1, tenant="acme")[0]
    steps = [(e.kind, e.text) for e in case.trajectory.events]

    def restart() -> None:
        local_broker.start(home, _SETTINGS.paths.cache_dir, _SETTINGS.kafka.version, nodes=1, port=running.port)

    with private_cluster(_SETTINGS, home, nodes=1) as running:
        config = {"bootstrap.servers": running.bootstrap}
        names = TopicNames("outage-client")
        create_topics(config, names)
        with DecisionMemory("acme", settings=client_settings(running.bootstrap, names, tmp_path)) as memory:
            acknowledged = memory.append_many("case-1", steps)
            local_broker.stop(home)
            with pytest.raises(ClusterUnavailableError, match="nothing of it was written"):
                memory.append("case-1", kind="message", text="written while the broker was away", timeout=5)
            with pytest.raises(ClusterUnavailableError, match="nothing was requested"):
                memory.decide("case-1", task=case.task, budget=BUDGET, timeout=5)
            restart()
            logs = tmp_path / "logs"
            with pipeline_processes([["worker"]], worker_env(running.bootstrap, names, tmp_path), logs) as procs:
                first = memory.decide("case-1", task=case.task, budget=BUDGET, timeout=120)
                local_broker.stop(home)
                with pytest.raises(DecisionTimeoutError, match="may still arrive") as unconfirmed:
                    memory.decide("case-1", task=case.task, budget=BUDGET, timeout=5)
                restart()
                try:
                    late = memory.wait(unconfirmed.value.decision_id, timeout=120)
                except DecisionTimeoutError as exc:  # say whether the request arrived, and where the worker waits
                    arrived = [r.key for r in read_topic(config, names.triggers)]
                    where = where_it_waits(procs[0], logs / "worker-0.log")
                    raise AssertionError(f"{len(arrived)} trigger(s) on the topic; worker {where}") from exc
            keys = kafka_case_keys(config, names.keys, LocalFileKeyProvider(keys_folder(keys_dir, names.prefix)))
            log = case_log(config, names, CaseRef("acme", "case-1"), keys)
            keys.close()
    assert [p.seq for p in acknowledged] == list(range(1, len(steps) + 1))
    assert log == [(n, text) for n, (_, text) in enumerate(steps, start=1)]  # the failed append left nothing
    assert first.record.events_count == late.record.events_count == len(steps)
    assert late.decision_id == unconfirmed.value.decision_id != first.decision_id
    assert late.label in case.task.label_space


@pytest.mark.any_broker  # the door's own bound: on 3.9.2 only
def test_the_http_api_answers_503_with_retry_after_within_its_bound_while_the_broker_is_away(
    tmp_path: Path, keys_dir: Path
) -> None:
    """An agent with a 10 s timeout hears 503 and Retry-After, not a timeout: the door waits DPM_API_BROKER_WAIT_S."""
    home = tmp_path / "cluster"
    keys = ApiKeys(tmp_path / "api-keys.json")
    headers = {"Authorization": f"Bearer {keys.add('acme')[1]}", "Idempotency-Key": "step-2"}
    step: dict[str, object] = {"events": [{"kind": "note", "text": "a step"}]}
    with private_cluster(_SETTINGS, home, nodes=1) as running:
        names = TopicNames("outage-api")
        create_topics({"bootstrap.servers": running.bootstrap}, names)
        env = {**worker_env(running.bootstrap, names, tmp_path), "DPM_API_KEYS_FILE": str(keys.path),
               "DPM_API_BROKER_WAIT_S": "3"}  # fmt: skip
        port = free_port()
        url = f"http://127.0.0.1:{port}/v1/cases/case-1/events"
        with pipeline_processes([["api", "--port", str(port)]], env, tmp_path / "logs"):
            first = _posted(url, step, {"Authorization": headers["Authorization"]}, wait_s=60)
            local_broker.stop(home)
            started = time.monotonic()
            away = httpx.post(url, json=step, headers=headers, timeout=10)
            answered_s = time.monotonic() - started
            local_broker.start(home, _SETTINGS.paths.cache_dir, _SETTINGS.kafka.version, nodes=1, port=running.port)
            back = _posted(url, step, headers, wait_s=60)  # the same key again, once the broker is back
    assert first.status_code == 201, first.text
    assert away.status_code == 503, away.text
    assert away.headers["retry-after"]
    assert answered_s < 9  # within the bound (3 s) and its last attempt, well inside the agent's 10 s
    assert back.status_code == 201, back.text
    assert back.json()["events"][0]["seq"] == 2  # written once: the refused try left nothing


def _posted(url: str, body: dict[str, object], headers: dict[str, str], wait_s: float) -> httpx.Response:
    """The answer to a POST, asked again while the server is starting or answers 503 (for up to `wait_s`)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            answer = httpx.post(url, json=body, headers=headers, timeout=30)
            if answer.status_code != 503 or time.monotonic() > deadline:
                return answer
        except httpx.HTTPError:
            assert time.monotonic() < deadline
        time.sleep(0.5)
