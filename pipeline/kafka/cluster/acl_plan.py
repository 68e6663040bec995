"""The least-privilege ACLs each role of the pipeline needs, and their renderings for operators.

A role is one kind of process with one principal (`User:<role>` on the secured local broker): the
agents' producer, the projection workers, the Summ-only baseline, the auditor (UI, replay,
compare) and the operator (topics, erasure). The admin is a super user and needs no ACL. Each
grant names exactly the topics, groups and transactional ids the role's code uses (see
pipeline.kafka.cluster.topics and the workers' services); `tests/integration/test_secured_broker.py` runs
every role with only its grants.

This module only describes; pipeline.kafka.cluster.acls applies a plan through the admin API.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

import yaml

from pipeline.kafka.cluster.admin import READER_GROUP_PREFIX
from pipeline.kafka.cluster.topics import TopicNames


class Role(StrEnum):
    PRODUCER = "producer"
    WORKER = "worker"
    BASELINE = "baseline"
    AUDITOR = "auditor"
    OPERATOR = "operator"


ROLE_PURPOSE = {
    Role.PRODUCER: "agents and their doors (dpm api, dpm mcp): write events and triggers (one sequencer per "
    "partition; the doors divide the partitions in the group <prefix>-doors), "
    "seal them, read their decisions back, erase a case (tenancy by topic: User:tenant-<t>, per tenant)",
    Role.WORKER: "projection workers: read inputs, publish outputs in transactions",
    Role.BASELINE: "Summ-only baseline: reads inputs, keeps its tables, publishes outputs",
    Role.AUDITOR: "dpm ui, replay and compare: reads everything, writes nothing",
    Role.OPERATOR: "dpm topics and erase: creates, configures and deletes the pipeline's topics",
}


class Resource(StrEnum):
    TOPIC = "topic"
    GROUP = "group"
    TRANSACTIONAL_ID = "transactional-id"
    CLUSTER = "cluster"


class Pattern(StrEnum):
    LITERAL = "literal"
    PREFIXED = "prefixed"


_OPERATIONS = (
    "Read",
    "Write",
    "Create",
    "Delete",
    "Alter",
    "Describe",
    "DescribeConfigs",
    "AlterConfigs",
    "All",
    "IdempotentWrite",
    "ClusterAction",
)  # the last three: only as read back from a cluster
CLUSTER_NAME = "kafka-cluster"  # the one name Kafka gives the cluster resource


@dataclass(frozen=True)
class Grant:
    """Allow `principal` the `operations` on one resource (a name, or every name with that prefix), from any host."""

    principal: str
    resource: Resource
    name: str
    pattern: Pattern
    operations: tuple[str, ...]

    def __post_init__(self) -> None:
        unknown = [op for op in self.operations if op not in _OPERATIONS]
        if unknown:
            raise ValueError(f"unknown ACL operations {unknown}")


def principal(role: Role) -> str:
    """The role's principal on the secured local broker (SCRAM user named after the role)."""
    return f"User:{role.value}"


_READ = ("Read", "Describe")
_WRITE = ("Write", "Describe")
_READ_WRITE = ("Read", "Write", "Describe")


def tenant_principal(tenant: str) -> str:
    """With tenancy by topic, the principal of a tenant's agents (its producer): `User:tenant-<tenant>`."""
    return f"User:tenant-{tenant}"


def plan(names: TopicNames, roles: Iterable[Role] = tuple(Role), tenants: Sequence[str] = ()) -> list[Grant]:
    """Every grant the `roles` need for the pipeline whose topics are `names`, role by role.

    With `tenants` (tenancy by topic), each role's topic grants name every tenant's own topics
    instead of the shared ones, and the producer role is one principal per tenant, granted its
    tenant's topics only: writing its inputs, reading its outputs. The auditor keeps reading the
    shared topics too: decisions made there before a move to tenancy by topic stay auditable.
    """
    scopes = [names.of_tenant(t) for t in tenants] or [names]
    grants: list[Grant] = []
    for role in roles:
        if role is Role.PRODUCER and tenants:
            grants += [g for scope in scopes for g in _tenant_producer(scope, tenant_principal(scope.tenant or ""))]
            continue
        who = principal(role)
        read = [names, *scopes] if role is Role.AUDITOR and tenants else scopes
        grants += [g for scope in read for g in _TOPIC_GRANTS[role](scope, who)]
        grants += [*_FIXED_GRANTS[role](names, who), _readers(who)]
    return grants


