"""Triggers are bounded in schema and code; settings that cannot hold a trigger's worst case refuse to start."""

from __future__ import annotations

import json
import time

import pytest

from pipeline.config.settings import Settings, SettingsError
from pipeline.core.errors import DpmError
from pipeline.core.event_log import PositionOutOfRangeError, ReadDeadlineError
from pipeline.core.events import CaseRef, LogPosition
from pipeline.core.memory_log import InMemoryEventLog
from pipeline.core.model import ModelRequest, Purpose
from pipeline.core.run import run_dpm
from pipeline.core.task import Architecture, Budget, TaskSpec
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.llm.latency import LatencyBackend
from pipeline.wire.rejection import RejectedError, Rejection
from pipeline.wire.trigger import DecisionRequest, TriggerLimits
from tests.pipeline_support import small_cases

CASE = CaseRef("t", "c")
TASK = TaskSpec("loan", "Decide.", ("APPROVE", "DENY"))
GOOD = DecisionRequest("id-1", CASE, TASK, 900, (Architecture.DPM,), (LogPosition(0, 1),), 1).to_wire()


def _reason(value: dict[str, object], limits: TriggerLimits | None = None) -> Rejection:
    with pytest.raises(RejectedError) as caught:
        DecisionRequest.decode(json.dumps(value).encode(), limits=limits)
    return caught.value.reason


@pytest.mark.parametrize(
    "change",
    [
        {"budget_chars": 10**30},
        {"budget_chars": 10**12},
        {"positions": [[0, 2**70]]},
        {"positions": [[2**31, 0]]},
        {"trigger_id": "a\u0000b"},
        {"events_count": 2},
        {"label": "L" * 100_000},
        {"task": {**TASK.wire(), "label_space": [f"L{n}" for n in range(33)]}},
        {"task": {**TASK.wire(), "domain": "nuclear"}},
        {"task": {**TASK.wire(), "domain": "Nuclear Power"}},
    ],
)
def test_out_of_range_triggers_are_schema_rejections(change: dict[str, object]) -> None:
    assert _reason({**GOOD, **change}) is Rejection.SCHEMA


def test_position_count_is_a_setting_and_other_domains_can_be_accepted() -> None:
    many = {**GOOD, "positions": [[0, n] for n in range(11)], "events_count": 11}
    assert _reason(many, TriggerLimits(max_positions=10)) is Rejection.SCHEMA
    assert DecisionRequest.decode(json.dumps(many).encode(), limits=TriggerLimits(max_positions=11)).positions
    hiring = {**GOOD, "task": {**TASK.wire(), "domain": "hiring"}}
    assert _reason(hiring) is Rejection.SCHEMA
    assert DecisionRequest.decode(json.dumps(hiring).encode(), limits=TriggerLimits.of(10, ("hiring",)))
    assert DecisionRequest.decode(json.dumps(hiring).encode(), limits=TriggerLimits.of(10, ("*",)))


def test_worker_timing_is_checked_against_the_poll_interval() -> None:
    Settings.from_env({}).worker.check_timing(Settings.from_env({}).model)  # the defaults hold
    slow = Settings.from_env({"DPM_MODEL_TIMEOUT_S": "120", "DPM_MODEL_MAX_RETRIES": "4"})
    with pytest.raises(SettingsError, match=r"DPM_MODEL_TIMEOUT_S \(120\).*DPM_MAX_POLL_INTERVAL_MS"):
        slow.worker.check_timing(slow.model)


def test_a_partition_the_log_lacks_is_an_error_not_a_gap() -> None:
    log = InMemoryEventLog(partitions=3)
    with pytest.raises(PositionOutOfRangeError, match="partition 7"):
        log.read([LogPosition(7, 0)])


def test_latency_wrapper_waits_without_changing_the_answer() -> None:
    request = ModelRequest(Purpose.DECIDE, "sys", "a prompt", 100)
    slow = LatencyBackend(ExtractiveBackend(), latency_ms=150, jitter_ms=100)
    assert slow.delay_s(request) == LatencyBackend(ExtractiveBackend(), 150, 100).delay_s(request)
    assert 0.15 <= slow.delay_s(request) <= 0.25
    case = small_cases(per_domain=1)[0]
    started = time.perf_counter()
    slowed = run_dpm(case.trajectory, case.task, Budget(1500), slow)
    waited = time.perf_counter() - started
    plain = run_dpm(case.trajectory, case.task, Budget(1500), ExtractiveBackend())
    assert (slowed.view_text, slowed.decision) == (plain.view_text, plain.decision)
    assert waited >= 0.3  # two calls, each at least 150 ms
    assert isinstance(ReadDeadlineError("x"), DpmError)
