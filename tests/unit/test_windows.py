"""Every backend's context window: the setting, the backend's own report, or the small default."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from benchmarks.long_horizon import long_case
from pipeline.config.settings import ModelSettings
from pipeline.core.model import ModelBackendError
from pipeline.core.run import run_dpm
from pipeline.core.task import Budget
from pipeline.core.window import ESTIMATED, TokenCountError, Window
from pipeline.llm.anthropic_backend import AnthropicBackend
from pipeline.llm.extractive.backend import OFFLINE_CONTEXT_TOKENS, ExtractiveBackend
from pipeline.llm.latency import LatencyBackend
from pipeline.llm.openai_backend import OpenAIBackend
from pipeline.llm.pricing import Price, load_price_table
from pipeline.llm.windows import FALLBACK_CONTEXT_TOKENS, context_window
from tests.fake_model_apis import PROPS_N_CTX, messages_api


def _settings(**values: object) -> ModelSettings:
    return ModelSettings.model_validate(values)


def test_the_offline_backend_takes_a_hosted_models_window_unless_set() -> None:
    assert context_window(_settings(), ExtractiveBackend()) == Window(OFFLINE_CONTEXT_TOKENS, 16_000)
    window = context_window(_settings(DPM_CONTEXT_TOKENS=8192, DPM_SEGMENT_TOKENS=4000), ExtractiveBackend())
    assert window == Window(8192, 4000)


def test_a_wrapped_backend_reports_the_window_of_what_it_wraps() -> None:
    assert context_window(_settings(), LatencyBackend(ExtractiveBackend(), 5)).tokens == OFFLINE_CONTEXT_TOKENS


def test_a_hosted_models_window_comes_from_the_model_table() -> None:
    backend = AnthropicBackend("sk-test", "claude-haiku-4-5", base_url="http://127.0.0.1:9")
    assert context_window(_settings(), backend).tokens == 200_000
    unlisted = AnthropicBackend("sk-test", "custom", base_url="http://127.0.0.1:9", prices={"custom": Price(1, 2)})
    assert context_window(_settings(), unlisted).tokens == FALLBACK_CONTEXT_TOKENS


def test_a_llama_cpp_server_reports_its_window() -> None:
    with messages_api() as (base, _state):
        backend = OpenAIBackend(f"{base}/v1", "fake-model")
        assert context_window(_settings(), backend).tokens == PROPS_N_CTX
        assert context_window(_settings(DPM_CONTEXT_TOKENS=2048), backend).tokens == 2048  # the setting wins


def test_a_server_that_says_nothing_gets_the_small_default_or_the_tables_window() -> None:
    unreachable = OpenAIBackend("http://127.0.0.1:9/v1", "some-model", max_retries=0, timeout_s=1)
    assert context_window(_settings(), unreachable).tokens == FALLBACK_CONTEXT_TOKENS
    listed = OpenAIBackend("http://127.0.0.1:9/v1", "some-model", max_retries=0, timeout_s=1,
                           prices={"some-model": Price(0, 0, 32_768)})  # fmt: skip
    assert context_window(_settings(), listed).tokens == 32_768


@pytest.mark.parametrize("tokens", [0, -5, "many", True])
def test_a_price_table_with_a_bad_window_is_refused(tmp_path: Path, tokens: object) -> None:
    path = tmp_path / "prices.json"
    path.write_bytes(orjson.dumps({"m": {"input_per_mtok": 1, "output_per_mtok": 2, "context_tokens": tokens}}))
    with pytest.raises(ModelBackendError, match="context_tokens"):
        load_price_table(path)


def test_a_llama_cpp_servers_window_is_counted_with_its_own_tokenizer() -> None:
    with messages_api() as (base, state):
        backend = OpenAIBackend(f"{base}/v1", "fake-model")
        window = context_window(_settings(DPM_CONTEXT_TOKENS=4096, DPM_SEGMENT_TOKENS=3000), backend)
        assert window.counted_by == "llama.cpp tokenizer of fake-model (sha256 00ff)"
        assert window.count("x" * 100) == 50  # the server's count (2 characters per token), not the estimate's 34
        case = long_case(27_000)
        result = run_dpm(case.trajectory, case.task, Budget(700), ExtractiveBackend(), window=window)
        tokenized = [r for r in state.requests if r["path"].endswith("/tokenize")]
        assert tokenized  # every size came from the server
        for call in result.calls:  # and by its count every prompt fits
            assert window.count(call.request.system, call.request.prompt) <= window.prompt_limit(
                call.request.max_tokens
            )
        estimated = run_dpm(case.trajectory, case.task, Budget(700), ExtractiveBackend(), window=Window(4096, 3000))
        assert len(result.segments) > len(estimated.segments)  # the denser tokenizer cuts smaller segments


def test_a_decision_cut_by_a_tokenizer_replays_only_where_that_tokenizer_is_at_hand() -> None:
    recorded = Window.from_wire({"tokens": 4096, "segment_tokens": 3000, "margin_tokens": 256,
                                 "counted_by": "llama.cpp tokenizer of fake-model (sha256 00ff)"})  # fmt: skip
    with pytest.raises(TokenCountError, match="--verify-recorded"):
        recorded.count("text")
    with messages_api() as (base, _state):
        counter = OpenAIBackend(f"{base}/v1", "fake-model").token_counter()
        assert recorded.counted_with(counter).count("x" * 10) == 5
        assert recorded.counted_with(ESTIMATED) is recorded  # another counter is not taken for it
