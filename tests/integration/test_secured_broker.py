"""The secured local broker refuses what the ACL plan does not grant, and the pipeline runs on the plan alone.

One secured cluster (TLS, SCRAM-SHA-512, standard authorizer, deny by default) for the module; its
users come from `dpm broker up --secure`'s provisioning, their ACLs from `dpm acl apply`.
"""

from __future__ import annotations

import os
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from pipeline.client import DecisionMemory
from pipeline.config.settings import Settings, keys_folder
from pipeline.core.task import Architecture
from pipeline.kafka.cluster.acl_plan import Role, plan
from pipeline.kafka.cluster.acls import apply_grants
from pipeline.kafka.cluster.admin import admin_client, fetch_metadata, topic_partitions
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.errors import BrokerUnavailableError, KafkaAdapterError, NotAuthorizedError
from pipeline.kafka.keytopic.keystore import kafka_case_keys
from pipeline.kafka.reading.range_reads import read_topic
from pipeline.kafka.writing.door_group import DoorGroup
from pipeline.kafka.writing.producer import EventProducer
from pipeline.keys.providers import LocalFileKeyProvider
from pipeline.services.api_keys import ApiKeys
from pipeline.services.cluster import pipeline_processes
from pipeline.services.read_outputs import await_decisions, load_outputs
from pipeline.wire.event import CaseOpening
from pipeline.wire.trigger import DecisionRequest
from tests.conftest import free_port
from tests.kafka_support import unique_prefix
from tests.pipeline_support import small_cases, worker_env
from tests.secured_support import Secured, code, command_lines, produce_error

pytestmark = pytest.mark.integration

BUDGET = 900


@dataclass(frozen=True)
class Shared:
    """The secured cluster with the shared topics of one prefix, created by the operator and granted by the plan."""

    secured: Secured
    names: TopicNames

    def config(self, user: str) -> dict[str, str]:
        return self.secured.config(user)


@pytest.fixture(scope="module")
def shared(secured: Secured) -> Shared:
    names = TopicNames(unique_prefix("sec"))
    apply_grants(secured.config("admin"), plan(names))
    made = secured.dpm(Role.OPERATOR.value, "topics", "create", "--partitions", "3", DPM_TOPIC_PREFIX=names.prefix)
    assert made.returncode == 0, made.stderr[-2000:]
    return Shared(secured, names)


def _errors_of(config: dict[str, str]) -> list[KafkaError]:
    """The errors a producer with `config` reports while it tries to reach the cluster for a few seconds."""
    errors: list[KafkaError] = []
    producer = Producer({**config, "error_cb": errors.append})
    try:
        producer.list_topics(timeout=5)
    except KafkaException as exc:
        errors.append(exc.args[0])
    producer.poll(1)  # serves error_cb
    return errors


def test_a_client_without_valid_credentials_is_refused(shared: Shared) -> None:
    good = shared.config("worker")
    with pytest.raises(BrokerUnavailableError):  # PLAINTEXT to a TLS listener: no handshake, no metadata
        fetch_metadata({"bootstrap.servers": shared.secured.cluster.bootstrap}, timeout_s=5)
    with pytest.raises(KafkaAdapterError, match="refused the credentials") as refused:  # the user is told why
        fetch_metadata({**good, "sasl.password": "not-the-password"}, timeout_s=5)
    assert "not-the-password" not in str(refused.value)
    wrong = _errors_of({**good, "sasl.password": "not-the-password"})
    assert any(e.code() == KafkaError._AUTHENTICATION for e in wrong), wrong
    unknown = _errors_of({**good, "sasl.username": "mallory"})
    assert any(e.code() == KafkaError._AUTHENTICATION for e in unknown), unknown
    untrusted = _errors_of({k: v for k, v in good.items() if k != "ssl.ca.location"})  # the system CAs only
    assert any(e.code() == KafkaError._SSL for e in untrusted) or any(
        e.code() == KafkaError._TRANSPORT for e in untrusted), untrusted  # fmt: skip
    assert fetch_metadata(good).broker_ids == (1,)


