"""The chaos suite's key-service scenario: the tenants' KMS cut off while triggers flow.

kms-outage  workers and the baseline keep the cases' keys in AWS KMS (moto's server, reached
            through a gate the harness shuts); the way to it is cut while triggers flow and
            restored after `away_s`. A trigger waiting longer than DPM_KEY_SERVICE_WAIT_S is
            dead-lettered `key-service-unavailable`, which binds nothing: the harness sends each
            such trigger again once the service is back, as an agent retrying with the same
            idempotency key does. Every trigger must then be decided exactly once, and no case
            read as erased.
"""

from __future__ import annotations

import base64
import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from benchmarks.chaos import (
    BUDGET,
    Outcome,
    Stage,
    _append,
    _await_count,
    _cases,
    _crashed,
    _pipeline,
    _requests,
    _settle,
    _stage,
    _trigger,
)
from pipeline.core.task import Architecture
from pipeline.kafka.reading.range_reads import read_topic
from pipeline.wire.trigger import DecisionRequest
from tests.kms_support import CREDENTIALS, REGION, Gate, aws_credentials, moto_server

KEY_SERVICE_WAIT_S = 15.0  # the processes' DPM_KEY_SERVICE_WAIT_S in this scenario


def kms_outage(bootstrap: str, work: Path, triggers: int, away_s: float) -> Outcome:
    outcome = Outcome("kms-outage", injected=1, recover_limit_s=120.0)
    with aws_credentials(), moto_server() as port:
        gate = Gate(port)
        try:
            provider = f"aws-kms:?region={REGION}&endpoint=http://127.0.0.1:{gate.port}&timeout_s=2"
            env = {**CREDENTIALS, "DPM_KEK_PROVIDER": provider, "DPM_KEY_SERVICE_WAIT_S": str(KEY_SERVICE_WAIT_S)}
            with _stage(bootstrap, "kms-outage", work, 1, **env) as stage:
                _run(stage, outcome, gate, triggers, away_s)
        finally:
            gate.close()
    return outcome


def _run(stage: Stage, outcome: Outcome, gate: Gate, triggers: int, away_s: float) -> None:
    cases = _cases(16)
    positions = _append(stage, cases)  # in clear: a case's data key is made when its first outputs are sealed
    archs = (Architecture.DPM, Architecture.SUMM)
    before = _requests(cases[:8], positions, triggers // 3, "b", archs)
    after = _requests(cases[8:], positions, triggers - len(before), "a", archs)  # cases without a data key yet
    commands = [["worker"], ["worker"], ["baseline", "--budgets", str(BUDGET)]]
    with _pipeline(stage, commands) as procs:
        expected = _trigger(stage, before)
        _await_count(stage, len(before), 180)
        gate.shut()  # deciding the cases after this point needs KMS: their keys are made and wrapped there
        expected |= _trigger(stage, after)
        time.sleep(away_s)
        gate.reopen()
        since = time.monotonic()
        _send_refused_again(stage, after)
        _settle(stage, outcome, expected, since, timeout_s=240)
        outcome.crashes = _crashed(procs, set(), stage, outcome.scenario)
    if outcome.dead_letters.get("erased"):
        outcome.broken.append(f"{outcome.dead_letters['erased']} triggers read a key service away as an erasure")


def _send_refused_again(stage: Stage, requests: list[DecisionRequest]) -> None:
    """Sends again each trigger refused `key-service-unavailable` so far, and those refused while it waits."""
    deadline = time.monotonic() + 2 * KEY_SERVICE_WAIT_S + 30  # refusals at once last one bound past the last wait
    sent: Counter[str] = Counter()
    by_id = {r.trigger_id: r for r in requests}
    while time.monotonic() < deadline:
        refused = Counter(_trigger_id(value) for value in _retryable_letters(stage))
        again = [by_id[t] for t in sorted(refused) if t in by_id and refused[t] > sent[t]]  # each refusal once
        if again:
            _trigger(stage, again)
            sent.update({r.trigger_id: refused[r.trigger_id] - sent[r.trigger_id] for r in again})
        time.sleep(2.0)


def _retryable_letters(stage: Stage) -> list[dict[str, object]]:
    letters = [json.loads(r.value or b"{}") for r in read_topic(stage.config, stage.scope.dlq)]
    return [letter for letter in letters if letter.get("reason") == "key-service-unavailable"]


def _trigger_id(letter: dict[str, object]) -> str:
    """The refused trigger's id, from the dead letter's original value (a trigger's dead letter keeps it in clear)."""
    original = json.loads(base64.b64decode(str(letter.get("original_value_b64", ""))) or b"{}")
    return str(original.get("trigger_id", ""))


def key_scenarios(big: bool) -> dict[str, Callable[[str, Path], Outcome]]:
    """The key-service scenarios by name, as chaos.py's."""
    return {"kms-outage": lambda b, w: kms_outage(b, w, triggers=60 if big else 30, away_s=45 if big else 25)}
