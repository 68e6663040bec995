"""The ACL plan: each role gets named resources of its own pipeline only, rendered for kafka-acls and Strimzi."""

from __future__ import annotations

import shlex

import yaml

from pipeline.kafka.cluster.acl_plan import (
    Grant,
    Pattern,
    Resource,
    Role,
    kafka_acls_commands,
    plan,
    principal,
    strimzi_users,
    strimzi_yaml,
    tenant_principal,
)
from pipeline.kafka.cluster.admin import READER_GROUP_PREFIX
from pipeline.kafka.cluster.grant_checks import kept_for_live_topics, on_live_topics, revocable, single_operations
from pipeline.kafka.cluster.topics import TopicNames, pipeline_topics

NAMES = TopicNames("bank")


def _of(role: Role) -> list[Grant]:
    return plan(NAMES, [role])


def _topics(grants: list[Grant], operation: str) -> set[str]:
    return {g.name for g in grants if g.resource is Resource.TOPIC and operation in g.operations}


def test_every_grant_stays_inside_its_pipeline() -> None:
    for grant in plan(NAMES):
        if grant.resource is Resource.CLUSTER:
            assert grant.operations == ("Describe",)  # the operator lists groups; nobody else touches the cluster
        elif grant.name != READER_GROUP_PREFIX:
            assert grant.name.startswith(("bank.", "bank-")), grant


def test_the_producer_writes_inputs_through_case_writers_and_reads_its_replies() -> None:
    grants = _of(Role.PRODUCER)
    # The segments topic: a door running as this principal erases a case's segment views (an admin key's DELETE).
    assert _topics(grants, "Write") == {NAMES.events, NAMES.triggers, NAMES.keys, NAMES.segments}
    # Sealing needs the case keys; a case's writer reads its partitions back; the client waits for its replies,
    # replays its decisions (memory.replay reads their audit records) and lists their contests.
    assert _topics(grants, "Read") == {NAMES.events, NAMES.triggers, NAMES.keys, NAMES.layout, NAMES.views,
                                       NAMES.decisions, NAMES.dlq, NAMES.audit, NAMES.segments,
                                       NAMES.contests}  # fmt: skip
    assert not _topics(grants, "Write") & {NAMES.views, NAMES.decisions, NAMES.dlq, NAMES.audit, NAMES.contests}
    writers = [g for g in grants if g.resource is Resource.TRANSACTIONAL_ID]
    assert writers == [Grant("User:producer", Resource.TRANSACTIONAL_ID, "bank.writer.", Pattern.PREFIXED,
                             ("Write", "Describe"))]  # fmt: skip
    # the doors join the doors' group, and describe it to learn where each partition's owner is
    assert [g for g in grants if g.resource is Resource.GROUP and g.name == NAMES.doors_group] == [
        Grant("User:producer", Resource.GROUP, "bank-doors", Pattern.LITERAL, ("Read", "Describe"))
    ]
    assert not [g for g in grants if g.resource is Resource.CLUSTER]


def test_the_worker_reads_inputs_writes_outputs_in_its_own_group_and_transactions() -> None:
    grants = _of(Role.WORKER)
    assert _topics(grants, "Read") == {NAMES.triggers, NAMES.events, NAMES.keys, NAMES.segments, NAMES.layout}
    outputs = {NAMES.views, NAMES.decisions, NAMES.audit, NAMES.dlq, NAMES.segments}
    assert _topics(grants, "Write") == {*outputs, NAMES.keys}  # a case whose events came in clear gets its key here
    assert Grant("User:worker", Resource.GROUP, "bank-projection", Pattern.LITERAL, ("Read",)) in grants
    assert Grant("User:worker", Resource.TRANSACTIONAL_ID, "bank-projection", Pattern.PREFIXED,
                 ("Write", "Describe")) in grants  # fmt: skip
    assert NAMES.events not in _topics(grants, "Write")


def test_the_auditor_reads_every_pipeline_topic_and_writes_only_its_contests() -> None:
    grants = _of(Role.AUDITOR)
    assert _topics(grants, "Read") == {spec.name for spec in pipeline_topics(NAMES)}
    assert _topics(grants, "Write") == {NAMES.contests}  # a what-if is published; nothing a decision is made of


