"""The openai backend on a real model: SmolLM2-135M-Instruct behind a loopback llama.cpp server.

A 135M-parameter model is weak: these tests prove plumbing, determinism and the failure paths,
not decision quality.
"""

from __future__ import annotations

import orjson
import pytest

from pipeline.core.model import ResponseFormat
from pipeline.core.prompt import projection_request
from pipeline.core.task import Budget
from pipeline.llm import local_model
from pipeline.llm.openai_backend import OpenAIBackend
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
