"""A tenant's whole life on the secured broker, tenancy by topic: nothing of it outlives its removal, no grant of
another principal reaches it, and erasure reaches its dead letters.

Each tenant here is onboarded as a user would: `dpm tenants add` as the operator (topics, and its principal's
credential on this local broker), `dpm acl apply --tenant` as the admin. Tenant names are this module's own:
a principal (`User:tenant-<t>`) is one per cluster, shared by every pipeline on it.
"""

from __future__ import annotations

import itertools
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, Producer, TopicPartition

from pipeline.config.settings import keys_folder, read_properties
from pipeline.core.events import CaseRef, Event
from pipeline.core.task import Architecture
from pipeline.kafka.cluster.acl_plan import Role, plan, tenant_principal
from pipeline.kafka.cluster.acls import apply_grants, cluster_grants
from pipeline.kafka.cluster.admin import admin_client, fetch_metadata
from pipeline.kafka.cluster.partitioning import case_partition
from pipeline.kafka.cluster.topics import TopicNames, create_pipeline_topics, existing_topics
from pipeline.kafka.errors import KafkaAdapterError
from pipeline.kafka.keytopic.keystore import kafka_case_keys
from pipeline.kafka.reading.range_reads import read_topic
from pipeline.kafka.writing.producer import EventProducer
from pipeline.keys.providers import LocalFileKeyProvider
from pipeline.services.api_keys import ApiKeys
from pipeline.services.cluster import pipeline_processes
from pipeline.services.read_outputs import await_decisions
from pipeline.wire.event import CaseOpening, EventRecord
from pipeline.wire.key import KeyRecord
from pipeline.wire.trigger import DecisionRequest
from tests.kafka_support import every_record, unique_prefix
from tests.pipeline_support import small_cases, worker_env
from tests.secured_support import Secured, code, produce_error

pytestmark = pytest.mark.integration

BUDGET = 900


class Life:
    """One pipeline prefix on the session's secured cluster, run with tenancy by topic."""

    def __init__(self, secured: Secured) -> None:
        self.secured = secured
        self.names = TopicNames(unique_prefix("life"))
        # A 2 s erasure bound on the tenants' topics: compaction removes an erased case's records in seconds.
        self.env = {"DPM_TOPIC_PREFIX": self.names.prefix, "DPM_TENANCY": "topics", "DPM_TENANT_PARTITIONS": "3",
                    "DPM_ERASURE_LAG_MS": "2000", "DPM_TOMBSTONE_RETENTION_MS": "1000"}  # fmt: skip

    def dpm(self, user: str, *args: str) -> tuple[int, str]:
        done = self.secured.dpm(user, *args, **self.env)
        return done.returncode, done.stdout + done.stderr

    def onboard(self, tenant: str) -> dict[str, str]:
        """Adds the tenant and grants it; returns its agents' client properties."""
        status, said = self.dpm(Role.OPERATOR.value, "tenants", "add", tenant, "--partitions", "3")
        assert status == 0, said
        status, said = self.dpm("admin", "acl", "apply", "--tenant", tenant)
        assert status == 0, said
        return self.secured.config(self.user(tenant))

    @staticmethod
    def user(tenant: str) -> str:
        return tenant_principal(tenant).removeprefix("User:")

    def grants_naming(self, tenant: str) -> list[str]:
        scope = f"{self.names.prefix}.{tenant}."
        return [f"{g.principal} {g.name}" for g in cluster_grants(self.secured.config("admin")) or []
                if g.principal == tenant_principal(tenant) or g.name.startswith(scope)]  # fmt: skip


@pytest.fixture(scope="module")
def life(secured: Secured) -> Life:
    life = Life(secured)
    apply_grants(secured.config("admin"), plan(life.names, [Role.OPERATOR]))  # the pipeline's operator, once
    return life


def _refused_credentials(config: dict[str, str]) -> bool:
    try:
        fetch_metadata(config, timeout_s=10)
    except KafkaAdapterError as exc:
        return "refused the credentials" in str(exc)
    return False


def _commit_as_the_worker_group(admin: dict[str, str], group: str, topic: str) -> None:
    client = admin_client(admin)  # referenced until its futures are done
    futures = client.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p, 0) for p in range(3)])])  # fmt: skip
    for future in futures.values():
        future.result(30)


