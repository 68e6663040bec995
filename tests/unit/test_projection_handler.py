"""The projection worker's handler on the in-memory log: outputs, dead letters, isolation, statelessness."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from pipeline.bench.generate import GenerationSpec, generate_cases
from pipeline.core.event_log import RawRecord, ReadDeadlineError, ReadResult
from pipeline.core.events import CaseRef, Event, LogPosition
from pipeline.core.memory_log import InMemoryEventLog
from pipeline.core.model import ModelBackendError, ModelRequest, ModelResponse
from pipeline.core.prompt import PromptLayout, prompt_layout
from pipeline.core.task import Architecture
from pipeline.core.window import Window
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.processing.steps import Output
from pipeline.keys.providers import KeyRevokedError, KeyServiceUnavailableError, LocalFileKeyProvider, WrappedKey
from pipeline.keys.ring import KeyRing
from pipeline.keys.store import CaseKeys, MemoryKeyTopic
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.llm.openai_backend import OpenAIBackend
from pipeline.observability.metrics import PipelineMetrics, outcome_label
from pipeline.wire.audit import AuditRecord
from pipeline.wire.dead_letter import DeadLetterRecord
from pipeline.wire.decision import DecisionRecord, PositionsSource
from pipeline.wire.event import EventRecord, append_events
from pipeline.wire.limits import MAX_DEAD_LETTER_VALUE_BYTES, MAX_TRAJECTORY_CHARS
from pipeline.wire.rejection import RejectedError, Rejection
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.sealing import seal_body
from pipeline.wire.trajectory import assemble
from pipeline.wire.trigger import DecisionRequest
from pipeline.wire.validation import validate
from pipeline.workers.projection.handler import ProjectionHandler
from tests.cases import load_fixture
from tests.conftest import free_port
from tests.reader_contract import EventLogContract

NAMES = TopicNames("unit")
CASE = load_fixture()


class TestInMemoryEventLog(EventLogContract):
    def setup_method(self) -> None:
        self._log = InMemoryEventLog(partitions=3)

    def log(self) -> InMemoryEventLog:
        return self._log

    def append(self, events: list[Event]) -> list[LogPosition]:
        return append_events(self._log, events)

    def erased_position(self) -> LogPosition:
        position = append_events(self._log, [Event(CaseRef("tenant-e", "gone"), 1, "doc", "erased")])[0]
        self._log.erase(position)
        return position


@pytest.fixture
def log() -> InMemoryEventLog:
    return InMemoryEventLog(partitions=3)


def _handler(log: InMemoryEventLog) -> ProjectionHandler:
    return ProjectionHandler(NAMES, log, ExtractiveBackend(), "unit-worker")


def _trigger(request: DecisionRequest) -> RawRecord:
    return RawRecord(LogPosition(0, 7), request.case.key.encode(), request.encode())


def _request(positions: tuple[LogPosition, ...] | None, case: CaseRef = CASE.ref) -> DecisionRequest:
    count = len(positions) if positions else None
    return DecisionRequest("trig-1", case, CASE.task, 700, (Architecture.DPM,), positions, count, CASE.label)


def _dead_letter(outputs: Sequence[Output]) -> DeadLetterRecord:
    assert len(outputs) == 1
    out = outputs[0]
    assert out.topic == NAMES.dlq
    body = orjson.loads(out.value)
    validate(SchemaId.DEAD_LETTER, body)
    return DeadLetterRecord.from_wire(body)


def _decision(out: Output) -> DecisionRecord:
    body = orjson.loads(out.value)
    validate(SchemaId.DECISION, body)
    return DecisionRecord.from_wire(body)


def test_a_trigger_yields_view_decision_and_one_audit_per_call(log: InMemoryEventLog) -> None:
    positions = tuple(append_events(log, CASE.trajectory.events))
    outputs = _handler(log).handle(_trigger(_request(positions)))
    topics = [o.topic for o in outputs]
    assert topics == [NAMES.views, NAMES.decisions, NAMES.audit, NAMES.audit]
    assert {o.key for o in outputs} == {b"trig-1:dpm"}
    decision = _decision(outputs[1])
    assert decision.positions == positions
    assert decision.positions_source is PositionsSource.TRIGGER
    assert decision.outcome.label == CASE.label
    assert decision.llm_calls == 2


def test_a_worker_set_to_put_the_log_first_sends_and_records_that_layout(log: InMemoryEventLog) -> None:
    positions = tuple(append_events(log, CASE.trajectory.events))
    handler = ProjectionHandler(NAMES, log, ExtractiveBackend(), "unit-worker", layout=PromptLayout.EVENTS_FIRST)
    outputs = handler.handle(_trigger(_request(positions)))
    decision = _decision(outputs[1])
    assert decision.prompt_layout is PromptLayout.EVENTS_FIRST
    projection = AuditRecord.from_wire(orjson.loads(outputs[2].value)).call.request
    assert prompt_layout(projection.prompt) is PromptLayout.EVENTS_FIRST
    assert decision.outcome.label == CASE.label  # the offline reader reads either layout alike


def test_without_positions_the_case_is_found_by_scanning(log: InMemoryEventLog) -> None:
    append_events(log, CASE.trajectory.events)
    outputs = _handler(log).handle(_trigger(_request(None)))
    assert _decision(outputs[1]).positions_source is PositionsSource.SCAN


def test_the_handler_keeps_nothing_between_triggers(log: InMemoryEventLog) -> None:
    positions = tuple(append_events(log, CASE.trajectory.events))
    first = _handler(log).handle(_trigger(_request(positions)))
    handler = _handler(log)
    handler.handle(_trigger(_request(None)))  # serve another trigger in between
    again = handler.handle(_trigger(_request(positions)))
    assert first[0].value == again[0].value  # the view: byte-identical
    assert _decision(first[1]).view_sha256 == _decision(again[1]).view_sha256


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"\x00not json", "not-json"),
        (b"[1, 2]", "not-json"),
        (orjson.dumps({"schema": "dpm.trigger.v1", "tenant": "a"}), "schema"),
        (b"x" * 1_100_000, "oversize"),
    ],
)
def test_bad_triggers_become_dead_letters_with_the_original_bytes(
    log: InMemoryEventLog, value: bytes, reason: str
) -> None:
    outputs = _handler(log).handle(RawRecord(LogPosition(1, 3), b"k", value))
    letter = _dead_letter(outputs)
    assert letter.reason is Rejection(reason)
    assert letter.original_value.size == len(value)
    assert letter.original_value.sha256 == hashlib.sha256(value).hexdigest()
    assert value.startswith(letter.original_value.kept)
    assert letter.original_value.truncated is (len(value) > MAX_DEAD_LETTER_VALUE_BYTES)
    assert letter.source == LogPosition(1, 3)
    assert all(o.size() < 400_000 for o in outputs)  # a dead letter always fits in a record


def test_a_trigger_naming_another_tenants_offsets_is_refused(log: InMemoryEventLog) -> None:
    victim = tuple(append_events(log, CASE.trajectory.events))
    attacker = CaseRef("other-bank", CASE.ref.case_id)
    letter = _dead_letter(list(_handler(log).handle(_trigger(_request(victim, attacker)))))
    assert letter.reason is Rejection.CROSS_TENANT


def test_gaps_unknown_cases_superseded_and_erased_events_are_refused(log: InMemoryEventLog, tmp_path: Path) -> None:
    positions = tuple(append_events(log, CASE.trajectory.events))
    gap = positions[:3] + positions[4:]
    assert _dead_letter(_handler(log).handle(_trigger(_request(gap)))).reason is Rejection.SEQUENCE_GAP
    ghost = CaseRef("acme-bank", "no-such-case")
    assert _dead_letter(_handler(log).handle(_trigger(_request(None, ghost)))).reason is Rejection.UNKNOWN_CASE
    keys = CaseKeys(KeyRing(LocalFileKeyProvider(tmp_path)), MemoryKeyTopic())
    handler = ProjectionHandler(NAMES, log, ExtractiveBackend(), "unit-worker", cipher=keys)
    log.erase(positions[2])  # compacted away after a later record with its key: nothing was erased
    superseded = _dead_letter(handler.handle(_trigger(_request(positions))))
    assert superseded.reason is Rejection.SUPERSEDED
    assert str(positions[2]) in superseded.detail
    keys.erase_case(CASE.ref)
    assert _dead_letter(handler.handle(_trigger(_request(positions)))).reason is Rejection.ERASED


def test_a_corrupt_event_in_the_log_is_refused_not_crashed_on(log: InMemoryEventLog) -> None:
    positions = append_events(log, CASE.trajectory.events[:-1])
    positions.append(log.append(CASE.ref, b"acme-bank/loan-fixture-001/00000010", b'{"schema": 1}'))
    letter = _dead_letter(list(_handler(log).handle(_trigger(_request(tuple(positions))))))
    assert letter.reason is Rejection.SCHEMA


def test_triggers_for_summ_only_are_left_to_the_baseline(log: InMemoryEventLog) -> None:
    positions = tuple(append_events(log, CASE.trajectory.events))
    request = replace(_request(positions), architectures=(Architecture.SUMM,))
    assert list(_handler(log).handle(_trigger(request))) == []


class _Broken(ExtractiveBackend):
    def __init__(self, error: Exception) -> None:
        self.error = error

    def complete(self, request: ModelRequest) -> ModelResponse:
        raise self.error


def test_a_bug_becomes_an_internal_error_dead_letter_not_a_crash(log: InMemoryEventLog) -> None:
    positions = tuple(append_events(log, CASE.trajectory.events))
    handler = ProjectionHandler(NAMES, log, _Broken(RuntimeError("boom")), "unit-worker")
    letter = _dead_letter(list(handler.handle(_trigger(_request(positions)))))
    assert letter.reason is Rejection.INTERNAL
    assert "RuntimeError: boom" in letter.detail


def test_a_failing_model_is_raised_for_the_loop_to_retry(log: InMemoryEventLog) -> None:
    positions = tuple(append_events(log, CASE.trajectory.events))
    handler = ProjectionHandler(NAMES, log, _Broken(ModelBackendError("HTTP 529")), "unit-worker")
    with pytest.raises(ModelBackendError):
        handler.handle(_trigger(_request(positions)))


def test_the_dead_letter_of_a_model_that_kept_failing_says_its_last_failure_and_forgets_it(
    log: InMemoryEventLog, caplog: pytest.LogCaptureFixture
) -> None:
    positions = tuple(append_events(log, CASE.trajectory.events))
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    backend = OpenAIBackend(url, "local-model", api_key="sk-never-shown", timeout_s=5, max_retries=0)
    handler = ProjectionHandler(NAMES, log, backend, "unit-worker")
    record = _trigger(_request(positions))
    with pytest.raises(ModelBackendError):
        handler.handle(record)
    with caplog.at_level(logging.WARNING, logger="pipeline.workers.projection"):
        letter = _dead_letter([handler.dead_letter(record, Rejection.MODEL_ERROR, "the model failed 3 times")])
    assert letter.reason is Rejection.MODEL_ERROR
    assert letter.detail.startswith(f"the model failed 3 times: Chat Completions at {url}: connection refused")
    assert "dpm model up" in letter.detail
    assert "DPM_OPENAI_BASE_URL" in letter.detail
    assert "\n" not in letter.detail
    logged = [r.getMessage() for r in caplog.records]
    assert any(letter.detail in line for line in logged)  # the operator reads what the agent reads
    assert not any("sk-never-shown" in line or CASE.trajectory.events[0].text in line for line in logged)
    handler.committed([record])
    again = _dead_letter([handler.dead_letter(record, Rejection.MODEL_ERROR, "the model failed 3 times")])
    assert again.detail == "the model failed 3 times"  # settled: an old failure never names a later one


def _count(metrics: PipelineMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_metrics_count_committed_work_only(log: InMemoryEventLog) -> None:
    metrics = PipelineMetrics()
    handler = ProjectionHandler(NAMES, log, ExtractiveBackend(), "unit-worker", metrics=metrics)
    record = _trigger(_request(tuple(append_events(log, CASE.trajectory.events))))
    handler.handle(record)
    handler.handle(record)  # consumed again after an aborted batch: still one decision to count
    decided = {"architecture": "dpm", "outcome": CASE.label, "tenant": "other"}
    assert _count(metrics, "dpm_decisions_total", **decided) == 0
    handler.committed([record])
    assert _count(metrics, "dpm_decisions_total", **decided) == 1
    handler.dead_letter(record, Rejection.MODEL_ERROR, "model failed")  # the loop's dead letter after the last attempt
    handler.committed([record])
    assert _count(metrics, "dpm_dead_letters_total", reason="model-error") == 1


def test_a_trigger_id_decided_already_is_a_duplicate_dead_letter(log: InMemoryEventLog) -> None:
    metrics = PipelineMetrics()
    handler = ProjectionHandler(NAMES, log, ExtractiveBackend(), "unit-worker", metrics=metrics)
    request = _request(tuple(append_events(log, CASE.trajectory.events)))
    first, same_batch = _trigger(request), replace(_trigger(request), position=LogPosition(0, 8))
    assert [o.topic for o in handler.handle(first)] == [NAMES.views, NAMES.decisions, NAMES.audit, NAMES.audit]
    assert _dead_letter(handler.handle(same_batch)).reason is Rejection.DUPLICATE
    handler.committed([first, same_batch])
    later = replace(_trigger(request), position=LogPosition(0, 9))
    assert _dead_letter(handler.handle(later)).reason is Rejection.DUPLICATE
    handler.committed([later])
    decided = {"architecture": "dpm", "outcome": CASE.label, "tenant": "other"}
    assert _count(metrics, "dpm_decisions_total", **decided) == 1
    assert _count(metrics, "dpm_dead_letters_total", reason="duplicate") == 2


def test_an_uncommitted_decision_does_not_refuse_its_retry_nor_another_tenants_id(log: InMemoryEventLog) -> None:
    handler = _handler(log)
    request = _request(tuple(append_events(log, CASE.trajectory.events)))
    handler.handle(_trigger(request))  # its batch aborted: the same record comes back
    assert _decision(handler.handle(_trigger(request))[1]).decision_id == request.decision_id(Architecture.DPM)
    handler.committed([_trigger(request)])
    other = CaseRef("tenant-b", CASE.ref.case_id)
    outputs = handler.handle(replace(_trigger(_request(None, other)), position=LogPosition(0, 8)))
    assert _dead_letter(outputs).reason is Rejection.UNKNOWN_CASE  # read and refused, not a duplicate


def test_outcome_labels_come_from_a_bounded_set(log: InMemoryEventLog) -> None:
    assert outcome_label("APPROVE") == "APPROVE"
    assert outcome_label("X" * 64) == "other"
    assert outcome_label(None) == "failed"


def test_a_slow_read_is_a_deadline_dead_letter_and_a_missing_partition_a_schema_one(log: InMemoryEventLog) -> None:
    class SlowLog(InMemoryEventLog):
        def read(self, positions: Sequence[LogPosition], deadline: float | None = None) -> ReadResult:
            raise ReadDeadlineError("deadline passed while reading 10000 positions")

    slow = ProjectionHandler(NAMES, SlowLog(partitions=3), ExtractiveBackend(), "unit-worker", read_deadline_s=0.5)
    (letter,) = slow.handle(_trigger(_request((LogPosition(0, 1),))))
    assert DeadLetterRecord.from_wire(orjson.loads(letter.value)).reason is Rejection.DEADLINE
    (letter,) = _handler(log).handle(_trigger(_request((LogPosition(5, 1),))))
    assert DeadLetterRecord.from_wire(orjson.loads(letter.value)).reason is Rejection.SCHEMA


def test_a_case_longer_than_the_window_is_decided_in_segments(log: InMemoryEventLog) -> None:
    long_case = generate_cases(GenerationSpec(domains=("loan",), per_domain=1))[0]  # about 27,000 characters
    positions = tuple(append_events(log, long_case.trajectory.events))
    request = DecisionRequest("trig-1", long_case.ref, long_case.task, 700, (Architecture.DPM,), positions,
                              len(positions), long_case.label)  # fmt: skip
    handler = replace(_handler(log), window=Window(tokens=4096, segment_tokens=3000))
    outputs = handler.handle(_trigger(request))
    decision = _decision(outputs[1])
    assert decision.window == Window(4096, 3000)
    assert len([n for n in decision.segments if n.level == 0]) > 2
    assert decision.llm_calls == len(outputs) - 2  # one audit record per call, as for one projection
    assert decision.view_checks.citation_validity == 1.0


def test_a_budget_too_large_for_the_window_is_an_oversize_dead_letter(log: InMemoryEventLog) -> None:
    long_case = generate_cases(GenerationSpec(domains=("loan",), per_domain=1))[0]
    positions = tuple(append_events(log, long_case.trajectory.events))
    request = DecisionRequest("trig-1", long_case.ref, long_case.task, 6000, (Architecture.DPM,), positions,
                              len(positions), long_case.label)  # fmt: skip
    handler = replace(_handler(log), window=Window(tokens=2048, segment_tokens=2048))
    letter = _dead_letter(handler.handle(_trigger(request)))
    assert letter.reason is Rejection.OVERSIZE
    assert "window" in letter.detail


def test_a_case_at_the_default_ceiling_is_read_and_one_character_more_is_oversize() -> None:
    """DPM_MAX_CASE_CHARS' default (50,000,000 characters) at its edge: 50 events of 1,000,000 characters."""
    case = CaseRef("edge", "ceiling")
    events = [Event(case, seq, "doc", "x" * 1_000_000) for seq in range(1, 51)]
    log = InMemoryEventLog(partitions=1)
    positions = tuple(append_events(log, events))
    trajectory, _ = assemble(case, log.read(positions), len(positions), MAX_TRAJECTORY_CHARS)
    assert trajectory.char_length == MAX_TRAJECTORY_CHARS == 50_000_000
    more = (*positions, *append_events(log, [Event(case, 51, "doc", "x")]))
    with pytest.raises(RejectedError) as refused:
        assemble(case, log.read(more), len(more), MAX_TRAJECTORY_CHARS)
    assert refused.value.reason is Rejection.OVERSIZE


