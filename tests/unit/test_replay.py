"""Replay verification: MATCH, DRIFT with distances, LOG-CHANGED, ERASED, and verify-recorded."""

from __future__ import annotations

import base64
from dataclasses import replace
from typing import Any

import pytest

from pipeline.core.events import Event, Trajectory
from pipeline.core.model import ModelRequest, ModelResponse, Purpose
from pipeline.core.record import Provenance, audit_records, decision_record
from pipeline.core.replay import ReplayStatus, verify_recorded, verify_replay
from pipeline.core.run import RunResult, run_dpm, run_summ
from pipeline.core.task import Budget
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.llm.recorded import RecordedBackend
from tests.cases import load_fixture

CASE = load_fixture()
BUDGET = Budget(700)


def _recorded(result: RunResult) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    provenance = Provenance("d-1", (), "trigger", "extractive", "test")
    return (
        decision_record(result, CASE.trajectory, CASE.task, BUDGET, provenance),
        audit_records(result, CASE.ref, provenance),
    )


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
    record, _ = _recorded(runner(CASE.trajectory, CASE.task, BUDGET, ExtractiveBackend()))
    report = verify_replay(record, CASE.trajectory, None, ExtractiveBackend())
    assert report.status is ReplayStatus.MATCH
    assert report.replay_view_sha256 == record["view_sha256"]


def test_a_different_model_output_is_drift_with_distances() -> None:
    result = run_dpm(CASE.trajectory, CASE.task, BUDGET, ExtractiveBackend())
    record, _ = _recorded(result)
    report = verify_replay(record, CASE.trajectory, result.view_text, _Perturbed())
    assert report.status is ReplayStatus.DRIFT
    assert report.view_distance is not None
    assert 0 < report.view_distance < 0.2
    assert report.prefix_distance is not None
    assert report.prefix_distance >= 0


def test_changed_events_are_log_changed_and_missing_events_erased() -> None:
    record, _ = _recorded(run_dpm(CASE.trajectory, CASE.task, BUDGET, ExtractiveBackend()))
    first = CASE.trajectory.events[0]
    edited = Trajectory(
        CASE.ref, (Event(CASE.ref, first.seq, first.kind, first.text + " "), *CASE.trajectory.events[1:])
    )
    assert verify_replay(record, edited, None, ExtractiveBackend()).status is ReplayStatus.LOG_CHANGED
    assert verify_replay(record, None, None, ExtractiveBackend()).status is ReplayStatus.ERASED


@pytest.mark.parametrize("runner", [run_dpm, run_summ])
def test_verify_recorded_reproduces_the_view_without_a_model(runner: Any) -> None:
    record, audits = _recorded(runner(CASE.trajectory, CASE.task, BUDGET, ExtractiveBackend()))
    assert verify_recorded(record, audits).status is ReplayStatus.MATCH
    tampered = [dict(a) for a in audits]
    memory = [a for a in tampered if a["purpose"] != "decide"][-1]
    memory["raw_response_b64"] = base64.b64encode(b'{"content": []}').decode()
    assert verify_recorded(record, tampered).status is ReplayStatus.DRIFT


def test_recorded_backend_replays_every_call_byte_for_byte() -> None:
    result = run_summ(CASE.trajectory, CASE.task, BUDGET, ExtractiveBackend())
    record, audits = _recorded(result)
    report = verify_replay(record, CASE.trajectory, result.view_text, RecordedBackend(audits))
    assert report.status is ReplayStatus.MATCH
    other_budget = dict(record, budget_chars=900)
    drift = verify_replay(other_budget, CASE.trajectory, result.view_text, RecordedBackend(audits))
    assert drift.status is ReplayStatus.DRIFT
    assert "no recorded answer" in drift.detail


def test_decision_record_names_everything_needed_to_replay() -> None:
    record, audits = _recorded(run_dpm(CASE.trajectory, CASE.task, BUDGET, ExtractiveBackend()))
    for key in (
        "tenant",
        "case_id",
        "positions",
        "events_sha256",
        "task",
        "budget_chars",
        "architecture",
        "backend",
        "model",
        "params",
        "prompt_sha256",
        "raw_response_sha256",
        "view_sha256",
        "decision",
        "usage",
        "cost_usd",
        "latency_s",
        "worker_id",
    ):
        assert key in record
    assert record["llm_calls"] == len(audits) == 2
    assert record["prompt_sha256"] == audits[0]["request_sha256"]
    assert record["raw_response_sha256"] == audits[0]["raw_response_sha256"]
