"""The Anthropic backend against a local Messages API that misbehaves: retries, backoff, timeouts, bad bodies."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.config.settings import Settings
from pipeline.core.model import ModelBackendError
from pipeline.core.prompt import projection_request
from pipeline.llm.anthropic_backend import AnthropicBackend
from pipeline.llm.pricing import Price, load_price_table
from pipeline.llm.registry import backend_names, make_backend
from tests.fake_model_apis import Fault, MessagesApiState, error_body, messages_api
from tests.unit.backend_contract import BUDGET, CASE

REQUEST = projection_request(CASE.trajectory, CASE.task, BUDGET)
FAST = {"retry-after-ms": "20"}  # keeps backoff short where the test is not about its length


@pytest.fixture
def api() -> Iterator[tuple[str, MessagesApiState]]:
    with messages_api() as served:
        yield served


def _backend(url: str, **kwargs: float) -> AnthropicBackend:
    return AnthropicBackend(
        "k", base_url=url, max_retries=int(kwargs.get("max_retries", 3)), timeout_s=kwargs.get("timeout_s", 10.0)
    )


@pytest.mark.parametrize(
    ("status", "kind"), [(429, "rate_limit_error"), (529, "overloaded_error"), (500, "api_error"), (503, "api_error")]
)
def test_retryable_statuses_are_retried_then_succeed(api: tuple[str, MessagesApiState], status: int, kind: str) -> None:
    url, state = api
    state.faults.extend([Fault(status, error_body(kind, "busy"), FAST), Fault(status, error_body(kind, "busy"), FAST)])
    response = _backend(url).complete(REQUEST)
    assert response.text.startswith("FACTS:")
    assert len(state.requests) == 3


def test_retry_after_is_honoured(api: tuple[str, MessagesApiState]) -> None:
    url, state = api
    state.faults.append(Fault(429, error_body("rate_limit_error", "slow down"), {"retry-after": "1"}))
    _backend(url).complete(REQUEST)
    assert state.arrivals[1] - state.arrivals[0] >= 0.95


def test_retries_are_bounded_and_the_error_is_wrapped(api: tuple[str, MessagesApiState]) -> None:
    url, state = api
    state.faults.extend([Fault(529, error_body("overloaded_error", "overloaded"), FAST)] * 5)
    with pytest.raises(ModelBackendError, match="HTTP 529"):
        _backend(url, max_retries=2).complete(REQUEST)
    assert len(state.requests) == 3


def test_client_errors_are_not_retried(api: tuple[str, MessagesApiState]) -> None:
    url, state = api
    state.faults.append(Fault(400, error_body("invalid_request_error", "max_tokens too large")))
    with pytest.raises(ModelBackendError, match="HTTP 400"):
        _backend(url).complete(REQUEST)
    assert len(state.requests) == 1


def test_a_timeout_is_retried_then_reported(api: tuple[str, MessagesApiState]) -> None:
    url, state = api
    state.faults.append(Fault(delay_s=1.5))
    assert _backend(url, timeout_s=0.5, max_retries=1).complete(REQUEST).text.startswith("FACTS:")
    state.faults.extend([Fault(delay_s=1.5), Fault(delay_s=1.5)])
    with pytest.raises(ModelBackendError, match="timed out"):
        _backend(url, timeout_s=0.5, max_retries=1).complete(REQUEST)


@pytest.mark.parametrize("body", [b"not json at all", b'{"type": "message"}', b'{"content": "oops", "usage": 3}'])
def test_malformed_bodies_are_errors_not_crashes(api: tuple[str, MessagesApiState], body: bytes) -> None:
    url, state = api
    state.faults.append(Fault(200, body))
    with pytest.raises(ModelBackendError):
        _backend(url, max_retries=0).complete(REQUEST)


def test_cost_comes_from_usage_and_the_price_table(api: tuple[str, MessagesApiState], tmp_path: Path) -> None:
    url, _ = api
    table = tmp_path / "prices.json"
    table.write_text('{"claude-haiku-4-5-20251001": {"input_per_mtok": 2.0, "output_per_mtok": 10.0}}')
    backend = AnthropicBackend("k", base_url=url, prices=load_price_table(table))
    response = backend.complete(REQUEST)
    expected = (response.usage.input_tokens * 2.0 + response.usage.output_tokens * 10.0) / 1_000_000
    assert response.cost_usd == pytest.approx(expected)
    assert response.cost_usd > 0


def test_unknown_models_need_a_price_and_bad_tables_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelBackendError, match="no price for model"):
        AnthropicBackend("k", model="claude-unpriced", prices={"other": Price(1, 1)})
    broken = tmp_path / "prices.json"
    broken.write_text("{not json")
    with pytest.raises(ModelBackendError, match="unreadable"):
        load_price_table(broken)


def test_registry_needs_a_key_for_anthropic_and_rejects_unknown_backends() -> None:
    assert make_backend(Settings.from_env({}).model).name == "extractive"
    with pytest.raises(ModelBackendError, match="ANTHROPIC_API_KEY"):
        make_backend(Settings.from_env({"DPM_BACKEND": "anthropic"}).model)
    with pytest.raises(
        ModelBackendError, match="unknown backend 'gpt'; choose one of extractive, anthropic, openai, recorded"
    ):
        make_backend(Settings.from_env({"DPM_BACKEND": "gpt"}).model)


def test_every_registered_backend_is_built_by_name_from_settings(tmp_path: Path) -> None:
    env = {
        "ANTHROPIC_API_KEY": "k",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
        "DPM_MODEL": "claude-haiku-4-5",
        "DPM_OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
    }
    for name in backend_names():
        backend = make_backend(Settings.from_env({**env, "DPM_BACKEND": name}).model)
        assert backend.name == name