class _KeyService(LocalFileKeyProvider):
    """The local provider behind a switch: answering, away, or refusing the tenant's key as revoked."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self.failure: Exception | None = None

    def unwrap(self, case: CaseRef, wrapped: WrappedKey) -> bytes:
        if self.failure is not None:
            raise self.failure
        return super().unwrap(case, wrapped)


def _sealed_case(log: InMemoryEventLog, folder: Path) -> tuple[_KeyService, CaseKeys, tuple[LogPosition, ...]]:
    """The fixture case appended sealed, and a worker's keys that must ask the key service to open it."""
    service, topic = _KeyService(folder), MemoryKeyTopic()
    writer = CaseKeys(KeyRing(service), topic)
    positions = tuple(log.append(e.case, e.key.encode(), orjson.dumps(seal_body(EventRecord(e).to_wire(), writer)))
                      for e in CASE.trajectory.events)  # fmt: skip
    return service, CaseKeys(KeyRing(service), topic), positions


def test_a_key_service_away_is_raised_for_the_loop_and_its_dead_letter_binds_no_trigger_id(
    log: InMemoryEventLog, tmp_path: Path
) -> None:
    service, keys, positions = _sealed_case(log, tmp_path)
    handler = ProjectionHandler(NAMES, log, ExtractiveBackend(), "unit-worker", cipher=keys, key_service_wait_s=0.0)
    record = _trigger(_request(positions))
    service.failure = KeyServiceUnavailableError("aws-kms: cannot be reached")
    with pytest.raises(KeyServiceUnavailableError):  # retried by the loop, never read as an erasure
        handler.handle(record)
    letter = handler.dead_letter(record, Rejection.KEY_SERVICE_UNAVAILABLE, "the key service failed 5 times")
    assert _dead_letter([letter]).reason is Rejection.KEY_SERVICE_UNAVAILABLE
    handler.committed([record])
    service.failure = None  # the service is back: the same trigger id, sent again, is decided
    again = replace(record, position=LogPosition(0, 8))
    assert _decision(handler.handle(again)[1]).decision_id == _request(positions).decision_id(Architecture.DPM)


