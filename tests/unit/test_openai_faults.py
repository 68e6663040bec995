"""The openai backend against a local Chat Completions server: structured answers, retries, fallbacks, errors."""

from __future__ import annotations

from collections.abc import Iterator

import orjson
import pytest

from pipeline.config.settings import Settings
from pipeline.core.model import ModelBackendError, ResponseFormat
from pipeline.core.prompt import projection_request
from pipeline.core.run import run_dpm
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.llm.openai_backend import OpenAIBackend
from pipeline.llm.pricing import Price
from pipeline.llm.registry import make_backend
from tests.fake_model_apis import Fault, MessagesApiState, chat_requests, messages_api
from tests.unit.backend_contract import BUDGET, CASE

REQUEST = projection_request(CASE.trajectory, CASE.task, BUDGET)
FAST = {"retry-after-ms": "20"}


def _error(message: str) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": "invalid_request_error"}})


@pytest.fixture
def api() -> Iterator[tuple[str, MessagesApiState]]:
    with messages_api() as served:
        yield served


def _backend(url: str, **kwargs: float) -> OpenAIBackend:
    return OpenAIBackend(f"{url}/v1", "fake-model", max_retries=int(kwargs.get("max_retries", 3)),
                         timeout_s=kwargs.get("timeout_s", 10.0))  # fmt: skip


def test_requests_go_at_temperature_zero_with_a_seed_and_a_json_schema(api: tuple[str, MessagesApiState]) -> None:
    url, state = api
    response = _backend(url).complete(REQUEST)
    body = chat_requests(state)[0]["body"]
    assert (body["temperature"], body["seed"], body["max_tokens"]) == (0.0, 0, BUDGET.response_token_limit)
    assert body["response_format"]["json_schema"]["schema"]["required"] == ["facts", "reasoning", "compliance_notes"]
    assert response.format is ResponseFormat.OPENAI_CHAT
    assert orjson.loads(response.raw)["choices"][0]["message"]["content"] == response.text
    assert dict(response.serving)["system_fingerprint"] == "fp_fake"
    assert dict(response.serving)["sha256"] == "00ff"  # the tag /v1/models lists for the served model


def test_structured_answers_give_the_same_views_and_decisions_as_the_text_ones(
    api: tuple[str, MessagesApiState],
) -> None:
    url, _ = api
    structured = run_dpm(CASE.trajectory, CASE.task, BUDGET, _backend(url))
    offline = run_dpm(CASE.trajectory, CASE.task, BUDGET, ExtractiveBackend())
    assert structured.parse_problems == ()
    assert structured.view_text == offline.view_text
    assert structured.decision == offline.decision


def test_a_server_refusing_the_schema_gets_plain_prompting(api: tuple[str, MessagesApiState]) -> None:
    url, state = api
    state.faults.append(Fault(400, _error("response_format json_schema is not supported")))
    backend = _backend(url)
    first = backend.complete(REQUEST)
    assert first.text.startswith("FACTS:")
    assert dict(first.serving)["structured_output"] == "none"
    assert "response_format" not in chat_requests(state)[1]["body"]
    backend.complete(REQUEST)
    assert len(chat_requests(state)) == 3  # asked once with the schema, never again


@pytest.mark.parametrize("status", [429, 500, 503])
def test_retryable_statuses_are_retried_honouring_retry_after(api: tuple[str, MessagesApiState], status: int) -> None:
    url, state = api
    state.faults.extend([Fault(status, _error("busy"), FAST), Fault(status, _error("busy"), {"retry-after": "1"})])
    _backend(url).complete(REQUEST)
    chats = chat_requests(state)
    assert len(chats) == 3
    assert chats[2]["at"] - chats[1]["at"] >= 0.95


def test_retries_are_bounded_and_other_client_errors_are_not_retried(api: tuple[str, MessagesApiState]) -> None:
    url, state = api
    state.faults.extend([Fault(503, _error("down"), FAST)] * 5)
    with pytest.raises(ModelBackendError, match="HTTP 503"):
        _backend(url, max_retries=2).complete(REQUEST)
    assert len(chat_requests(state)) == 3
    state.faults.clear()
    state.faults.append(Fault(401, _error("bad key")))
    with pytest.raises(ModelBackendError, match="HTTP 401"):
        _backend(url).complete(REQUEST)


def test_timeouts_and_a_dead_server_are_errors_after_retries(api: tuple[str, MessagesApiState]) -> None:
    url, state = api
    state.faults.extend([Fault(delay_s=1.5), Fault(delay_s=1.5)])
    with pytest.raises(ModelBackendError, match="timed out"):
        _backend(url, timeout_s=0.5, max_retries=1).complete(REQUEST)
    with pytest.raises(ModelBackendError, match="connection refused"):
        OpenAIBackend("http://127.0.0.1:9/v1", "m", max_retries=1, timeout_s=1).complete(REQUEST)


@pytest.mark.parametrize("body", [b"not json", b'{"choices": []}', b'{"object": "chat.completion", "choices": 3}'])
def test_malformed_bodies_are_errors_not_crashes(api: tuple[str, MessagesApiState], body: bytes) -> None:
    url, state = api
    state.faults.append(Fault(200, body))
    with pytest.raises(ModelBackendError):
        _backend(url, max_retries=0).complete(REQUEST)


def test_cost_comes_from_the_price_table_and_an_unlisted_model_says_so(api: tuple[str, MessagesApiState]) -> None:
    url, _ = api
    priced = OpenAIBackend(f"{url}/v1", "fake-model", prices={"fake-model": Price(2.0, 10.0)}).complete(REQUEST)
    assert priced.cost_usd == pytest.approx((priced.usage.input_tokens * 2 + priced.usage.output_tokens * 10) / 1e6)
    unlisted = _backend(url).complete(REQUEST)
    assert unlisted.cost_usd == 0
    assert dict(unlisted.serving)["price"].startswith("unlisted")


def test_the_registry_builds_it_from_settings_and_names_what_is_missing() -> None:
    with pytest.raises(ModelBackendError, match="DPM_OPENAI_BASE_URL"):
        make_backend(Settings.from_env({"DPM_BACKEND": "openai", "DPM_MODEL": "m"}).model)
    with pytest.raises(ModelBackendError, match="DPM_MODEL"):
        make_backend(Settings.from_env({"DPM_BACKEND": "openai", "DPM_OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}).model)
    settings = Settings.from_env({"DPM_BACKEND": "openai", "DPM_OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
                                  "DPM_MODEL": "m", "DPM_OPENAI_API_KEY": "sk-x"})  # fmt: skip
    assert make_backend(settings.model).name == "openai"
    assert "sk-x" not in repr(settings)
