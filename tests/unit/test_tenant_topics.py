"""Tenancy by topic, without a broker: topic names per tenant, the workers' routing, the ACL plan per tenant."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from pipeline.core.event_log import RawRecord
from pipeline.core.events import CaseRef, LogPosition
from pipeline.core.memory_log import InMemoryEventLog
from pipeline.core.task import Architecture
from pipeline.kafka.cluster.acl_plan import Resource, Role, plan, tenant_principal
from pipeline.kafka.cluster.topics import TenantNameError, TopicNames, pipeline_topics
from pipeline.keys.providers import LocalFileKeyProvider
from pipeline.keys.ring import KeyRing
from pipeline.keys.store import CaseKeys, MemoryKeyTopic, TenantCaseKeys
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.wire.dead_letter import DeadLetterRecord
from pipeline.wire.event import append_events
from pipeline.wire.record_keys import claimed_case
from pipeline.wire.trigger import DecisionRequest
from pipeline.workers.baseline.tenancy import BaselineInputs
from pipeline.workers.projection.handler import CaseTopics, ProjectionHandler
from pipeline.workers.projection.tenants import Opened, TenantTopics
from tests.cases import load_fixture

NAMES = TopicNames("bank")
CASE = load_fixture()


def test_a_tenant_s_own_topics_sit_under_its_prefix_and_are_told_apart_from_the_shared_ones() -> None:
    acme = NAMES.of_tenant("acme")
    assert [s.name for s in pipeline_topics(acme)] == [f"bank.acme.{t}" for t in ("events", "triggers", "views",
                                                       "decisions", "audit", "dlq", "keys", "segments",
                                                       "layout", "contests")]  # fmt: skip
    assert (NAMES.tenant_of("bank.acme.triggers"), NAMES.tenant_of("bank.triggers")) == ("acme", None)
    assert NAMES.tenant_of(NAMES.of_generation(2).triggers) is None  # a grown generation is no tenant's
    assert NAMES.tenant_of("banker.acme.triggers") is None  # another prefix
    pattern = re.compile(NAMES.tenant_triggers_pattern())
    assert pattern.match("bank.acme.triggers")
    assert pattern.match("bank.globex-2.triggers")
    assert not pattern.match("bank.triggers")
    assert not pattern.match("bank.acme.events")
    assert not pattern.match(NAMES.of_generation(2).triggers)
    for bad in ("a.b", "a:b", "", "x" * 65):  # a dot would let one tenant's ACL prefix cover another's topics
        with pytest.raises(TenantNameError):
            NAMES.of_tenant(bad)


def test_a_tenant_producer_is_granted_its_own_topics_only() -> None:
    grants = plan(NAMES, [Role.PRODUCER, Role.WORKER], tenants=["acme", "globex"])
    acme = [g for g in grants if g.principal == tenant_principal("acme")]
    topics = {g.name for g in acme if g.resource is Resource.TOPIC}
    assert topics == {f"bank.acme.{t}" for t in ("events", "triggers", "keys", "views", "decisions", "audit", "dlq",
                                                 "layout", "segments", "contests")}  # fmt: skip
    writes = {g.name for g in acme if "Write" in g.operations}  # segments: its door erases a case's segment views
    assert writes == {"bank.acme.events", "bank.acme.triggers", "bank.acme.keys", "bank.acme.segments",
                      "bank.acme.writer."}  # fmt: skip
    assert {g.resource for g in acme if g.name == "bank.acme.writer."} == {Resource.TRANSACTIONAL_ID}
    assert not [g for g in grants if g.principal == "User:producer"]  # no shared producer principal in this mode
    worker_topics = {g.name for g in grants if g.principal == "User:worker" and g.resource is Resource.TOPIC}
    assert {"bank.acme.triggers", "bank.globex.triggers"} <= worker_topics
    assert "bank.triggers" not in worker_topics


def _routed(opened: list[str]) -> tuple[ProjectionHandler, dict[str, InMemoryEventLog]]:
    logs = {t: InMemoryEventLog(partitions=3) for t in ("acme", "globex")}

    def open_tenant(tenant: str) -> Opened:
        opened.append(tenant)
        return CaseTopics(NAMES.of_tenant(tenant), logs[tenant]), lambda: opened.append(f"closed {tenant}")

    handler = ProjectionHandler(NAMES, InMemoryEventLog(partitions=0), ExtractiveBackend(), "unit-worker",
                                tenant_topics=TenantTopics(open_tenant))  # fmt: skip
    return handler, logs


def _trigger(tenant_topic: str, case: CaseRef, positions: tuple[LogPosition, ...] | None) -> RawRecord:
    request = DecisionRequest("t-1", case, CASE.task, 700, (Architecture.DPM,), positions,
                              len(positions) if positions else None)  # fmt: skip
    return RawRecord(LogPosition(0, 3), case.key.encode(), request.encode(), topic=f"bank.{tenant_topic}.triggers")


def test_a_trigger_is_read_and_answered_on_its_tenant_s_own_topics() -> None:
    opened: list[str] = []
    handler, logs = _routed(opened)
    case = replace(CASE.ref, tenant="acme")
    events = [replace(e, case=case) for e in CASE.trajectory.events]
    positions = tuple(append_events(logs["acme"], events))
    outputs = handler.handle(_trigger("acme", case, positions))
    assert {o.topic for o in outputs} == {"bank.acme.views", "bank.acme.decisions", "bank.acme.audit"}
    handler.handle(_trigger("acme", case, positions))
    assert opened == ["acme"]  # opened once, kept for the next trigger


def test_a_trigger_naming_another_tenant_than_its_topic_is_dead_lettered_on_the_topic_s_tenant() -> None:
    handler, _ = _routed([])
    outputs = handler.handle(_trigger("acme", CaseRef("globex", "loan-1"), None))
    assert [o.topic for o in outputs] == ["bank.acme.dlq"]
    letter = DeadLetterRecord.from_wire(orjson.loads(outputs[0].value))
    assert letter.reason.value == "tenant-mismatch"
    assert "acme" in letter.detail


def test_tenants_beyond_the_kept_number_are_closed_least_recently_used_first() -> None:
    events: list[str] = []

    def open_tenant(tenant: str) -> Opened:
        events.append(f"open {tenant}")
        return CaseTopics(NAMES.of_tenant(tenant), InMemoryEventLog()), lambda: events.append(f"close {tenant}")

    topics = TenantTopics(open_tenant, keep=2)
    for tenant in ("a", "b", "a", "c"):
        topics(tenant)
    assert events == ["open a", "open b", "open c", "close b"]
    topics.close()
    assert sorted(events[-2:]) == ["close a", "close c"]


def test_the_baseline_reads_each_complete_tenant_whose_topics_match_its_tables_and_says_why_not_once() -> None:
    inputs = BaselineInputs(NAMES, by_topic=True, partitions=3)
    acme, globex, initech = (NAMES.of_tenant(t) for t in ("acme", "globex", "initech"))
    counts = {acme.events: 3, acme.triggers: 3, acme.keys: 1, "bank.events": 6,  # a shared topic is nobody's
              globex.events: 6, globex.triggers: 6, globex.keys: 6,  # onboarded with other partition counts
              initech.events: 3, initech.triggers: 3}  # fmt: skip  # still being onboarded: no keys topic yet
    changed, problems = inputs.update(counts)
    assert (changed, inputs.tenants) == (True, ("acme",))
    [problem] = problems
    assert "'globex' is left out" in problem
    assert "DPM_TENANT_PARTITIONS" in problem
    assert inputs.inputs() == {acme.events, acme.triggers}
    assert inputs.topics("keys") == [acme.keys]
    assert inputs.update(counts) == (False, [])  # the same tenants, and globex is not reported again
    assert inputs.update({**counts, initech.keys: 3}) == (True, [])
    assert inputs.topics("events") == [acme.events, initech.events]
    assert inputs.update({k: v for k, v in counts.items() if not k.startswith("bank.acme.")})[0]  # acme removed
    assert inputs.tenants == ()
    assert (inputs.scope_of(acme.events), inputs.tenant_of(acme.events)) == (acme, "acme")
    assert inputs.scope("globex") == globex


def test_the_shared_baseline_reads_the_shared_topics_and_every_record_answers_on_them() -> None:
    inputs = BaselineInputs(NAMES, by_topic=False, partitions=6)
    assert inputs.topics("triggers") == [NAMES.triggers]
    assert inputs.scope_of(NAMES.events) == inputs.scope("acme") == NAMES
    assert inputs.tenant_of("bank.acme.events") is None  # no topic of a tenant's own in this mode


def test_tenant_case_keys_open_each_tenant_s_keys_once_and_read_them_on_after_a_sync(tmp_path: Path) -> None:
    topics: dict[str, MemoryKeyTopic] = {}
    opened: list[str] = []

    def open_tenant(tenant: str) -> CaseKeys:
        opened.append(tenant)
        topic = topics.setdefault(tenant, MemoryKeyTopic())
        return CaseKeys(KeyRing(LocalFileKeyProvider(tmp_path / "keks")), topic)

    keys = TenantCaseKeys(open_tenant)
    acme, globex = CaseRef("acme", "c1"), CaseRef("globex", "c1")
    sealed = {case: keys.seal(case, case.key.encode(), b"aad") for case in (acme, globex)}
    assert [keys.open(case, sealed[case], b"aad") for case in (acme, globex)] == [b"acme/c1", b"globex/c1"]
    assert opened == ["acme", "globex"]
    assert len(topics["acme"]._log) == len(topics["globex"]._log) == 1  # each case's key on its tenant's topic
    other = CaseKeys(KeyRing(LocalFileKeyProvider(tmp_path / "keks")), topics["acme"])  # another process
    other.erase_case(acme)
    assert not keys.erased(acme)  # not read on until a sync
    keys.sync()
    assert (keys.erased(acme), keys.erased(globex)) == (True, False)
    keys.close()


def test_the_baseline_reads_whose_an_event_is_from_its_clear_fields_only_when_they_name_a_case() -> None:
    assert claimed_case({"tenant": "acme", "case_id": "c-1"}) == CaseRef("acme", "c-1")
    bad_ones: list[dict[str, Any]] = [
        {},
        {"tenant": "", "case_id": "c"},
        {"tenant": 2**70, "case_id": "c"},
        {"tenant": "a b", "case_id": "c"},
        {"tenant": "acme", "case_id": None},
    ]
    for bad in bad_ones:
        assert claimed_case(bad) is None  # left to the decode, which refuses it as SCHEMA, not as a bug