def _read_error(config: dict[str, str], topic: str, group: str | None = None) -> KafkaError | None:
    consumer = Consumer({**config, "group.id": group or "dpm-reader-probe", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})  # fmt: skip
    try:
        if group is None:
            consumer.assign([TopicPartition(topic, 0, 0)])
        else:
            consumer.subscribe([topic])
        for _ in range(20):
            msg = consumer.poll(0.5)
            error: KafkaError | None = None if msg is None else msg.error()
            if error is not None:
                return error
        return None
    finally:
        consumer.close()


def test_each_role_is_refused_outside_its_grants(shared: Shared) -> None:
    names = shared.names
    producer, worker, auditor = (shared.config(r.value) for r in (Role.PRODUCER, Role.WORKER, Role.AUDITOR))
    assert produce_error(producer, names.events) is None  # its own grant
    for topic in (names.decisions, names.audit):  # outputs are not the producer's to write (it reads them: its
        assert code(produce_error(producer, topic)) == KafkaError.TOPIC_AUTHORIZATION_FAILED  # client waits, replays)
    with pytest.raises(NotAuthorizedError, match=f"not authorized to use topic {names.prefix}-baseline"):
        next(read_topic(producer, f"{names.prefix}-baseline-summ-cases-changelog"))  # nor the baseline's state
    assert code(produce_error(auditor, names.decisions)) == KafkaError.TOPIC_AUTHORIZATION_FAILED  # it reads only
    for role in (producer, worker):  # contests are the auditor's to write, and only they are
        assert code(produce_error(role, names.contests)) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    foreign_group = _read_error(worker, names.triggers, group=f"{names.prefix}-baseline")
    assert code(foreign_group) == KafkaError.GROUP_AUTHORIZATION_FAILED
    outsider = Producer({**worker, "transactional.id": "not-a-projection-worker"})
    with pytest.raises(KafkaException) as refused_txn:
        outsider.init_transactions(15)
    assert refused_txn.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    admin = admin_client(producer)  # kept referenced: the future fails with _DESTROY once its client is gone
    created = admin.create_topics([NewTopic(f"{names.prefix}.extra", 1, 1)])
    with pytest.raises(KafkaException) as refused_create:
        created[f"{names.prefix}.extra"].result(timeout=15)
    assert refused_create.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_the_doors_principal_joins_the_doors_group_and_learns_who_owns_each_partition(shared: Shared) -> None:
    names = shared.names
    doors = DoorGroup(shared.config(Role.PRODUCER.value), names.doors_group, names.doors_subscription(),
                      "http://127.0.0.1:9")  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (doors.view().settled and doors.view().members == 1):
            assert time.monotonic() < deadline, "the door never settled in its group"
            time.sleep(0.2)
        partitions = topic_partitions(shared.config(Role.PRODUCER.value), names.events)
        assert doors.owned() == {(names.events, p) for p in range(partitions)}
        assert set(doors.view().owners.values()) == {"http://127.0.0.1:9"}
    finally:
        doors.close()
    # no other role may join it (a worker is a reader of events, not a door)
    assert code(_read_error(shared.config(Role.WORKER.value), names.events, group=names.doors_group)) == (
        KafkaError.GROUP_AUTHORIZATION_FAILED
    )


@pytest.mark.any_broker  # the shared mode's weakness is the plan's, shown once
def test_in_shared_topics_a_tenant_producer_can_still_write_in_another_tenant_name(shared: Shared) -> None:
    """The shared mode's weakness, shown: the broker authorizes topics, not the tenant a record names."""
    producer = shared.config(Role.PRODUCER.value)
    assert produce_error(producer, shared.names.triggers) is None  # a trigger for any tenant's case is accepted
    assert _read_error(producer, shared.names.keys) is None  # and every tenant's wrapped data keys are readable


