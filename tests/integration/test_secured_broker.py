"""The secured local broker refuses what the ACL plan does not grant, and the pipeline runs on the plan alone.

One secured cluster (TLS, SCRAM-SHA-512, standard authorizer, deny by default) for the module; its
users come from `dpm broker up --secure`'s provisioning, their ACLs from `dpm acl apply`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from pipeline.config.settings import Settings, keys_folder, read_properties
from pipeline.core.task import Architecture
from pipeline.kafka import local_broker
from pipeline.kafka.acl_plan import Role, plan
from pipeline.kafka.acls import apply_grants
from pipeline.kafka.admin import admin_client, fetch_metadata
from pipeline.kafka.credentials import provision
from pipeline.kafka.errors import BrokerUnavailableError, KafkaAdapterError, NotAuthorizedError
from pipeline.kafka.keystore import kafka_case_keys
from pipeline.kafka.producer import EventProducer
from pipeline.kafka.range_reads import read_topic
from pipeline.kafka.topics import TopicNames
from pipeline.keys.providers import LocalFileKeyProvider
from pipeline.services.cluster import pipeline_processes, private_cluster
from pipeline.services.read_outputs import await_decisions, load_outputs
from pipeline.wire.event import CaseOpening
from pipeline.wire.trigger import DecisionRequest
from tests.kafka_support import unique_prefix
from tests.pipeline_support import small_cases, worker_env

pytestmark = pytest.mark.integration

BUDGET = 900


@dataclass(frozen=True)
class Secured:
    cluster: local_broker.RunningCluster
    home: Path
    names: TopicNames

    def config(self, user: str) -> dict[str, str]:
        """The librdkafka properties `dpm broker up --secure` wrote for `user`."""
        return read_properties(self.properties(user))

    def properties(self, user: str) -> Path:
        return self.home / "credentials" / f"{user}.properties"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    home = tmp_path_factory.mktemp("secured-home")
    names = TopicNames(unique_prefix("sec"))
    with private_cluster(Settings.from_env(), home, secure=True) as cluster:
        provision(cluster.layout, home)
        secured = Secured(cluster, home, names)
        apply_grants(secured.config("admin"), plan(names))
        admin = admin_client(secured.config(Role.OPERATOR.value))  # the operator makes the topics, as in production
        subprocess.run([sys.executable, "-m", "pipeline", "topics", "create", "--partitions", "3"], check=True,
                       env={**os.environ, "DPM_HOME": str(home), "DPM_TOPIC_PREFIX": names.prefix,
                            "DPM_KAFKA_CONFIG": str(secured.properties(Role.OPERATOR.value))},
                       capture_output=True, timeout=120)  # fmt: skip
        assert names.events in admin.list_topics(timeout=10).topics
        yield secured


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


def test_a_client_without_valid_credentials_is_refused(secured: Secured) -> None:
    good = secured.config("worker")
    with pytest.raises(BrokerUnavailableError):  # PLAINTEXT to a TLS listener: no handshake, no metadata
        fetch_metadata({"bootstrap.servers": secured.cluster.bootstrap}, timeout_s=5)
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


def _produce_error(config: dict[str, str], topic: str) -> KafkaError | None:
    reports: list[KafkaError | None] = []
    producer = Producer({**config, "message.timeout.ms": 10000})
    producer.produce(topic, b"x", key=b"k", on_delivery=lambda err, _msg: reports.append(err))
    producer.flush(15)
    assert reports, "no delivery report"
    return reports[0]


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


def _code(error: KafkaError | None) -> int | None:
    return None if error is None else int(error.code())


def test_each_role_is_refused_outside_its_grants(secured: Secured) -> None:
    names = secured.names
    producer, worker, auditor = (secured.config(r.value) for r in (Role.PRODUCER, Role.WORKER, Role.AUDITOR))
    assert _produce_error(producer, names.events) is None  # its own grant
    for topic in (names.decisions, names.audit):  # outputs are not the producer's to write, nor to read
        assert _code(_produce_error(producer, topic)) == KafkaError.TOPIC_AUTHORIZATION_FAILED
        with pytest.raises(NotAuthorizedError, match=f"not authorized to use topic {topic}"):
            next(read_topic(producer, topic))
    assert _code(_produce_error(auditor, names.decisions)) == KafkaError.TOPIC_AUTHORIZATION_FAILED  # it reads only
    foreign_group = _read_error(worker, names.triggers, group=f"{names.prefix}-baseline")
    assert _code(foreign_group) == KafkaError.GROUP_AUTHORIZATION_FAILED
    outsider = Producer({**worker, "transactional.id": "not-a-projection-worker"})
    with pytest.raises(KafkaException) as refused_txn:
        outsider.init_transactions(15)
    assert refused_txn.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    admin = admin_client(producer)  # kept referenced: the future fails with _DESTROY once its client is gone
    created = admin.create_topics([NewTopic(f"{names.prefix}.extra", 1, 1)])
    with pytest.raises(KafkaException) as refused_create:
        created[f"{names.prefix}.extra"].result(timeout=15)
    assert refused_create.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_in_shared_topics_a_tenant_producer_can_still_write_in_another_tenant_name(secured: Secured) -> None:
    """The shared mode's weakness, shown: the broker authorizes topics, not the tenant a record names."""
    producer = secured.config(Role.PRODUCER.value)
    assert _produce_error(producer, secured.names.triggers) is None  # a trigger for any tenant's case is accepted
    assert _read_error(producer, secured.names.keys) is None  # and every tenant's wrapped data keys are readable