def test_the_baseline_owns_its_app_topics_by_prefix() -> None:
    grants = _of(Role.BASELINE)
    own = [g for g in grants if g.resource is Resource.TOPIC and "Create" in g.operations]
    assert [(g.name, g.pattern) for g in own] == [("bank-baseline-", Pattern.PREFIXED)]
    # every generation's app (bank-baseline, bank-baseline-g2, ...): its group and its transactional ids
    assert Grant("User:baseline", Resource.GROUP, "bank-baseline", Pattern.PREFIXED, ("Read",)) in grants
    assert Grant("User:baseline", Resource.TRANSACTIONAL_ID, "bank-baseline", Pattern.PREFIXED,
                 ("Write", "Describe")) in grants  # fmt: skip


def test_case_partitioned_topics_are_granted_in_every_generation_and_nothing_else_by_prefix() -> None:
    grants = plan(NAMES)
    case_partitioned = set(NAMES.case_partitioned())
    for grant in grants:
        if grant.resource is Resource.TOPIC and grant.name.startswith("bank."):
            by_prefix = grant.pattern is Pattern.PREFIXED
            assert by_prefix == (grant.name in case_partitioned or grant.name == "bank."), grant
    grown = NAMES.of_generation(2)
    for topic in grown.case_partitioned():
        assert any(g.principal == "User:worker" and topic.startswith(g.name) for g in grants)


def test_kafka_acls_commands_name_principal_operations_and_pattern() -> None:
    commands = kafka_acls_commands(_of(Role.WORKER))
    assert ('kafka-acls.sh --bootstrap-server "$BOOTSTRAP" --command-config admin.properties --add --allow-principal '
            "User:worker --operation Read --operation Describe --topic bank.triggers --resource-pattern-type prefixed"
            ) in commands  # fmt: skip
    assert any(c.endswith("--transactional-id bank-projection --resource-pattern-type prefixed") for c in commands)
    assert len(commands) == len(_of(Role.WORKER))


def test_kafka_acls_commands_quote_every_name_for_the_shell() -> None:
    hostile = [Grant("User:tenant-x; rm -rf /", Resource.TOPIC, "bank.x $(id)\n", Pattern.LITERAL, ("Read",))]
    (command,) = kafka_acls_commands(hostile, command_config="my admin.properties")
    words = shlex.split(command)
    assert words[words.index("--allow-principal") + 1] == "User:tenant-x; rm -rf /"
    assert words[words.index("--topic") + 1] == "bank.x $(id)\n"
    assert words[words.index("--command-config") + 1] == "my admin.properties"


def test_strimzi_users_are_one_scram_user_per_role_with_the_same_acls() -> None:
    users = list(yaml.safe_load_all(strimzi_yaml(strimzi_users(plan(NAMES), cluster="prod"))))
    assert [u["metadata"]["name"] for u in users] == [r.value for r in Role]
    for user in users:
        assert user["kind"] == "KafkaUser"
        assert user["metadata"]["labels"] == {"strimzi.io/cluster": "prod"}
        assert user["spec"]["authentication"] == {"type": "scram-sha-512"}
    worker = next(u for u in users if u["metadata"]["name"] == "worker")
    assert len(worker["spec"]["authorization"]["acls"]) == len(_of(Role.WORKER))
    txn = next(a for a in worker["spec"]["authorization"]["acls"] if a["resource"]["type"] == "transactionalId")
    assert txn["resource"] == {"type": "transactionalId", "name": "bank-projection", "patternType": "prefixed"}
    operator = next(u for u in users if u["metadata"]["name"] == "operator")
    assert {"resource": {"type": "cluster"}, "operations": ["Describe"], "host": "*"} in operator["spec"][
        "authorization"]["acls"]  # fmt: skip


def test_the_door_s_principal_may_do_every_step_of_an_erasure_in_both_tenancy_modes() -> None:
    """An admin's DELETE runs as the door's principal: the data keys, events and segment views, every generation."""
    for names, grants in ((NAMES, _of(Role.PRODUCER)),
                          (NAMES.of_tenant("acme"), plan(NAMES, [Role.PRODUCER], ["acme", "globex"]))):  # fmt: skip
        for topic in (names.keys, names.events, names.segments):
            for generation in (topic, f"{topic}-g2"):
                reached = [g for g in grants if g.resource is Resource.TOPIC and generation.startswith(g.name)
                           and g.principal in ("User:producer", "User:tenant-acme")]  # fmt: skip
                assert {"Read", "Write", "Describe"} <= {op for g in reached for op in g.operations}, generation
        assert not [g for g in grants if g.resource is Resource.TOPIC and "Delete" in g.operations]