def test_worker_and_baseline_on_their_plan_alone_decide_every_trigger_once(shared: Shared, tmp_path: Path) -> None:
    names = shared.names
    keys_dir = Path(os.environ["DPM_KEYS_DIR"])
    sealing = kafka_case_keys(shared.config(Role.PRODUCER.value), names.keys,
                              LocalFileKeyProvider(keys_folder(keys_dir, names.prefix)))  # fmt: skip
    cases = small_cases(per_domain=1)[:2]
    producer = EventProducer(shared.config(Role.PRODUCER.value), names, cipher=sealing)
    clear = EventProducer(shared.config(Role.PRODUCER.value), names)  # the workers make this case's key
    positions = {c.ref: tuple((producer if n else clear).append(c.trajectory.events, CaseOpening(c.task, (BUDGET,))))
                 for n, c in enumerate(cases)}  # fmt: skip
    clear.close()
    requests = [DecisionRequest(f"s{n}", c.ref, c.task, BUDGET, (Architecture.DPM, Architecture.SUMM),
                                positions[c.ref], len(positions[c.ref])) for n, c in enumerate(cases)]  # fmt: skip
    producer.triggers(requests)
    producer.close()
    sealing.close()
    port = free_port()
    env = {**worker_env(shared.secured.cluster.bootstrap, names, tmp_path), "DPM_UI_REFRESH_S": "0.5",
           "DPM_UI_ADMIN_TOKEN": f"admin-{uuid.uuid4().hex}"}  # fmt: skip
    roles = {"worker": "worker", "baseline": "baseline", "ui": "auditor"}

    def as_role(command: list[str]) -> dict[str, str]:
        return {**env, "DPM_KAFKA_CONFIG": str(shared.secured.properties(roles[command[0]]))}

    auditor = shared.config(Role.AUDITOR.value)
    reading = kafka_case_keys(auditor, names.keys, LocalFileKeyProvider(keys_folder(keys_dir, names.prefix)))
    commands = [["worker"], ["baseline", "--budgets", str(BUDGET)], ["ui", "--port", str(port)]]
    with pipeline_processes(commands, as_role, tmp_path / "logs") as procs:
        seen = command_lines([p.pid for p in procs])
        await_decisions(auditor, names, 2 * len(requests), timeout_s=180, cipher=reading)
        assert _indexed_by_ui(f"http://127.0.0.1:{port}", 2 * len(requests)), "the UI did not read the decisions"
    outputs = load_outputs(auditor, names, cipher=reading)
    reading.close()
    assert set(outputs.decisions) == {r.decision_key(a) for r in requests for a in (Architecture.DPM,
                                                                                    Architecture.SUMM)}  # fmt: skip
    assert outputs.duplicates == 0
    replayed = shared.secured.dpm(Role.AUDITOR.value, "replay", "--all", DPM_TOPIC_PREFIX=names.prefix)
    assert replayed.returncode == 0, replayed.stdout[-2000:] + replayed.stderr[-2000:]  # every decision MATCH
    compared = shared.secured.dpm(Role.AUDITOR.value, "compare", DPM_TOPIC_PREFIX=names.prefix)
    assert "agreement" in compared.stdout, compared.stderr[-2000:]
    contested = shared.secured.dpm(Role.AUDITOR.value, "whatif", "--decision", "s1:dpm", "--drop", "1", "--json",
                                   DPM_TOPIC_PREFIX=names.prefix)  # fmt: skip
    assert contested.returncode == 0, contested.stdout[-2000:] + contested.stderr[-2000:]  # on the plan's grants
    explained = shared.secured.dpm(Role.AUDITOR.value, "explain", "--decision", "s1:dpm", "--decisive",
                                   DPM_TOPIC_PREFIX=names.prefix)  # fmt: skip
    assert "recorded as contest" in explained.stdout, explained.stdout[-2000:] + explained.stderr[-2000:]
    [*published] = read_topic(auditor, names.contests)
    assert len(published) == 2
    passwords = [shared.config(user)["sasl.password"] for user in ("worker", "baseline", "auditor")]
    logs = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*.log"))
    for password in passwords:  # never on a command line, never in a log
        assert password not in logs + replayed.stdout + replayed.stderr
        assert all(password not in line for line in seen)
    assert len(seen) == len(commands), "the processes' command lines were not read"