def test_worker_and_baseline_on_their_plan_alone_decide_every_trigger_once(secured: Secured, tmp_path: Path) -> None:
    names = secured.names
    keys_dir = Path(os.environ["DPM_KEYS_DIR"])
    sealing = kafka_case_keys(secured.config(Role.PRODUCER.value), names.keys,
                              LocalFileKeyProvider(keys_folder(keys_dir, names.prefix)))  # fmt: skip
    cases = small_cases(per_domain=1)[:2]
    producer = EventProducer(secured.config(Role.PRODUCER.value), names, cipher=sealing)
    positions = {c.ref: tuple(producer.append(c.trajectory.events, CaseOpening(c.task, (BUDGET,)))) for c in cases}
    requests = [DecisionRequest(f"s{n}", c.ref, c.task, BUDGET, (Architecture.DPM, Architecture.SUMM),
                                positions[c.ref], len(positions[c.ref])) for n, c in enumerate(cases)]  # fmt: skip
    producer.triggers(requests)
    producer.close()
    sealing.close()
    env = worker_env(secured.cluster.bootstrap, names, tmp_path)
    worker_env_of = {
        role: {**env, "DPM_KAFKA_CONFIG": str(secured.properties(role))} for role in ("worker", "baseline")
    }
    auditor = secured.config(Role.AUDITOR.value)
    reading = kafka_case_keys(auditor, names.keys, LocalFileKeyProvider(keys_folder(keys_dir, names.prefix)))
    seen: list[str] = []
    with pipeline_processes([["worker"]], worker_env_of["worker"], tmp_path / "worker") as workers, \
            pipeline_processes([["baseline", "--budgets", str(BUDGET)]], worker_env_of["baseline"],
                               tmp_path / "baseline") as baselines:  # fmt: skip
        watcher = threading.Thread(target=lambda: seen.extend(_command_lines(workers + baselines)))
        watcher.start()
        await_decisions(auditor, names, 2 * len(requests), timeout_s=180, cipher=reading)
        watcher.join()
    outputs = load_outputs(auditor, names, cipher=reading)
    reading.close()
    assert set(outputs.decisions) == {r.decision_key(a) for r in requests for a in (Architecture.DPM,
                                                                                    Architecture.SUMM)}  # fmt: skip
    assert outputs.duplicates == 0
    passwords = [secured.config(user)["sasl.password"] for user in ("worker", "baseline")]
    logs = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*.log"))
    for password in passwords:  # never on a command line, never in a log
        assert password not in logs
        assert all(password not in line for line in seen)
    assert seen, "the processes' command lines were not read"


def _command_lines(procs: list[subprocess.Popen[bytes]]) -> list[str]:
    lines = []
    for proc in procs:
        try:
            lines.append(Path(f"/proc/{proc.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return lines
