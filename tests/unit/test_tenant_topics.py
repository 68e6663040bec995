"""Tenancy by topic, without a broker: topic names per tenant, the worker's routing, the ACL plan per tenant."""

from __future__ import annotations

import re
from dataclasses import replace

import orjson
import pytest

from pipeline.core.event_log import RawRecord
from pipeline.core.events import CaseRef, LogPosition
from pipeline.core.memory_log import InMemoryEventLog
from pipeline.core.task import Architecture
from pipeline.kafka.acl_plan import Resource, Role, plan, tenant_principal
from pipeline.kafka.topics import TenantNameError, TopicNames, pipeline_topics
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.wire.dead_letter import DeadLetterRecord
from pipeline.wire.event import append_events
from pipeline.wire.trigger import DecisionRequest
from pipeline.workers.projection.handler import CaseTopics, ProjectionHandler
from pipeline.workers.projection.tenants import Opened, TenantTopics
from tests.cases import load_fixture

NAMES = TopicNames("bank")
CASE = load_fixture()


def test_a_tenant_s_own_topics_sit_under_its_prefix_and_are_told_apart_from_the_shared_ones() -> None:
    acme = NAMES.of_tenant("acme")
    assert [s.name for s in pipeline_topics(acme)] == [f"bank.acme.{t}" for t in ("events", "triggers", "views",
                                                       "decisions", "audit", "dlq", "keys", "segments")]  # fmt: skip
    assert (NAMES.tenant_of("bank.acme.triggers"), NAMES.tenant_of("bank.triggers")) == ("acme", None)
    assert NAMES.tenant_of("banker.acme.triggers") is None  # another prefix
    pattern = re.compile(NAMES.tenant_triggers_pattern())
    assert pattern.match("bank.acme.triggers")
    assert pattern.match("bank.globex-2.triggers")
    assert not pattern.match("bank.triggers")
    assert not pattern.match("bank.acme.events")
    for bad in ("a.b", "a:b", "", "x" * 65):  # a dot would let one tenant's ACL prefix cover another's topics
        with pytest.raises(TenantNameError):
            NAMES.of_tenant(bad)


def test_a_tenant_producer_is_granted_its_own_topics_only() -> None:
    grants = plan(NAMES, [Role.PRODUCER, Role.WORKER], tenants=["acme", "globex"])
    acme = [g for g in grants if g.principal == tenant_principal("acme")]
    topics = {g.name for g in acme if g.resource is Resource.TOPIC}
    assert topics == {f"bank.acme.{t}" for t in ("events", "triggers", "keys", "views", "decisions", "audit", "dlq")}
    writes = {g.name for g in acme if "Write" in g.operations}
    assert writes == {"bank.acme.events", "bank.acme.triggers", "bank.acme.keys"}
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