def _indexed_by_ui(base: str, count: int, timeout_s: float = 60) -> bool:
    """Whether `dpm ui`'s /healthz reports `count` decisions indexed within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base}/healthz", timeout=5) as answer:  # noqa: S310 - loopback
                if int(answer.read().decode().split()[1]) >= count:
                    return True
        except OSError:
            pass
        time.sleep(0.5)
    return False


def test_the_agents_principal_erases_a_case_to_its_segment_views_as_a_door_s_admin_delete_does(shared: Shared) -> None:
    """`DELETE /v1/tenants/{t}/cases/{c}` runs erase_case as the door's principal (User:producer in shared mode).

    It stopped at the segments topic, after destroying the key and tombstoning the events: the plan's
    grants now reach every step, and an erasure run again does nothing, without an error.
    """
    names = shared.names
    case = small_cases(per_domain=1, tenant=f"erase{uuid.uuid4().hex[:6]}")[0]
    keys_dir = Path(os.environ["DPM_KEYS_DIR"])
    sealing = kafka_case_keys(shared.config(Role.PRODUCER.value), names.keys,
                              LocalFileKeyProvider(keys_folder(keys_dir, names.prefix)))  # fmt: skip
    writer = EventProducer(shared.config(Role.PRODUCER.value), names, cipher=sealing)
    writer.append(case.trajectory.events[:3])
    writer.close()
    sealing.close()
    views = Producer(shared.config(Role.WORKER.value))  # a long case's segment views, as a worker keeps them
    views.produce(names.segments, key=f"{case.ref.key}/segment-0".encode(), value=b"{}")
    assert views.flush(30) == 0
    erase = ("erase", "--tenant", case.ref.tenant, "--case", case.ref.case_id)
    done = shared.secured.dpm(Role.PRODUCER.value, *erase, DPM_TOPIC_PREFIX=names.prefix)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "1 data key(s) destroyed, 3 event tombstone(s) and 1 segment view tombstone(s)" in done.stdout
    again = shared.secured.dpm(Role.PRODUCER.value, *erase, DPM_TOPIC_PREFIX=names.prefix)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "to erase: never written, or erased already" in again.stdout, again.stdout


def test_the_agents_principal_appends_through_case_writers_and_sends_requests_on_its_plan_alone(
    shared: Shared, tmp_path: Path
) -> None:
    """The client library as User:producer in shared mode: a case writer's transactional id, its partition read back."""
    settings = Settings.from_env({"DPM_KAFKA_CONFIG": str(shared.secured.properties(Role.PRODUCER.value)),
                                  "DPM_TOPIC_PREFIX": shared.names.prefix, "DPM_HOME": str(tmp_path),
                                  "DPM_KEYS_DIR": os.environ["DPM_KEYS_DIR"]})  # fmt: skip
    with DecisionMemory("acme", settings=settings) as memory:
        first = memory.append("client-1", kind="message", text="income 84,000")
    with DecisionMemory("acme", settings=settings) as memory:  # registers again: reads the case's partitions
        second = memory.append("client-1", kind="message", text="score 712")
        decision_id = memory.request("client-1", domain="loan")
    assert (first.seq, second.seq) == (1, 2)
    assert decision_id.endswith(":dpm")