def test_a_removed_tenant_leaves_nothing_and_its_old_credentials_stop_working(life: Life, tmp_path: Path) -> None:
    tenant = f"beta{uuid.uuid4().hex[:6]}"
    agents = life.onboard(tenant)
    kept = tmp_path / "old-tenant.properties"  # what an agent host of the old tenant still holds
    shutil.copy(life.secured.properties(life.user(tenant)), kept)
    own = life.names.of_tenant(tenant)
    EventProducer(agents, own).append(small_cases(per_domain=1, tenant=tenant)[0].trajectory.events[:2])
    _commit_as_the_worker_group(life.secured.config("admin"), f"{life.names.prefix}-projection", own.triggers)
    assert life.grants_naming(tenant)
    api_keys = ApiKeys(life.secured.home / "api-keys.json")  # the HTTP API's keys file of this DPM_HOME
    _, old_api_key = api_keys.add(tenant)

    status, said = life.dpm(Role.OPERATOR.value, "tenants", "remove", tenant, "--yes")
    assert status != 0
    assert "needs Alter on the cluster" in said
    assert "nothing was changed" in said
    assert own.events in existing_topics(life.secured.config("admin"))

    status, said = life.dpm("admin", "tenants", "remove", tenant, "--yes")
    assert status == 0, said  # non-zero if a committed offset had stayed on its topics
    assert "10 topic(s) deleted" in said, said
    assert "1 SCRAM credential(s) deleted" in said, said
    assert "1 API key(s) removed" in said, said
    assert api_keys.holder(old_api_key) is None
    assert not {t for t in existing_topics(life.secured.config("admin")) if t.startswith(own.scope)}
    assert life.grants_naming(tenant) == []
    assert not life.secured.properties(life.user(tenant)).exists()
    assert _refused_credentials(read_properties(kept))

    life.onboard(tenant)  # the same name again: a new principal, a new password
    renewed = life.secured.config(life.user(tenant))
    assert renewed["sasl.password"] != read_properties(kept)["sasl.password"]
    assert _refused_credentials(read_properties(kept))
    assert fetch_metadata(renewed, timeout_s=10).broker_ids


@pytest.mark.any_broker  # what dpm tenants add finds and refuses is ours; the broker's part is the first test's
def test_an_earlier_tenant_s_leftovers_are_refused_until_replaced(life: Life) -> None:
    tenant = f"gamma{uuid.uuid4().hex[:6]}"
    old = life.onboard(tenant)
    admin = life.secured.config("admin")
    own = life.names.of_tenant(tenant)
    # What a removal by an earlier release left: the topics gone, the principal and its grants still there.
    client = admin_client(admin)
    for future in client.delete_topics([t for t in existing_topics(admin) if t.startswith(own.scope)]).values():
        future.result(30)
    status, said = life.dpm(Role.OPERATOR.value, "tenants", "add", tenant)
    assert status != 0
    assert "outlived an earlier tenant" in said
    assert f"dpm tenants remove {tenant} --yes" in said
    assert own.events not in existing_topics(admin)
    status, said = life.dpm("admin", "tenants", "add", tenant, "--replace")
    assert status == 0, said
    assert "removed first:" in said
    assert _refused_credentials(old)


def test_a_tenant_named_like_a_shared_topic_is_refused_and_moving_to_topics_revokes_the_shared_grants(
    life: Life,
) -> None:
    admin = life.secured.config("admin")
    names = life.names
    apply_grants(admin, plan(names))  # the cluster ran the shared mode first
    status, said = life.dpm(Role.OPERATOR.value, "tenants", "add", "keystone")
    assert status != 0
    assert f"the shared grant on '{names.keys}' (prefixed)" in said
    # A tenant an older release let in, with the shared agents' grants still on the cluster.
    create_pipeline_topics(admin, names.of_tenant("keystone"), 3, replication=1)
    status, said = life.dpm(Role.OPERATOR.value, "acl", "plan", "--check")
    assert status == 1
    assert "User:producer" in said, said
    assert "'keystone'" in said, said
    producer = life.secured.config(Role.PRODUCER.value)
    assert produce_error(producer, names.of_tenant("keystone").decisions) is None  # what the attacker did

    tenant = f"eps{uuid.uuid4().hex[:6]}"
    status, said = life.dpm(Role.OPERATOR.value, "tenants", "add", tenant, "--partitions", "3")
    assert status == 0, said
    status, said = life.dpm("admin", "acl", "apply", "--tenant", tenant)
    assert status == 0, said
    assert f"revoked User:producer Write on topic '{names.events}' (prefixed)" in said, said

    for topic in (names.of_tenant("keystone").decisions, names.of_tenant(tenant).decisions, names.events):
        assert code(produce_error(producer, topic)) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    status, said = life.dpm(Role.OPERATOR.value, "acl", "plan", "--check")
    assert status == 0, said
    assert "no principal's grants reach another tenant's topics" in said