# --- an apply in one tenancy mode never stops the other's services ------------------------------------

_SERVICES = {principal(r) for r in Role}


def _live(names: TopicNames, tenants: list[str], shared: bool) -> set[str]:
    scopes = [names.of_tenant(t) for t in tenants] + ([names] if shared else [])
    return {spec.name for scope in scopes for spec in pipeline_topics(scope)}


def test_a_shared_apply_keeps_every_grant_on_the_tenants_own_topics() -> None:
    """`DPM_TENANCY=shared dpm acl apply` on a cluster with tenants revoked 174 bindings; it revokes none now."""
    both = [*plan(NAMES), *plan(NAMES, tuple(Role), ["acme", "globex"])]
    on_cluster = sorted(single_operations(both), key=str)
    shared_only = revocable(on_cluster, plan(NAMES), _SERVICES, NAMES)
    assert len(shared_only) > 100  # what the shared plan alone revoked: the workers' grants on the tenants' topics
    kept = [*plan(NAMES), *kept_for_live_topics(NAMES, tuple(Role), False, ["acme", "globex"])]
    assert revocable(on_cluster, kept, _SERVICES, NAMES) == []
    live = _live(NAMES, ["acme", "globex"], shared=True)
    assert on_live_topics(shared_only, live, NAMES)  # and the check names them: they would stop the worker
    stopped = on_live_topics(shared_only, live, NAMES)
    assert any(g.principal == "User:worker" and t == "bank.acme.triggers" for g, t in stopped)


def test_a_topics_apply_keeps_the_shared_grants_while_the_shared_topics_exist() -> None:
    names, roles = NAMES, tuple(Role)
    on_cluster = sorted(single_operations([*plan(names), *plan(names, roles, ["acme"])]), key=str)
    managed = _SERVICES | {tenant_principal("acme")}
    by_topic = plan(names, roles, ["acme"])
    live = revocable(on_cluster, [*by_topic, *kept_for_live_topics(names, roles, True, [])], managed, names)
    assert live == []
    gone = revocable(on_cluster, [*by_topic, *kept_for_live_topics(names, roles, False, [])], managed, names)
    assert Grant("User:producer", Resource.TOPIC, names.events, Pattern.PREFIXED, ("Write",)) in gone  # retired
    assert on_live_topics(gone, _live(names, ["acme"], shared=False), names) == []  # on no live topic: stops nothing


def test_a_revoked_grant_is_on_a_live_topic_only_when_a_topic_it_names_exists() -> None:
    prefixed = Grant("User:worker", Resource.TOPIC, "bank.events", Pattern.PREFIXED, ("Read",))
    literal = Grant("User:worker", Resource.TOPIC, "bank.views", Pattern.LITERAL, ("Write",))
    group = Grant("User:worker", Resource.GROUP, "bank-projection", Pattern.LITERAL, ("Read",))
    found = on_live_topics([prefixed, literal, group], {"bank.events-g2", "bank.viewsx"}, NAMES)
    assert found == [(prefixed, "bank.events-g2")]  # a literal grant reaches its one name; groups are not topics


def test_a_tenant_s_topic_reached_only_through_its_id_s_overlap_with_a_shared_name_is_not_served_by_it() -> None:
    """`bank.keys*` reaches `bank.keystone.audit` by an overlap (reported as one): revoking it stops no service."""
    keys = Grant("User:producer", Resource.TOPIC, "bank.keys", Pattern.PREFIXED, ("Write",))
    assert on_live_topics([keys], {"bank.keystone.audit"}, NAMES) == []
    assert on_live_topics([keys], {"bank.keystone.audit", "bank.keys-g2"}, NAMES) == [(keys, "bank.keys-g2")]
    whole = Grant("User:worker", Resource.TOPIC, "bank.", Pattern.PREFIXED, ("Read",))
    own = Grant("User:worker", Resource.TOPIC, "bank.keystone.triggers", Pattern.LITERAL, ("Read",))
    found = on_live_topics([whole, own], {"bank.keystone.audit", "bank.keystone.triggers"}, NAMES)
    assert found == [(whole, "bank.keystone.audit"), (own, "bank.keystone.triggers")]
