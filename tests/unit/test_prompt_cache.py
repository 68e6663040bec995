"""Prompt caching: hosted backends send the log first as a cacheable prefix and record what the cache served.

The local servers speak each API and report cache fields the way the providers document them
(tests/fake_model_apis.py); caching changes what a call costs, never a byte a decision depends on.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from pipeline.bench.generate import GenerationSpec, generate_cases
from pipeline.core.model import ModelBackend, ModelBackendError, ModelRequest, ModelResponse, Purpose, Usage
from pipeline.core.prompt import PromptLayout, prompt_events, segment_request
from pipeline.core.recorded import RecordedAnswers
from pipeline.core.run import RunResult, run_dpm
from pipeline.core.segments import DictSegmentStore
from pipeline.core.task import Architecture, Budget, TaskSpec
from pipeline.core.verification import ReplayStatus, verify_replay
from pipeline.core.window import Window
from pipeline.llm.anthropic_backend import AnthropicBackend
from pipeline.llm.cache_warming import CacheWarmingBackend
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.llm.openai_backend import OpenAIBackend
from pipeline.llm.pricing import DEFAULT_PRICES, Price, load_price_table
from pipeline.wire.audit import calls_in_order
from pipeline.wire.decision import DecisionRecord, PositionsSource, Provenance
from pipeline.wire.run_records import RunRecords, run_records
from pipeline.wire.trigger import DecisionId
from tests.fake_model_apis import Fault, MessagesApiState, chat_requests, messages_api

CASE = generate_cases(GenerationSpec(domains=("loan",), per_domain=1))[0]  # 26-28k characters
FRAUD = TaskSpec(CASE.task.domain, "Decide whether the file shows signs of fraud.", CASE.task.label_space)
MODEL = "claude-haiku-4-5-20251001"


@pytest.fixture
def api() -> Iterator[tuple[str, MessagesApiState]]:
    with messages_api() as served:
        yield served


def _backend(url: str) -> AnthropicBackend:
    return AnthropicBackend("k", MODEL, base_url=url)


def _published(result: RunResult, task: TaskSpec, budget: Budget) -> RunRecords:
    provenance = Provenance(DecisionId("d-1", Architecture.DPM), (), PositionsSource.TRIGGER, "anthropic", "test")
    return run_records(result, CASE.trajectory, task=task, budget=budget, provenance=provenance)


def _messages(state: MessagesApiState) -> list[dict[str, object]]:
    return [r["body"] for r in state.requests if r["path"].endswith("/messages")]


def _two_tasks(backend: ModelBackend) -> tuple[RunResult, RunResult]:
    """The case decided for its own task, then for fraud at another budget, its log first both times."""
    first = run_dpm(CASE.trajectory, CASE.task, Budget(1338), backend, layout=PromptLayout.EVENTS_FIRST)
    return first, run_dpm(CASE.trajectory, FRAUD, Budget(5352), backend, layout=PromptLayout.EVENTS_FIRST)


def _projection_usage(result: RunResult) -> Usage:
    return next(c.response.usage for c in result.calls if c.request.purpose is Purpose.PROJECT)


def test_with_the_log_first_a_second_task_reads_the_case_s_events_from_the_cache(
    api: tuple[str, MessagesApiState],
) -> None:
    url, state = api
    backend = _backend(url)
    first, second = _two_tasks(backend)
    sent = _messages(state)[0]["messages"][0]["content"]  # type: ignore[index]
    assert isinstance(sent, list)
    assert "".join(b["text"] for b in sent) == first.calls[0].request.prompt  # the same characters, in blocks
    assert 1 <= sum("cache_control" in b for b in sent) <= 4  # the API's limit on breakpoints
    written, read = _projection_usage(first), _projection_usage(second)
    assert (written.cache_read_tokens, read.cache_write_tokens) == (0, 0)
    assert written.cache_write_tokens > 5000  # the log, about 27k characters
    assert read.cache_read_tokens == written.cache_write_tokens  # the other task found all of it
    price = DEFAULT_PRICES[MODEL]  # a read costs a tenth of the input price, a write 1.25x
    assert price.cost(replace(read, output_tokens=0)) < 0.1 * price.cost(replace(written, output_tokens=0))


def test_the_audit_and_decision_records_hold_the_cache_fields_and_the_cost_they_make(
    api: tuple[str, MessagesApiState],
) -> None:
    url, _ = api
    backend = _backend(url)
    run_dpm(CASE.trajectory, CASE.task, Budget(1338), backend, layout=PromptLayout.EVENTS_FIRST)
    records = _published(run_dpm(CASE.trajectory, FRAUD, Budget(5352), backend, layout=PromptLayout.EVENTS_FIRST),
                         FRAUD, Budget(5352))  # fmt: skip
    audit = orjson.loads(records.audits[0].encode())["usage"]
    assert audit["cache_read_input_tokens"] > 0
    assert audit["input_tokens"] >= audit["cache_read_input_tokens"] + audit["cache_write_input_tokens"]
    decision = DecisionRecord.from_wire(orjson.loads(records.decision.encode()))
    assert decision.usage.cache_read_tokens == audit["cache_read_input_tokens"]
    assert decision.cost_usd == pytest.approx(sum(c.response.cost_usd for c in calls_in_order(records.audits)))


def test_a_prompt_with_the_task_first_is_sent_as_before(api: tuple[str, MessagesApiState]) -> None:
    url, state = api
    result = run_dpm(CASE.trajectory, CASE.task, Budget(1338), _backend(url))
    assert all(isinstance(m["messages"][0]["content"], str) for m in _messages(state))  # type: ignore[index]
    usage = _projection_usage(result)
    assert (usage.cache_write_tokens, usage.cache_read_tokens) == (0, 0)


def test_caching_changes_no_byte_of_replay_verify_recorded_or_reused_segment_views(
    api: tuple[str, MessagesApiState],
) -> None:
    url, _ = api
    backend, window, store = _backend(url), Window(tokens=4096, segment_tokens=3000), DictSegmentStore()
    result = run_dpm(CASE.trajectory, CASE.task, Budget(700), backend, window=window, store=store,
                     layout=PromptLayout.EVENTS_FIRST)  # fmt: skip
    records = _published(result, CASE.task, Budget(700))
    target = records.decision.replay_target()
    assert records.self_check().status is ReplayStatus.MATCH  # --verify-recorded
    recorded = RecordedAnswers(calls_in_order(records.audits))
    assert verify_replay(target, CASE.trajectory, None, recorded).status is ReplayStatus.MATCH
    replayed = verify_replay(target, CASE.trajectory, None, backend)  # the cache is warm now: other usage
    assert replayed.status is ReplayStatus.MATCH
    again = run_dpm(CASE.trajectory, CASE.task, Budget(700), backend, window=window, store=store,
                    layout=PromptLayout.EVENTS_FIRST)  # fmt: skip
    assert any(n.reused for n in again.segments)
    assert again.view_text == result.view_text


def _openai(url: str) -> OpenAIBackend:
    return OpenAIBackend(f"{url}/v1", "fake-model", prices={"fake-model": Price(0.4, 1.6, cache_read_per_mtok=0.1)})


def test_the_openai_backend_sends_one_cache_key_per_case_log_and_records_the_cached_tokens(
    api: tuple[str, MessagesApiState],
) -> None:
    url, state = api
    backend = _openai(url)
    first, second = _two_tasks(backend)
    other = generate_cases(GenerationSpec(domains=("loan",), per_domain=2))[1]
    run_dpm(other.trajectory, other.task, Budget(1338), backend, layout=PromptLayout.EVENTS_FIRST)
    keys = [r["body"].get("prompt_cache_key") for r in chat_requests(state)]
    projections = keys[0::2]  # each decision: a projection, then a decision call over the view
    assert projections[0] == projections[1] != projections[2]  # the case's log names the key; another case's differs
    assert keys[1::2] == [None] * 3  # a decision call's prompt is the view: no log to share
    assert _projection_usage(first).cache_read_tokens == 0
    cached = _projection_usage(second).cache_read_tokens
    assert cached >= 5000
    assert (cached - 1024) % 128 == 0
    assert _projection_usage(second).input_tokens > cached  # prompt_tokens includes the cached ones


def test_a_server_that_refuses_the_cache_key_is_asked_without_it_from_then_on(
    api: tuple[str, MessagesApiState],
) -> None:
    url, state = api
    state.faults.append(Fault(400, orjson.dumps({"error": {"message": "Unrecognized request argument supplied: "
                                                                      "prompt_cache_key"}})))  # fmt: skip
    backend = _openai(url)
    run_dpm(CASE.trajectory, CASE.task, Budget(1338), backend, layout=PromptLayout.EVENTS_FIRST)
    run_dpm(CASE.trajectory, FRAUD, Budget(1338), backend, layout=PromptLayout.EVENTS_FIRST)
    sent = [r["body"] for r in chat_requests(state)]
    assert "prompt_cache_key" in sent[0]
    assert all("prompt_cache_key" not in body for body in sent[1:])
    assert all("response_format" in body and "seed" in body for body in sent)  # nothing else given up


class _Slow(ExtractiveBackend):
    """The offline reader, answering each call after a pause, noting when each call started and ended."""

    def __init__(self) -> None:
        super().__init__()
        self.spans: list[tuple[str, float, float]] = []

    def complete(self, request: ModelRequest) -> ModelResponse:
        started = time.monotonic()
        time.sleep(0.3)
        response = super().complete(request)
        self.spans.append((request.prompt, started, time.monotonic()))
        return response


def test_calls_that_would_write_one_cache_entry_wait_for_the_first_and_others_do_not() -> None:
    inner = _Slow()
    backend = CacheWarmingBackend(inner, max_wait_s=10)
    events = prompt_events(CASE.trajectory)
    same_log = [segment_request(events, t, Budget(b), whole=True, layout=PromptLayout.EVENTS_FIRST)
                for t in (CASE.task, FRAUD) for b in (1338, 5352)]  # fmt: skip
    other_logs = [segment_request(events[:n], CASE.task, Budget(1338), whole=True, layout=PromptLayout.EVENTS_FIRST)
                  for n in (40, 60)]  # fmt: skip
    task_first = [segment_request(events, t, Budget(1338), whole=True) for t in (CASE.task, FRAUD)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(backend.complete, [*same_log, *other_logs, *task_first]))
    spans = {prompt: (start, end) for prompt, start, end in inner.spans}
    first_end = min(spans[r.prompt][1] for r in same_log)
    waited = sorted(spans[r.prompt][0] for r in same_log)[1:]
    assert all(start >= first_end for start in waited)  # three calls read what the first wrote
    unrelated = [spans[r.prompt][0] for r in (*other_logs, *task_first)]
    assert max(unrelated) < first_end  # another log's prefix, or no cacheable one: sent at once
    later = backend.complete(same_log[0])  # answered already: a later call reads at once
    assert later.text == ExtractiveBackend().complete(same_log[0]).text


def test_the_price_table_prices_cache_writes_and_reads_and_refuses_a_price_that_is_no_number(tmp_path: Path) -> None:
    table = tmp_path / "prices.json"
    table.write_text('{"negotiated": {"input_per_mtok": 2, "output_per_mtok": 8, "cache_read_per_mtok": 0.5},'
                     ' "claude-haiku-4-5": {"input_per_mtok": 0.8, "output_per_mtok": 4}}')  # fmt: skip
    prices = load_price_table(table)
    usage = Usage(1_000_000, 0, cache_write_tokens=200_000, cache_read_tokens=500_000)
    assert prices["negotiated"].cost(usage) == pytest.approx(
        0.3 * 2 + 0.2 * 2 + 0.5 * 0.5
    )  # a write at the input price
    assert prices["claude-haiku-4-5"].cost(usage) == pytest.approx(0.8)  # overridden whole: no cache prices given
    assert DEFAULT_PRICES[MODEL].cost(usage) == pytest.approx(0.3 * 1.0 + 0.2 * 1.25 + 0.5 * 0.1)
    table.write_text('{"m": {"input_per_mtok": 1, "output_per_mtok": 2, "cache_read_per_mtok": "cheap"}}')
    with pytest.raises(ModelBackendError, match="price table"):
        load_price_table(table)
