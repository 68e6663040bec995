"""The openai backend on a real model: SmolLM2-135M-Instruct behind a loopback llama.cpp server.

A 135M-parameter model is weak: these tests prove plumbing, determinism and the failure paths,
not decision quality.
"""

from __future__ import annotations

from dataclasses import replace

import orjson
import pytest

from pipeline.core.model import ResponseFormat
from pipeline.core.prompt import projection_request
from pipeline.core.run import run_dpm, run_summ
from pipeline.core.task import Budget
from pipeline.core.verification import ReplayStatus
from pipeline.llm import local_model
from pipeline.llm.openai_backend import OpenAIBackend
from pipeline.wire.audit import AuditRecord, calls_in_order
from pipeline.wire.decision import PositionsSource, Provenance
from pipeline.wire.run_records import run_records
from pipeline.wire.trigger import DecisionId
from tests.cases import load_fixture, shortened

pytestmark = pytest.mark.model
CASE = shortened(load_fixture(), 4)
BUDGET = Budget(400)
_VOLATILE = ("id", "created", "timings")  # per-request fields of the body, not part of the answer


def _backend(running: local_model.RunningModel) -> OpenAIBackend:
    return OpenAIBackend(running.base_url, running.model, max_retries=0, timeout_s=120)


def test_identical_requests_give_identical_answers_and_name_the_model_file(
    local_llm: local_model.RunningModel,
) -> None:
    backend = _backend(local_llm)
    request = projection_request(CASE.trajectory, CASE.task, BUDGET)
    first, second = backend.complete(request), backend.complete(request)
    assert first.text == second.text
    assert first.usage == second.usage
    bodies = [{k: v for k, v in orjson.loads(r.raw).items() if k not in _VOLATILE} for r in (first, second)]
    assert bodies[0] == bodies[1]
    assert first.format is ResponseFormat.OPENAI_CHAT
    serving = dict(first.serving)
    assert serving["sha256"] == local_model.file_sha256(local_model.shipped_gguf()) == local_llm.sha256
    assert serving["threads"] == "2"
    assert serving["server"].startswith("xllamacpp-")
    assert first.model == local_llm.model


def test_both_architectures_run_on_a_weak_model_and_verify_from_their_recorded_answers(
    local_llm: local_model.RunningModel,
) -> None:
    backend = _backend(local_llm)
    for runner in (run_dpm, run_summ):
        result = runner(CASE.trajectory, CASE.task, BUDGET, backend)
        assert result.decision.label in (*CASE.task.label_space, None)  # outside the space: None, recorded
        assert result.view.char_length <= BUDGET.chars
        decision_id = DecisionId("local", result.architecture)
        provenance = Provenance(decision_id, (), PositionsSource.IN_MEMORY, backend.name, "test")
        records = run_records(result, CASE.trajectory, task=CASE.task, budget=BUDGET, provenance=provenance)
        read_back = [AuditRecord.from_wire(orjson.loads(a.encode())) for a in records.audits]
        assert all(dict(a.call.response.serving)["sha256"] == local_llm.sha256 for a in read_back)
        assert replace(records, audits=tuple(read_back)).self_check().status is ReplayStatus.MATCH
        assert calls_in_order(read_back)[0].response.text == result.calls[0].response.text
