"""Every backend passes the same contract; the recorded one replays what the extractive one said."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pipeline.core.model import ModelBackend
from pipeline.core.recorded import RecordedAnswers
from pipeline.core.run import ModelCall, run_dpm, run_summ
from pipeline.llm.anthropic_backend import AnthropicBackend
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.llm.openai_backend import OpenAIBackend
from tests.fake_model_apis import messages_api
from tests.unit.backend_contract import BUDGET, CASE, BackendContract


class TestExtractiveBackend(BackendContract):
    def backend(self) -> ModelBackend:
        return ExtractiveBackend()

    def test_costs_nothing(self) -> None:
        result = run_dpm(CASE.trajectory, CASE.task, BUDGET, ExtractiveBackend())
        assert all(c.response.cost_usd == 0 for c in result.calls)


class TestAnthropicBackend(BackendContract):
    @pytest.fixture(autouse=True)
    def _server(self) -> Iterator[None]:
        with messages_api() as (url, state):
            self.url, self.state = url, state
            yield

    def backend(self) -> ModelBackend:
        return AnthropicBackend("test-key", base_url=self.url, max_retries=0)

    def test_sends_the_request_at_temperature_zero(self) -> None:
        run_dpm(CASE.trajectory, CASE.task, BUDGET, self.backend())
        body = self.state.requests[0]["body"]
        assert body["model"] == "claude-haiku-4-5-20251001"
        assert body["temperature"] == 0.0
        assert body["max_tokens"] == BUDGET.response_token_limit
        assert body["system"].startswith("You build the decision memory")
        headers = self.state.requests[0]["headers"]
        assert "test-key" in (headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer "))


class TestOpenAIBackend(BackendContract):
    @pytest.fixture(autouse=True)
    def _server(self) -> Iterator[None]:
        with messages_api() as (url, _):
            self.url = url
            yield

    def backend(self) -> ModelBackend:
        return OpenAIBackend(f"{self.url}/v1", "fake-model", max_retries=0)


class TestRecordedAnswers(BackendContract):
    @pytest.fixture(autouse=True)
    def _calls(self) -> None:
        self.calls: list[ModelCall] = []
        for runner in (run_dpm, run_summ):
            self.calls += runner(CASE.trajectory, CASE.task, BUDGET, ExtractiveBackend()).calls

    def backend(self) -> ModelBackend:
        return RecordedAnswers(self.calls)