def test_the_http_api_and_the_mcp_server_serve_a_tenant_on_the_agents_plan_alone(
    shared: Shared, tmp_path: Path
) -> None:
    """`dpm api` and `dpm mcp --http` as User:producer, the worker as User:worker: a tenant's key appends and decides.

    The deployed shape (deploy/k8s/api-deployment.yaml): the door holds the agents' principal, and the
    API keys, not the broker, tell one tenant from another.
    """
    names = shared.names
    case = small_cases(per_domain=1, tenant="acme")[0]
    keys = ApiKeys(tmp_path / "api-keys.json")
    acme, globex = keys.add("acme")[1], keys.add("globex")[1]
    api_port, mcp_port = free_port(), free_port()
    env = {**worker_env(shared.secured.cluster.bootstrap, names, tmp_path), "DPM_API_KEYS_FILE": str(keys.path)}
    roles = {"worker": Role.WORKER, "api": Role.PRODUCER, "mcp": Role.PRODUCER}

    def as_role(command: list[str]) -> dict[str, str]:
        return {**env, "DPM_KAFKA_CONFIG": str(shared.secured.properties(roles[command[0]].value))}

    steps = {"events": [{"kind": e.kind, "text": e.text} for e in case.trajectory.events]}
    task = {"domain": case.task.domain, "task": case.task.task, "label_space": list(case.task.label_space)}
    commands = [["worker"], ["api", "--port", str(api_port)], ["mcp", "--http", "--port", str(mcp_port)]]
    with pipeline_processes(commands, as_role, tmp_path / "logs"):
        with httpx.Client(base_url=f"http://127.0.0.1:{api_port}", headers={"Authorization": f"Bearer {acme}"},
                          timeout=180) as http:  # fmt: skip
            _await_http(http)
            appended = http.post("/v1/cases/sec-http/events", json=steps)
            decided = http.post("/v1/cases/sec-http/decisions", json={"task": task, "budget_chars": 2_000,
                                                                      "wait_s": 60})  # fmt: skip
            decision = f"/v1/decisions/{decided.json().get('decision_id')}"
            replayed = http.get(f"{decision}/replay")
            mine = http.get(decision)
            theirs = http.get(decision, headers={"Authorization": f"Bearer {globex}"})
        by_tool = anyio.run(_one_mcp_round, f"http://127.0.0.1:{mcp_port}/mcp", acme, case.task.domain)
    assert appended.status_code == 201, appended.text
    assert [e["seq"] for e in appended.json()["events"]] == list(range(1, len(case.trajectory) + 1))
    assert decided.status_code == 200, decided.text
    assert decided.json()["label"] in case.task.label_space
    assert replayed.json()["status"] == "MATCH"  # the audit trail read back on the producer's grants
    assert mine.status_code == 200, mine.text
    assert theirs.status_code == 404  # the same decision, asked for with another tenant's key: as unknown
    assert by_tool["appended"] == 1
    assert by_tool["label"] in case.task.label_space


def _await_http(http: httpx.Client, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if http.get("/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"{http.base_url} did not come up"
        time.sleep(0.3)


async def _one_mcp_round(url: str, key: str, domain: str) -> dict[str, Any]:
    """An agent's step and its decision, as two tool calls over streamable HTTP with the tenant's API key."""
    deadline = time.monotonic() + 60
    while True:  # the server is up once it answers at all (an unauthenticated probe: 401)
        try:
            httpx.post(url, json={}, timeout=2)
            break
        except httpx.HTTPError:
            assert time.monotonic() < deadline, f"{url} did not come up"
            await anyio.sleep(0.3)
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=180) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        step = {"case_id": "sec-mcp", "kind": "document", "text": "Applicant income verified: 84,000 a year."}
        appended = await client.call_tool("append_event", step)
        asked = {"case_id": "sec-mcp", "domain": domain, "budget_chars": 2_000, "wait_s": 60}
        decided = await client.call_tool("request_decision", asked)
    assert not appended.is_error, appended.content
    assert not decided.is_error, decided.content
    return {"appended": appended.structured_content["seq"], "label": decided.structured_content["label"]}