def _readers(who: str) -> Grant:
    """Every role reads some topic by assigning partitions: its consumers' throwaway groups (admin.reader_group)."""
    return Grant(who, Resource.GROUP, READER_GROUP_PREFIX, Pattern.PREFIXED, ("Describe",))


def _topics(who: str, topics: Iterable[str], operations: tuple[str, ...]) -> list[Grant]:
    return [Grant(who, Resource.TOPIC, t, Pattern.LITERAL, operations) for t in topics]


def _generations(who: str, topics: Iterable[str], operations: tuple[str, ...]) -> list[Grant]:
    """Grants on case-partitioned topics in every generation: `<name>` and the `<name>-g<k>` a growth makes.

    A prefix, so that a growth (`dpm topics grow`) needs no new ACLs before its processes restart;
    only the operator creates topics, and no other topic name starts with these.
    """
    return [Grant(who, Resource.TOPIC, t, Pattern.PREFIXED, operations) for t in topics]


def _producer(names: TopicNames, who: str) -> list[Grant]:
    """The agents: events and triggers written through one writer per case (kafka/writing/case_writer.py).

    The writer reads the case's partitions back (its last seq, the triggers sent); the agents wait
    for their decisions and dead letters, replay them from their audit records and list their
    contests (client library, and the doors' routes over it).
    The doors (`dpm api`, `dpm mcp`) run as this principal and erase a case for an admin key
    (services/erase.py): its data key and events are already theirs to tombstone, and its segment
    views, found by their keys, need reading and writing the segments topic in every generation.
    They divide the events partitions in the doors' group (kafka/writing/door_group.py), which they
    join and describe.
    """
    return [*_generations(who, (names.events, names.triggers), _READ_WRITE),
            Grant(who, Resource.GROUP, names.doors_group, Pattern.LITERAL, ("Read", "Describe")),
            *_generations(who, (names.keys, names.segments), _READ_WRITE), *_topics(who, (names.layout,), _READ),
            *_topics(who, (names.views, names.decisions, names.dlq, names.audit, names.contests), _READ),
            Grant(who, Resource.TRANSACTIONAL_ID, names.writer_prefix, Pattern.PREFIXED, _WRITE)]  # fmt: skip


def _tenant_producer(names: TopicNames, who: str) -> list[Grant]:
    return [*_producer(names, who), _readers(who)]


def _worker_topics(names: TopicNames, who: str) -> list[Grant]:
    # The keys topic is written too: sealing a case whose events came in clear makes its data key.
    return [
        *_generations(who, (names.triggers, names.events), _READ),
        *_topics(who, (names.views, names.decisions, names.audit, names.dlq), _WRITE),
        *_generations(who, (names.segments, names.keys), _READ_WRITE),
        *_topics(who, (names.layout,), _READ),
    ]


def _worker(names: TopicNames, who: str) -> list[Grant]:
    group = f"{names.prefix}-projection"
    return [
        Grant(who, Resource.GROUP, group, Pattern.LITERAL, ("Read",)),
        Grant(who, Resource.TRANSACTIONAL_ID, group, Pattern.PREFIXED, _WRITE),
    ]


def _baseline_topics(names: TopicNames, who: str) -> list[Grant]:
    return [
        *_generations(who, (names.events, names.triggers), _READ),
        *_topics(who, (names.views, names.decisions, names.audit, names.dlq), _WRITE),
        *_generations(who, (names.keys,), _READ_WRITE),  # as the worker's
        *_topics(who, (names.layout,), _READ),
    ]


def _baseline(names: TopicNames, who: str) -> list[Grant]:
    app_id = names.of_generation(1).baseline_app  # each generation's app is named `<this>-g<k>` (topics.py)
    own = ("Read", "Write", "Describe", "Create", "DescribeConfigs")
    return [
        # Its changelogs, ledger and faust's leader topic, all named after the app (checked, created if missing).
        Grant(who, Resource.TOPIC, f"{app_id}-", Pattern.PREFIXED, own),
        Grant(who, Resource.GROUP, app_id, Pattern.PREFIXED, ("Read",)),
        Grant(
            who, Resource.TRANSACTIONAL_ID, app_id, Pattern.PREFIXED, _WRITE
        ),  # `<app>-publish-...`: kafka/processing/once.py
    ]


