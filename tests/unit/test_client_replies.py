"""The client's waiting calls, completed by the worker's real outputs: decisions, views and trigger dead letters."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pipeline.client.errors import ClientError, DecisionRefusedError
from pipeline.client.memory import _task, _trigger_id
from pipeline.client.replies import Waiters
from pipeline.client.results import Decision, cited_indexes
from pipeline.core.event_log import RawRecord
from pipeline.core.events import CaseRef, LogPosition
from pipeline.core.memory_log import InMemoryEventLog
from pipeline.core.task import Architecture
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.processing.steps import Output
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.wire.event import append_events
from pipeline.wire.rejection import Rejection
from pipeline.wire.trigger import DecisionId, DecisionRequest
from pipeline.workers.projection.handler import ProjectionHandler
from tests.cases import load_fixture

NAMES = TopicNames("unit")
CASE = load_fixture()
TENANT = CASE.ref.tenant


def _outputs(trigger_id: str, case: CaseRef = CASE.ref, domain: str | None = None) -> list[Output]:
    """What the projection worker publishes for a trigger of the fixture case (its decision, or its dead letter)."""
    log = InMemoryEventLog(partitions=3)
    positions = tuple(append_events(log, CASE.trajectory.events))
    task = CASE.task if domain is None else type(CASE.task)(domain, "Decide.", ("YES", "NO"))
    request = DecisionRequest(trigger_id, case, task, 700, (Architecture.DPM,), positions, len(positions))
    handler = ProjectionHandler(NAMES, log, ExtractiveBackend(), "unit-worker")
    return list(handler.handle(RawRecord(LogPosition(0, 7), case.key.encode(), request.encode())))


def _routed(waiters: Waiters, outputs: Sequence[Output]) -> None:
    for n, out in enumerate(outputs):
        waiters.route(RawRecord(LogPosition(0, n), out.key, out.value, topic=out.topic))


def test_a_decision_completes_its_waiting_calls_once_its_view_is_in_too() -> None:
    waiters = Waiters(NAMES, TENANT, None)
    decision_id = DecisionId("t-1", Architecture.DPM)
    future, again = waiters.expect(decision_id), waiters.expect(decision_id)
    assert future is again  # every call waiting for one decision shares its future
    views, decisions, *_ = _outputs("t-1")
    _routed(waiters, [decisions])
    assert not future.done()  # the view comes in the same transaction: wait for both
    _routed(waiters, [views])
    reply = future.result(0)
    assert str(reply.record.decision_id) == "t-1:dpm"
    assert len(waiters) == 0
    assert waiters.expect(decision_id).done()  # a wait that starts late still gets it


def test_another_tenant_s_decision_with_the_same_id_and_unwaited_ones_are_ignored() -> None:
    waiters = Waiters(NAMES, "someone-else", None)
    future = waiters.expect(DecisionId("t-2", Architecture.DPM))
    _routed(waiters, _outputs("t-2"))
    _routed(waiters, _outputs("t-3"))
    assert not future.done()


def test_a_refused_trigger_fails_its_waiting_calls_with_the_reason() -> None:
    waiters = Waiters(NAMES, TENANT, None)
    future = waiters.expect(DecisionId("t-4", Architecture.DPM))
    letters = _outputs("t-4", domain="no-such-domain")
    assert [o.topic for o in letters] == [NAMES.dlq]
    _routed(waiters, letters)
    with pytest.raises(DecisionRefusedError) as refused:
        future.result(0)
    assert refused.value.reason == "schema"
    assert "no-such-domain" in refused.value.detail


def test_a_retryable_refusal_fails_the_calls_waiting_and_is_not_kept_for_a_request_sent_again() -> None:
    waiters = Waiters(NAMES, TENANT, None)
    decision_id = DecisionId("t-kms", Architecture.DPM)
    future = waiters.expect(decision_id)
    request = DecisionRequest("t-kms", CASE.ref, CASE.task, 700, (Architecture.DPM,), None, None)
    record = RawRecord(LogPosition(0, 7), CASE.ref.key.encode(), request.encode(), topic=NAMES.triggers)
    handler = ProjectionHandler(NAMES, InMemoryEventLog(), ExtractiveBackend(), "unit-worker")
    letter = handler.dead_letter(record, Rejection.KEY_SERVICE_UNAVAILABLE, "the key service did not answer")
    waiters.route(RawRecord(LogPosition(0, 0), letter.key, letter.value, topic=letter.topic))
    with pytest.raises(DecisionRefusedError) as refused:
        future.result(0)
    assert refused.value.retryable
    assert not waiters.expect(decision_id).done()  # the request sent again is waited for afresh


def test_a_typed_decision_resolves_citations_to_the_cited_events() -> None:
    waiters = Waiters(NAMES, TENANT, None)
    future = waiters.expect(DecisionId("t-5", Architecture.DPM))
    _routed(waiters, _outputs("t-5"))
    reply = future.result(0)
    wanted = cited_indexes(reply.view, len(reply.record.positions))
    events = CASE.trajectory.events
    decision = Decision.of(reply.record, reply.view, {i: events[i - 1] for i in wanted})
    assert decision.label == CASE.label
    assert [f.text for f in decision.facts] == [f.text for f in reply.view.view.facts]
    assert all(c.text == events[c.seq - 1].text for f in decision.facts for c in f.cites)
    assert decision.replay_command == f"dpm replay --tenant {TENANT} --decision t-5:dpm"


def test_idempotency_keys_name_the_same_request_per_case_and_a_task_is_needed() -> None:
    case, other = CaseRef("acme", "c-1"), CaseRef("acme", "c-2")
    assert _trigger_id(case, "ask-1") == _trigger_id(case, "ask-1") != _trigger_id(other, "ask-1")
    assert _trigger_id(case, None) != _trigger_id(case, None)
    assert _task("loan", None).domain == "loan"
    with pytest.raises(ClientError, match="domain"):
        _task(None, None)
