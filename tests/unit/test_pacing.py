"""Call timeouts follow a request's size and the server's measured speed; a retry never queues behind its own call."""

from __future__ import annotations

import orjson
import pytest

from pipeline.llm.openai_backend import OpenAIBackend
from pipeline.llm.pacing import Pacing, Speeds, retry_timeout
from tests.fake_model_apis import Fault, chat_requests, messages_api
from tests.unit.test_openai_faults import REQUEST


def _llama_answer(prompt_per_s: float, predicted_per_s: float) -> bytes:
    return orjson.dumps({"choices": [], "timings": {"prompt_per_second": prompt_per_s,
                                                    "predicted_per_second": predicted_per_s}})  # fmt: skip


def test_a_timeout_grows_with_the_request_at_the_servers_measured_speed_never_below_the_setting() -> None:
    pacing = Pacing("http://127.0.0.1:9", floor_s=60)
    assert pacing.timeout_for(5_000, 500) == 60  # nothing measured yet: the setting
    pacing.speeds.observe(_llama_answer(100.0, 10.0))
    assert pacing.timeout_for(5_000, 500) == pytest.approx(2 * (50 + 50) + 5)  # 50 s to read, 50 s to write
    assert pacing.timeout_for(200, 16) == 60  # a short call keeps the setting
    pacing.speeds.observe(b'{"choices": []}')  # an answer without timings (a hosted API) changes nothing
    assert pacing.speeds == Speeds(100.0, 10.0)


def test_a_one_slot_server_gets_the_retry_only_once_it_finished_the_call_that_timed_out() -> None:
    with messages_api() as (url, state):
        state.one_slot = True
        state.faults.extend([Fault(), Fault(delay_s=2.0)])  # the speed measurement, then a call slower than 0.5 s
        response = OpenAIBackend(f"{url}/v1", "fake-model", timeout_s=0.5, max_retries=1).complete(REQUEST)
        calls = chat_requests(state)
    assert response.text
    assert len(calls) == 3  # the short measuring call, the one that timed out, its retry
    assert calls[2]["at"] >= calls[1]["at"] + 2.0  # sent after the server finished the abandoned one
    slots = [r for r in state.requests if r["path"].endswith("/slots")]
    assert len(slots) >= 2  # asked whether it is one-slot, then polled while it was busy


def test_a_server_without_slots_is_retried_by_the_sdk_as_before() -> None:
    with messages_api() as (url, state):
        state.faults.extend([Fault(delay_s=1.0), Fault()])
        response = OpenAIBackend(f"{url}/v1", "fake-model", timeout_s=0.4, max_retries=1).complete(REQUEST)
        calls = chat_requests(state)
    assert response.text
    assert len(calls) == 2
    assert calls[1]["at"] < calls[0]["at"] + 1.0  # re-sent at once: nothing says the server is still busy


def test_a_call_that_timed_out_teaches_how_much_longer_calls_take_and_its_retry_gets_more() -> None:
    pacing = Pacing("http://127.0.0.1:9", floor_s=10)
    pacing.speeds.observe(_llama_answer(100.0, 10.0))
    assert pacing.timeout_for(1_000, 100) == pytest.approx(2 * 20 + 5)  # 10 s to read, 10 s to write
    pacing.learn(20.0, 80.0)  # it took four times as long as the short measuring call said
    assert pacing.timeout_for(1_000, 100) == pytest.approx(2 * 80 + 5)
    assert retry_timeout(45.0, 30.0) == pytest.approx(2 * (45 + 30) + 5)
    assert retry_timeout(45.0, 0.0) == 95.0  # never less than twice the timeout that ran out