def _auditor_topics(names: TopicNames, who: str) -> list[Grant]:
    """Reads everything a decision is made of; writes only its contests (a what-if is published, never a decision)."""
    outputs = (names.views, names.decisions, names.audit, names.dlq, names.layout)
    return [*_generations(who, names.case_partitioned(), _READ), *_topics(who, outputs, _READ),
            *_topics(who, (names.contests,), _READ_WRITE)]  # fmt: skip


def _operator(names: TopicNames, who: str) -> list[Grant]:
    every = ("Read", "Write", "Create", "Delete", "Describe", "DescribeConfigs", "AlterConfigs")
    return [
        Grant(who, Resource.TOPIC, f"{names.prefix}.", Pattern.PREFIXED, every),  # every tenant's own topics too
        Grant(who, Resource.TOPIC, f"{names.prefix}-baseline-", Pattern.PREFIXED, every),
        Grant(who, Resource.GROUP, f"{names.prefix}-", Pattern.PREFIXED, ("Describe", "Delete")),
        Grant(who, Resource.CLUSTER, CLUSTER_NAME, Pattern.LITERAL, ("Describe",)),
    ]


def _none(names: TopicNames, who: str) -> list[Grant]:
    del names, who
    return []


# Grants on the topics of one scope (the shared topics, or one tenant's own), and grants made once.
_TOPIC_GRANTS = {
    Role.PRODUCER: _producer,
    Role.WORKER: _worker_topics,
    Role.BASELINE: _baseline_topics,
    Role.AUDITOR: _auditor_topics,
    Role.OPERATOR: _none,
}
_FIXED_GRANTS = {
    Role.PRODUCER: _none,
    Role.WORKER: _worker,
    Role.BASELINE: _baseline,
    Role.AUDITOR: _none,
    Role.OPERATOR: _operator,
}


def kafka_acls_commands(grants: Iterable[Grant], command_config: str = "admin.properties") -> list[str]:
    """The grants as `kafka-acls.sh --add` commands (one per grant), run with the admin's client properties."""
    commands = []
    for grant in grants:
        name = shlex.quote(grant.name)  # names come from settings and tenant ids: never unquoted into a shell
        target = {
            Resource.TOPIC: f"--topic {name}",
            Resource.GROUP: f"--group {name}",
            Resource.TRANSACTIONAL_ID: f"--transactional-id {name}",
            Resource.CLUSTER: "--cluster",
        }[grant.resource]
        operations = " ".join(f"--operation {op}" for op in grant.operations)
        pattern = f" --resource-pattern-type {grant.pattern.value}" if grant.pattern is Pattern.PREFIXED else ""
        commands.append(
            f'kafka-acls.sh --bootstrap-server "$BOOTSTRAP" --command-config {shlex.quote(command_config)} --add '
            f"--allow-principal {shlex.quote(grant.principal)} {operations} {target}{pattern}"
        )
    return commands


def strimzi_users(grants: Iterable[Grant], cluster: str = "my-cluster") -> list[dict[str, object]]:
    """The grants as Strimzi `KafkaUser` resources, one per principal, authenticated with SCRAM-SHA-512."""
    by_user: dict[str, list[dict[str, object]]] = {}
    for grant in grants:
        resource: dict[str, object] = {"type": _STRIMZI_TYPE[grant.resource]}
        if grant.resource is not Resource.CLUSTER:
            resource |= {"name": grant.name, "patternType": grant.pattern.value}
        acl: dict[str, object] = {"resource": resource, "operations": list(grant.operations), "host": "*"}
        by_user.setdefault(grant.principal.removeprefix("User:"), []).append(acl)
    return [
        {
            "apiVersion": "kafka.strimzi.io/v1beta2",
            "kind": "KafkaUser",
            "metadata": {"name": user, "labels": {"strimzi.io/cluster": cluster}},
            "spec": {
                "authentication": {"type": "scram-sha-512"},
                "authorization": {"type": "simple", "acls": acls},
            },
        }
        for user, acls in by_user.items()
    ]


_STRIMZI_TYPE = {
    Resource.TOPIC: "topic",
    Resource.GROUP: "group",
    Resource.TRANSACTIONAL_ID: "transactionalId",
    Resource.CLUSTER: "cluster",
}


def strimzi_yaml(users: list[dict[str, object]]) -> str:
    """YAML documents for `kubectl apply -f -`, one per user."""
    return yaml.safe_dump_all(users, sort_keys=False, explicit_start=True)