def test_a_revoked_key_is_a_key_revoked_dead_letter_and_binds_its_trigger_id(
    log: InMemoryEventLog, tmp_path: Path
) -> None:
    service, keys, positions = _sealed_case(log, tmp_path)
    handler = ProjectionHandler(NAMES, log, ExtractiveBackend(), "unit-worker", cipher=keys)
    record = _trigger(_request(positions))
    service.failure = KeyRevokedError("aws-kms: v1 of tenant 'acme-bank' is disabled")
    letter = _dead_letter(handler.handle(record))
    assert (letter.reason, letter.detail) == (Rejection.KEY_REVOKED, "aws-kms: v1 of tenant 'acme-bank' is disabled")
    handler.committed([record])
    service.failure = None
    again = replace(record, position=LogPosition(0, 8))
    assert _dead_letter(handler.handle(again)).reason is Rejection.DUPLICATE  # a refusal like any other


def test_a_tenant_whose_key_service_kept_a_trigger_waiting_is_refused_at_once_and_others_are_decided(
    log: InMemoryEventLog, tmp_path: Path
) -> None:
    """One tenant's outage does not hold the partition's other tenants back a whole bound per trigger."""
    service, keys, positions = _sealed_case(log, tmp_path)
    other = CaseRef("other-bank", "c-1")
    theirs = tuple(append_events(log, [replace(e, case=other) for e in CASE.trajectory.events]))  # in clear
    handler = ProjectionHandler(NAMES, log, ExtractiveBackend(), "unit-worker", cipher=keys, key_service_wait_s=60.0)
    service.failure = KeyServiceUnavailableError("aws-kms: cannot be reached")
    given_up = _trigger(_request(positions))
    handler.dead_letter(given_up, Rejection.KEY_SERVICE_UNAVAILABLE, "the key service did not answer")
    service.failure = AssertionError("the service is not asked again within the bound")
    next_one = replace(_trigger(replace(_request(positions), trigger_id="trig-2")), position=LogPosition(0, 8))
    refused = _dead_letter(handler.handle(next_one))
    assert refused.reason is Rejection.KEY_SERVICE_UNAVAILABLE
    assert "asked again in at most 60 s" in refused.detail
    decided = handler.handle(_trigger(replace(_request(theirs, other), trigger_id="trig-3")))
    assert [o.topic for o in decided][:2] == [NAMES.views, NAMES.decisions]