@pytest.mark.any_broker  # erasure by key destruction, scans and key ids are ours: no broker release changes them
def test_erasure_reaches_dead_letters_a_mis_keyed_record_blocks_no_scan_and_a_forged_kek_id_opens_nothing(
    life: Life, tmp_path: Path
) -> None:
    tenant = f"delta{uuid.uuid4().hex[:6]}"
    marker = f"MARKER-{uuid.uuid4().hex}"
    agents = life.onboard(tenant)
    own = life.names.of_tenant(tenant)
    case = small_cases(per_domain=1, tenant=tenant)[0]
    folder = keys_folder(Path(os.environ["DPM_KEYS_DIR"]), life.names.prefix)  # the workers' key folder
    keys = kafka_case_keys(agents, own.keys, LocalFileKeyProvider(folder), tenant)
    writer = EventProducer(agents, own, keys)  # seals each event under its case's key
    writer.append(case.trajectory.events, CaseOpening(case.task, (BUDGET,)))
    raw = Producer({**agents, "enable.idempotence": True})
    # Written in clear by a faulty producer: filed under the case, its value an event of another case.
    stray = EventRecord(Event(CaseRef(tenant, "other"), 1, "note", f"Applicant {marker} earns 9,000.")).encode()
    raw.produce(own.events, key=f"{case.ref.key}/00000099".encode(), value=stray,
                partition=case_partition(case.ref, 3))  # fmt: skip
    # A key record whose kek_id is a path of the tenant's choosing.
    forged_case = CaseRef(tenant, "forged")
    forged = KeyRecord(forged_case, "kid-x", "v1", b"\0" * 60, 1).to_wire() | {"kek_id": "../../../etc/hostname"}
    raw.produce(own.keys, key=forged_case.key.encode(), value=orjson.dumps(forged),
                partition=case_partition(forged_case, 3))  # fmt: skip
    assert raw.flush(30) == 0
    both = (Architecture.DPM, Architecture.SUMM)
    writer.trigger(DecisionRequest(f"scan-{uuid.uuid4().hex[:8]}", case.ref, case.task, BUDGET, both))  # no positions
    env = {**worker_env(life.secured.cluster.bootstrap, life.names, tmp_path), **life.env}
    roles = {"worker": Role.WORKER, "baseline": Role.BASELINE}

    def as_role(command: list[str]) -> dict[str, str]:
        return {**env, "DPM_KAFKA_CONFIG": str(life.secured.properties(roles[command[0]].value))}

    auditor = life.secured.config(Role.AUDITOR.value)
    with pipeline_processes([["worker"], ["baseline", "--budgets", str(BUDGET)]], as_role, tmp_path / "logs"):
        decided = await_decisions(auditor, own, 2, timeout_s=180, cipher=keys)  # the scan was not blocked
        assert {k.decision_id.architecture for k in decided.decisions} == set(both)
        letter = _dead_letter_of(auditor, own.dlq, f"{case.ref.key}/00000099")
    assert letter["reason"] == "key-mismatch"
    assert [c["case_id"] for c in letter["sealed_under"]] == [case.ref.case_id, "other"]
    worker_log = (tmp_path / "logs" / "worker-0.log").read_text()
    assert "left out of the scan" in worker_log
    assert "kek_id" in worker_log
    assert "is not a key version" in worker_log
    keys.sync()
    assert not keys.knows(forged_case)

    status, said = life.dpm(Role.OPERATOR.value, "erase", "--tenant", tenant, "--case", case.ref.case_id)
    assert status == 0, said
    _marker_nowhere(life, own, marker, case_partition(case.ref, 3), writer)
    writer.close()
    keys.close()


