"""Replay verification: MATCH, DRIFT with distances, LOG-CHANGED, ERASED, and verify-recorded."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from pipeline.config.settings import Settings
from pipeline.core.events import Event, LogPosition, Trajectory
from pipeline.core.memory_log import InMemoryEventLog
from pipeline.core.model import ModelRequest, ModelResponse, Purpose
from pipeline.core.recorded import RecordedAnswers
from pipeline.core.run import ModelCall, RunResult, SummMemory, SummVariant, run_dpm, run_summ, summ_step
from pipeline.core.task import Architecture, Budget
from pipeline.core.verification import ReplayStatus, verify_recorded, verify_replay
from pipeline.core.view import EMPTY_VIEW
from pipeline.keys.providers import LocalFileKeyProvider
from pipeline.keys.ring import KeyRing
from pipeline.keys.store import CaseKeys, MemoryKeyTopic
from pipeline.llm.anthropic_backend import AnthropicBackend
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.llm.openai_backend import OpenAIBackend
from pipeline.services.replay import registry_backends, replay_one
from pipeline.wire.audit import AuditRecord, calls_in_order
from pipeline.wire.decision import PositionsSource, Provenance
from pipeline.wire.event import append_events
from pipeline.wire.run_records import RunRecords, run_records
from pipeline.wire.trigger import DecisionId
from pipeline.workers.baseline.state import CaseState, StepMismatchError, SummStep, load_steps
from tests.cases import load_fixture
from tests.fake_model_apis import messages_api

CASE = load_fixture()
BUDGET = Budget(700)


def _published(result: RunResult, budget: Budget = BUDGET) -> RunRecords:
    provenance = Provenance(DecisionId("d-1", result.architecture), (), PositionsSource.TRIGGER, "extractive", "test")
    return run_records(result, CASE.trajectory, task=CASE.task, budget=budget, provenance=provenance)


class _Perturbed(ExtractiveBackend):
    """A backend whose projections differ slightly, like a hosted model at temperature 0."""

    def complete(self, request: ModelRequest) -> ModelResponse:
        response = super().complete(request)
        if request.purpose is Purpose.DECIDE:
            return response
        text = response.text.replace("REASONING:", "REASONING:\nAlso noted.")
        return replace(response, text=text)


@pytest.mark.parametrize("runner", [run_dpm, run_summ])
def test_replay_with_the_offline_backend_matches(runner: Any) -> None:
    record = _published(runner(CASE.trajectory, CASE.task, BUDGET, ExtractiveBackend())).decision
    report = verify_replay(record.replay_target(), CASE.trajectory, None, ExtractiveBackend())
    assert report.status is ReplayStatus.MATCH
    assert report.replay_view_sha256 == record.view_sha256


def test_a_different_model_output_is_drift_with_distances() -> None:
    result = run_dpm(CASE.trajectory, CASE.task, BUDGET, ExtractiveBackend())
    target = _published(result).decision.replay_target()
    report = verify_replay(target, CASE.trajectory, result.view_text, _Perturbed())
    assert report.status is ReplayStatus.DRIFT
    assert report.view_distance is not None
    assert 0 < report.view_distance < 0.2
    assert report.prefix_distance is not None
    assert report.prefix_distance >= 0


def test_changed_events_are_log_changed_and_missing_events_erased() -> None:
    target = _published(run_dpm(CASE.trajectory, CASE.task, BUDGET, ExtractiveBackend())).decision.replay_target()
    first = CASE.trajectory.events[0]
    edited = Trajectory(
        CASE.ref, (Event(CASE.ref, first.seq, first.kind, first.text + " "), *CASE.trajectory.events[1:])
    )
    assert verify_replay(target, edited, None, ExtractiveBackend()).status is ReplayStatus.LOG_CHANGED
    assert verify_replay(target, None, None, ExtractiveBackend()).status is ReplayStatus.ERASED


@pytest.mark.parametrize("runner", [run_dpm, run_summ])
def test_verify_recorded_reproduces_the_view_without_a_model(runner: Any) -> None:
    published = _published(runner(CASE.trajectory, CASE.task, BUDGET, ExtractiveBackend()))
    target, calls = published.decision.replay_target(), calls_in_order(published.audits)
    assert verify_recorded(target, calls).status is ReplayStatus.MATCH
    memory = max(i for i, c in enumerate(calls) if c.request.purpose is not Purpose.DECIDE)
    tampered = list(calls)
    tampered[memory] = replace(calls[memory], response=replace(calls[memory].response, raw=b'{"content": []}'))
    assert verify_recorded(target, tampered).status is ReplayStatus.DRIFT


@pytest.mark.parametrize("chars", [700, 2_000])  # summaries on overflow; everything fits, no summary call at all
def test_buffered_summ_only_decisions_verify_from_their_recorded_answers(chars: int) -> None:
    """A buffered view is not in any one answer (events are appended verbatim): it is re-derived over the events."""
    budget = Budget(chars)
    published = _published(run_summ(CASE.trajectory, CASE.task, budget, ExtractiveBackend(), SummVariant.BUFFERED),
                           budget)  # fmt: skip
    target, calls = published.decision.replay_target(), calls_in_order(published.audits)
    assert target.view_needs_events
    assert verify_recorded(target, calls, CASE.trajectory).status is ReplayStatus.MATCH
    assert published.self_check().status is ReplayStatus.MATCH
    assert verify_recorded(target, calls, None).status is ReplayStatus.ERASED


def test_recorded_answers_replay_every_call_byte_for_byte() -> None:
    result = run_summ(CASE.trajectory, CASE.task, BUDGET, ExtractiveBackend())
    published = _published(result)
    answers = RecordedAnswers(calls_in_order(published.audits))
    report = verify_replay(published.decision.replay_target(), CASE.trajectory, result.view_text, answers)
    assert report.status is ReplayStatus.MATCH
    other_budget = replace(published.decision.replay_target(), budget=Budget(900))
    drift = verify_replay(other_budget, CASE.trajectory, result.view_text, answers)
    assert drift.status is ReplayStatus.DRIFT
    assert "no recorded answer" in drift.detail


def test_decision_record_names_everything_needed_to_replay() -> None:
    published = _published(run_dpm(CASE.trajectory, CASE.task, BUDGET, ExtractiveBackend()))
    record, audits = published.decision, published.audits
    assert record.decision_id == DecisionId("d-1", Architecture.DPM)
    assert record.case == CASE.ref
    assert record.task == CASE.task
    assert record.budget_chars == BUDGET.chars
    assert record.backend == "extractive"
    assert record.model
    assert record.llm_calls == len(audits) == 2
    assert record.prompt_sha256 == audits[0].call.request.digest
    assert record.raw_response_sha256 == audits[0].call.response.raw_digest
    assert record.outcome.label == CASE.label


def test_the_replay_service_reads_the_events_a_buffered_view_needs_and_reports_erasure(tmp_path: Path) -> None:
    log = InMemoryEventLog()
    positions = tuple(append_events(log, CASE.trajectory.events))
    budget = Budget(2_000)
    result = run_summ(CASE.trajectory, CASE.task, budget, ExtractiveBackend(), SummVariant.BUFFERED)
    provenance = Provenance(DecisionId("b-1", Architecture.SUMM), positions, PositionsSource.TRIGGER, "extractive",
                            "test")  # fmt: skip
    published = run_records(result, CASE.trajectory, task=CASE.task, budget=budget, provenance=provenance)
    backends = registry_backends(Settings.from_env({}).model, None)

    keys = CaseKeys(KeyRing(LocalFileKeyProvider(tmp_path)), MemoryKeyTopic())

    def replay() -> ReplayStatus:
        return replay_one(published.decision, published.view, published.audits, log, backends,
                          recorded_only=True, cipher=keys).status  # fmt: skip

    assert replay() is ReplayStatus.MATCH
    log.erase(positions[3])  # compaction removed an event a later one with its key replaced: the log changed
    assert replay() is ReplayStatus.LOG_CHANGED
    keys.erase_case(CASE.ref)  # only a destroyed key makes it erased
    assert replay() is ReplayStatus.ERASED


def _recording(backend: ExtractiveBackend, calls: list[ModelCall]) -> Callable[[ModelRequest], ModelResponse]:
    def call(request: ModelRequest) -> ModelResponse:
        response = backend.complete(request)
        calls.append(ModelCall(request, response))
        return response

    return call


def _stored_steps(events: tuple[Event, ...]) -> list[SummStep]:
    """Summ-only steps as the baseline takes them, one per event, before they are stored."""
    steps: list[SummStep] = []
    for n, event in enumerate(events):
        calls: list[ModelCall] = []
        before = steps[-1].memory if steps else SummMemory(EMPTY_VIEW)
        memory = summ_step(before, event.seq, event, task=CASE.task, budget=BUDGET, variant=SummVariant.REWRITE,
                           call=_recording(ExtractiveBackend(), calls))  # fmt: skip
        steps.append(SummStep(event, LogPosition(1, n), memory, tuple(calls)))
    return steps


def test_baseline_state_round_trips_through_its_changelog_form() -> None:
    state = CaseState(CASE.task, (700, 1400), last_seq=4)
    assert CaseState.from_json(orjson.loads(orjson.dumps(state.to_json()))) == state
    assert state.after(5).last_seq == 5
    steps = _stored_steps(CASE.trajectory.events)
    stored = [orjson.loads(orjson.dumps(step.to_json())) for step in steps]
    assert load_steps(stored, task=CASE.task, budget=BUDGET) == steps
    offline = run_summ(CASE.trajectory, CASE.task, BUDGET, ExtractiveBackend()).calls[:-1]
    assert [c.request for s in steps for c in s.calls] == [c.request for c in offline]  # as the offline run asks
    assert SummStep.memory_of(stored[-1]) == steps[-1].memory


def test_a_stored_step_keeps_no_prompt_and_refuses_an_answer_to_another_request() -> None:
    steps = _stored_steps(CASE.trajectory.events[:3])
    stored = [step.to_json() for step in steps]
    prompt = steps[2].calls[0].request.prompt
    assert "request" not in stored[2]["calls"][0]
    assert prompt not in orjson.dumps(stored[2]).decode()
    with pytest.raises(StepMismatchError, match="another request"):
        load_steps(stored, task=replace(CASE.task, task="A different task."), budget=BUDGET)


@pytest.mark.parametrize("api", ["anthropic", "openai"])
@pytest.mark.parametrize("runner", [run_dpm, run_summ])
def test_recorded_answers_of_either_api_verify_and_tampering_is_drift(api: str, runner: Any) -> None:
    """The audit record names each answer's format, so a recorded answer is re-read from its own bytes."""
    with messages_api() as (url, _):
        backend = (AnthropicBackend("k", base_url=url, max_retries=0) if api == "anthropic"
                   else OpenAIBackend(f"{url}/v1", "fake-model", max_retries=0))  # fmt: skip
        published = _published(runner(CASE.trajectory, CASE.task, BUDGET, backend))
    recorded = [AuditRecord.from_wire(orjson.loads(a.encode())) for a in published.audits]  # as read back from Kafka
    target = published.decision.replay_target()
    assert verify_recorded(target, calls_in_order(recorded)).status is ReplayStatus.MATCH
    memory = max(a.call_index for a in recorded if a.call.request.purpose is not Purpose.DECIDE)
    wire = orjson.loads(recorded[memory].encode())
    body = orjson.loads(base64.b64decode(wire["raw_response_b64"]))
    if api == "openai":
        body["choices"][0]["message"]["content"] = body["choices"][0]["message"]["content"].replace("[", "(")
    else:
        body["content"][0]["text"] = body["content"][0]["text"].replace("[", "(")
    wire["raw_response_b64"] = base64.b64encode(orjson.dumps(body)).decode()
    tampered = [*recorded[:memory], AuditRecord.from_wire(wire), *recorded[memory + 1 :]]
    assert verify_recorded(target, calls_in_order(tampered)).status is ReplayStatus.DRIFT


def test_replay_builds_a_backend_once_per_name_and_the_recorded_one_per_decision() -> None:
    published = _published(run_dpm(CASE.trajectory, CASE.task, BUDGET, ExtractiveBackend()))
    calls = calls_in_order(published.audits)
    by_record = registry_backends(Settings.from_env({}).model, None)
    assert by_record(published.decision, calls) is by_record(published.decision, calls)
    recorded = registry_backends(Settings.from_env({}).model, "recorded")
    first, second = recorded(published.decision, calls), recorded(published.decision, ())
    assert first is not second
    assert first.complete(calls[0].request).raw == calls[0].response.raw
