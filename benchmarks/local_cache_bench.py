"""The local model with llama.cpp's prompt cache on: does a request get the same answer whatever came before it?

Measured on this machine with the shipped SmolLM2-135M-Instruct (one slot, pinned threads), the
`prompt_cache` section's `local` part. First every request is answered by a server with the cache
off (each request evaluated from scratch: the reference). Then a server with the cache on answers
the same requests in several orders, each order twice, so that before each request came another
one (or itself), sharing a long prefix or none; every answer's text is compared byte for byte with
the reference. Last, three tasks are decided one after another on one 27,000-character case with
the log first (so the tasks' prompts share the case's events), on a fresh server with the cache
off and on one with it on: the seconds each took.

    python -m benchmarks.local_cache_bench [--out out/bench/local_cache.json]
"""

from __future__ import annotations

import argparse
import random
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from benchmarks.long_horizon import long_case
from pipeline.bench.generate import GenerationSpec, generate_cases
from pipeline.config.settings import Settings
from pipeline.core.model import ModelRequest
from pipeline.core.prompt import PromptLayout, decision_request, prompt_events, segment_request
from pipeline.core.run import run_dpm
from pipeline.core.task import Budget, TaskSpec
from pipeline.llm import local_model
from pipeline.llm.openai_backend import OpenAIBackend
from pipeline.llm.windows import context_window

ORDERS = 4  # as sent, reversed, and two shuffles; each sent twice in a row
BUDGET = Budget(700)
CASE_CHARS = 27_000


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def _server(cache_prompt: bool) -> Iterator[OpenAIBackend]:
    with tempfile.TemporaryDirectory() as home:
        spec = local_model.ServerSpec(local_model.shipped_gguf(), _free_port(), cache_prompt=cache_prompt)
        running, _ = local_model.start(Path(home), spec)
        try:
            yield OpenAIBackend(running.base_url, running.model, timeout_s=600, max_retries=0)
        finally:
            local_model.stop(Path(home))


def _requests() -> list[ModelRequest]:
    """Projections of small cases in both layouts (long shared prefixes, and none), and decision calls."""
    cases = generate_cases(GenerationSpec(domains=("loan", "claim"), per_domain=1, chars=(4000, 4800),
                                          events=(14, 16)))  # fmt: skip
    requests = []
    for case in cases:
        events = prompt_events(case.trajectory)
        other = TaskSpec(case.task.domain, "Decide whether the file shows signs of fraud.", case.task.label_space)
        for task in (case.task, other):
            for layout in PromptLayout:
                requests.append(segment_request(events, task, BUDGET, whole=True, layout=layout))
        requests.append(decision_request("FACTS:\n- income 84,000 [1]\nREASONING:\n- verified\n", case.task))
    return requests


def _orders(count: int) -> list[list[int]]:
    shuffled = random.Random(7)  # an order of requests, not a secret
    orders = [list(range(count)), list(reversed(range(count)))]
    for _ in range(ORDERS - 2):
        order = list(range(count))
        shuffled.shuffle(order)
        orders.append(order)
    return orders


def _three_tasks_s(backend: OpenAIBackend) -> float:
    case = long_case(CASE_CHARS)
    window = context_window(Settings.from_env({}).model, backend)
    domain, labels = case.task.domain, case.task.label_space
    tasks = [case.task, TaskSpec(domain, "Decide whether the file shows signs of fraud.", labels),
             TaskSpec(domain, "Decide whether every required document is on file.", labels)]  # fmt: skip
    started = time.perf_counter()
    for task in tasks:
        run_dpm(case.trajectory, task, BUDGET, backend, window=window, layout=PromptLayout.EVENTS_FIRST)
    return round(time.perf_counter() - started, 1)


def three_tasks() -> dict[str, float]:
    """The seconds three tasks take on one case, on a fresh server with the cache off and one with it on."""
    with _server(cache_prompt=False) as off:
        off_s = _three_tasks_s(off)
    with _server(cache_prompt=True) as on:
        on_s = _three_tasks_s(on)
    return {"off": off_s, "on": on_s}


def measure() -> dict[str, Any]:
    requests = _requests()
    with _server(cache_prompt=False) as off:
        reference = [off.complete(r).text for r in requests]
    differing: list[dict[str, int]] = []
    compared = 0
    with _server(cache_prompt=True) as on:
        for n, order in enumerate(_orders(len(requests))):
            for _ in range(2):
                for i in order:
                    compared += 1
                    if on.complete(requests[i]).text != reference[i]:
                        differing.append({"order": n, "request": i})
    return {"identical": not differing, "compared": compared, "differing_count": len(differing),
            "differing": differing[:20], "requests": len(requests), "three_tasks_s": three_tasks(),
            "case_chars": CASE_CHARS}  # fmt: skip


def measure_if_installed() -> dict[str, Any] | None:
    """`measure()`, or None where the shipped model is not installed (`make local-model`)."""
    try:
        local_model.shipped_gguf()
    except local_model.LocalModelError:
        return None
    return measure()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/bench/local_cache.json"))
    parser.add_argument("--timing-only", action="store_true", help="measure only the three tasks' seconds")
    args = parser.parse_args()
    figures = {"three_tasks_s": three_tasks(), "case_chars": CASE_CHARS} if args.timing_only else measure()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(figures, option=orjson.OPT_INDENT_2))
    print(orjson.dumps(figures, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