def _dead_letter_of(config: dict[str, str], dlq: str, key: str, timeout_s: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for record in read_topic(config, dlq):
            if record.key == key.encode():
                letter: dict[str, Any] = orjson.loads(record.value or b"{}")
                return letter
        time.sleep(0.5)
    raise AssertionError(f"no dead letter keyed {key} on {dlq}")


def _marker_nowhere(
    life: Life, own: TopicNames, marker: str, marked: int, writer: EventProducer, timeout_s: float = 300
) -> None:
    """The marker is in no record of any topic of the tenant or the pipeline, once compaction removed the erased.

    Only the events topic can hold it until the cleaner has run (asserted at the end), so the wait reads that
    one topic; the segment holding the tombstone rolls on the next write to its partition after segment.ms, so
    the wait keeps writing to the marker's own partition, as live traffic would.
    """
    admin = life.secured.config("admin")
    rolls = (CaseRef(own.tenant or "", f"roll-{n}") for n in itertools.count())
    in_the_marked_partition = (ref for ref in rolls if case_partition(ref, 3) == marked)

    def holds(topic: str) -> bool:
        records = every_record(admin, topic, committed_only=False)
        return any(marker.encode() in (r.key or b"") + (r.value or b"") for r in records)

    deadline = time.monotonic() + timeout_s
    while holds(own.events):
        assert time.monotonic() < deadline, "compaction never removed the erased case's record written in clear"
        writer.append([Event(next(in_the_marked_partition), 1, "note", "traffic")])
        time.sleep(1)
    topics = sorted(t for t in existing_topics(admin) if t.startswith((own.scope, f"{life.names.prefix}-")))
    assert own.dlq in topics
    assert [t for t in topics if holds(t)] == []


def test_a_tenant_s_door_principal_erases_a_case_to_its_segment_views_and_again_doing_nothing(life: Life) -> None:
    """The admin DELETE of a door run as `User:tenant-<t>` (tenancy by topic): its grants alone reach every step."""
    tenant = f"zeta{uuid.uuid4().hex[:6]}"
    agents = life.onboard(tenant)
    own = life.names.of_tenant(tenant)
    case = small_cases(per_domain=1, tenant=tenant)[0]
    folder = keys_folder(Path(os.environ["DPM_KEYS_DIR"]), life.names.prefix)
    keys = kafka_case_keys(agents, own.keys, LocalFileKeyProvider(folder), tenant)
    writer = EventProducer(agents, own, keys)
    writer.append(case.trajectory.events[:3])
    writer.close()
    keys.close()
    views = Producer(life.secured.config(Role.WORKER.value))  # a long case's segment views, as a worker keeps them
    for n in range(2):
        views.produce(own.segments, key=f"{case.ref.key}/segment-{n}".encode(), value=b"{}")
    assert views.flush(30) == 0

    status, said = life.dpm(life.user(tenant), "erase", "--tenant", tenant, "--case", case.ref.case_id)
    assert status == 0, said
    assert "1 data key(s) destroyed, 3 event tombstone(s) and 2 segment view tombstone(s)" in said, said
    status, said = life.dpm(life.user(tenant), "erase", "--tenant", tenant, "--case", case.ref.case_id)
    assert status == 0, said  # erased already: nothing left to do, and no error
    assert "to erase: never written, or erased already" in said, said
    status, said = life.dpm(life.user(tenant), "erase", "--tenant", tenant, "--case", "never-written")
    assert status == 0, said


def test_a_shared_mode_apply_keeps_the_tenants_grants_and_the_check_finds_nothing_apply_would_stop(life: Life) -> None:
    """`DPM_TENANCY=shared dpm acl apply` revoked every service grant on the tenants' own topics (workers stopped)."""
    tenant = f"eta{uuid.uuid4().hex[:6]}"
    life.onboard(tenant)
    before = sorted(life.grants_naming(tenant))
    done = life.secured.dpm("admin", "acl", "apply", **{**life.env, "DPM_TENANCY": "shared"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert f".{tenant}." not in done.stdout, done.stdout  # nothing of the tenant's revoked
    assert sorted(life.grants_naming(tenant)) == before
    _, said = life.dpm(Role.OPERATOR.value, "acl", "plan", "--check")  # other tests' tenants may overlap: exit 1
    assert "would stop a service" not in said, said
