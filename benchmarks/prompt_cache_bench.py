"""Prompt caching: what the events several decisions read cost with a provider's prompt cache, and without.

Computed, not billed. The requests are the exact ones the product sends (the offline backend's
runs: a projection's bytes depend only on the events, the task and the budget; a decision call's
and a Summ-only step's on earlier answers, for which the offline reader's stand in). Each request
is then charged as the Anthropic Messages API documents its cache, for claude-haiku-4-5 at list
price: an entry is asked for at each breakpoint the backend marks (prompt.cache_blocks); a call
reads the longest entry found at a breakpoint or at up to 20 block boundaries before it, and
writes the rest up to its last breakpoint; a prefix under 4,096 tokens (Haiku 4.5's minimum) is
neither; an entry lives five minutes from its last use. Tokens are estimated at 3 characters each
(core.window), for every figure alike. Calls of one prefix sent at once go one after another
(llm/cache_warming.py), as here.

Two situations. Tasks at once: 3 tasks x 2 budgets decided together on a 100,000-character case.
Agent stream: a case growing to 100,000 characters within an hour, a decision asked every 20 events.
Each: DPM without caching (the first prompt layout, every token at the input price), DPM with
caching (the log first, charged by the cache rules), Summ-only (a summary rewritten after every
event: no prefix long enough to cache).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from benchmarks.long_horizon import long_case
from pipeline.core.case import Case
from pipeline.core.events import Trajectory
from pipeline.core.hashing import sha256_hex
from pipeline.core.model import ModelRequest, ModelResponse
from pipeline.core.prompt import PromptLayout, cache_blocks, decision_request, prompt_events
from pipeline.core.run import SummMemory, SummVariant, run_dpm, summ_step
from pipeline.core.task import Budget, TaskSpec
from pipeline.core.view import EMPTY_VIEW
from pipeline.core.window import estimated_tokens
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.llm.pricing import DEFAULT_PRICES

MODEL = "claude-haiku-4-5-20251001"
PRICE = DEFAULT_PRICES[MODEL]
MIN_CACHED_TOKENS = 4096
LIFETIME_S = 300.0
LOOKBACK_BLOCKS = 20
CASE_CHARS = 100_000
BUDGETS = (Budget(1338), Budget(5352))
STREAM_BUDGET = Budget(5352)
STREAM_EVERY = 20
STREAM_S = 3600.0
TARGETS = {"tasks_at_once": 0.40, "agent_stream": 0.50}
NOTE = ("computed, not billed: the exact requests the product sends, charged as the Anthropic Messages API "
        "documents its prompt cache (claude-haiku-4-5 list prices; 3 characters per token)")  # fmt: skip


@dataclass
class Bill:
    """Tokens and calls of one way of deciding, and what they cost at list price."""

    calls: int = 0
    uncached: int = 0
    written: int = 0
    read: int = 0
    output: int = 0

    @property
    def input_tokens(self) -> int:
        return self.uncached + self.written + self.read

    @property
    def input_usd(self) -> float:
        write = PRICE.cache_write_per_mtok or PRICE.input_per_mtok
        read = PRICE.cache_read_per_mtok or PRICE.input_per_mtok
        return (self.uncached * PRICE.input_per_mtok + self.written * write + self.read * read) / 1_000_000

    def wire(self) -> dict[str, Any]:
        return {"calls": self.calls, "input_tokens": self.input_tokens, "uncached_tokens": self.uncached,
                "cache_write_tokens": self.written, "cached_tokens": self.read, "output_tokens": self.output,
                "input_usd": round(self.input_usd, 6),
                "output_usd": round(self.output * PRICE.output_per_mtok / 1_000_000, 6)}  # fmt: skip


@dataclass
class CacheRules:
    """The Messages API's prompt cache as documented, charging each request sent at time `at` to a bill."""

    entries: dict[str, float] = field(default_factory=dict)  # digest of a prefix -> when it expires

    def charge(self, bill: Bill, request: ModelRequest, output_tokens: int, at: float) -> None:
        blocks = cache_blocks(request.prompt)
        ends = list(itertools.accumulate(len(b.text) for b in blocks))

        def tokens(end: int) -> int:
            return estimated_tokens(request.system + request.prompt[:end])

        def key(end: int) -> str:
            return sha256_hex(f"{request.system}\x00{request.prompt[:end]}".encode())

        marks = [i for i, b in enumerate(blocks) if b.breakpoint and tokens(ends[i]) >= MIN_CACHED_TOKENS]
        hit = 0
        for mark in marks:
            for i in range(mark, max(-1, mark - LOOKBACK_BLOCKS - 1), -1):
                if ends[i] > hit and self.entries.get(key(ends[i]), 0.0) > at:
                    hit = ends[i]
                    break
        last = ends[marks[-1]] if marks else 0
        read = tokens(hit) if hit else 0
        written = tokens(last) - read if last else 0
        for end in [ends[m] for m in marks] + ([hit] if hit else []):
            self.entries[key(end)] = at + LIFETIME_S  # written, or read: alive five minutes from now
        bill.calls += 1
        bill.read += read
        bill.written += written
        bill.uncached += tokens(len(request.prompt)) - read - written
        bill.output += output_tokens


def _plain(bill: Bill, request: ModelRequest, response: ModelResponse) -> None:
    """A call without a cache: every input token at the input price."""
    bill.calls += 1
    bill.uncached += estimated_tokens(request.system + request.prompt)
    bill.output += response.usage.output_tokens


def _recorded(backend: ExtractiveBackend, sink: Callable[[ModelRequest, ModelResponse], None]) -> ExtractiveBackend:
    """The offline reader, handing each call it answers to `sink` as well."""

    class Recording(ExtractiveBackend):
        def complete(self, request: ModelRequest) -> ModelResponse:
            response = backend.complete(request)
            sink(request, response)
            return response

    return Recording()


Sent = list[tuple[ModelRequest, ModelResponse]]


def _dpm(trajectory: Trajectory, task: TaskSpec, budget: Budget, layout: PromptLayout) -> Sent:
    """The calls of one DPM decision, in the order they are made."""
    calls: Sent = []
    run_dpm(trajectory, task, budget, _recorded(ExtractiveBackend(), lambda q, a: calls.append((q, a))), layout=layout)
    return calls


def _tasks(case: Case) -> list[TaskSpec]:
    """The case's own task and two more over the same log: a loan file checked for fraud and for compliance."""
    task = case.task
    return [task, TaskSpec(task.domain, "Decide whether the file shows signs of fraud or misrepresentation.",
                           task.label_space),
            TaskSpec(task.domain, "Decide whether the file meets every documentation and disclosure requirement.",
                     task.label_space)]  # fmt: skip


def _summ_folds(trajectory: Trajectory, task: TaskSpec, budget: Budget, bill: Bill,
                decide_at: Sequence[int] = ()) -> None:  # fmt: skip
    """Summ-only over the case: one rewrite per event, a decision over the summary after each event in `decide_at`
    (after the last one when none is given)."""
    backend = ExtractiveBackend()
    memory = SummMemory(EMPTY_VIEW)

    def call(request: ModelRequest) -> ModelResponse:
        response = backend.complete(request)
        _plain(bill, request, response)
        return response

    points = set(decide_at) or {len(trajectory)}
    for step in prompt_events(trajectory):
        event = trajectory.events[step.index - 1]
        memory = summ_step(memory, step.index, event, task=task, budget=budget, variant=SummVariant.REWRITE,
                           call=call)  # fmt: skip
        if step.index in points:
            call(decision_request(memory.view.render(), task))


def tasks_at_once(case: Case) -> dict[str, Any]:
    """3 tasks x 2 budgets decided together on one case."""
    nocache, cached, summ, rules = Bill(), Bill(), Bill(), CacheRules()
    for n, (task, budget) in enumerate(itertools.product(_tasks(case), BUDGETS)):
        for request, response in _dpm(case.trajectory, task, budget, PromptLayout.TASK_FIRST):
            _plain(nocache, request, response)
        for request, response in _dpm(case.trajectory, task, budget, PromptLayout.EVENTS_FIRST):
            rules.charge(cached, request, response.usage.output_tokens, at=float(n))  # the first goes first
        _summ_folds(case.trajectory, task, budget, summ)
    return _situation(nocache, cached, summ)


def agent_stream(case: Case) -> dict[str, Any]:
    """A decision every 20 events while the case grows to its full length within an hour."""
    events = case.trajectory.events
    points = list(range(STREAM_EVERY, len(events) + 1, STREAM_EVERY))
    nocache, cached, summ, rules = Bill(), Bill(), Bill(), CacheRules()
    for point in points:
        grown = Trajectory(case.trajectory.case, events[:point])
        at = STREAM_S * point / len(events)
        for request, response in _dpm(grown, case.task, STREAM_BUDGET, PromptLayout.TASK_FIRST):
            _plain(nocache, request, response)
        for request, response in _dpm(grown, case.task, STREAM_BUDGET, PromptLayout.EVENTS_FIRST):
            rules.charge(cached, request, response.usage.output_tokens, at=at)
    _summ_folds(case.trajectory, case.task, STREAM_BUDGET, summ, decide_at=points)
    figures = _situation(nocache, cached, summ)
    figures["decisions"] = len(points)
    figures["minutes_between_decisions"] = round(STREAM_S * STREAM_EVERY / len(events) / 60, 2)
    return figures


def _situation(nocache: Bill, cached: Bill, summ: Bill) -> dict[str, Any]:
    return {
        "dpm_nocache_input_usd": round(nocache.input_usd, 6),
        "dpm_cache_input_usd": round(cached.input_usd, 6),
        "summ_input_usd": round(summ.input_usd, 6),
        "calls": cached.calls,
        "cached_tokens": cached.read,
        "uncached_tokens": cached.uncached + cached.written,
        "cache_share_of_nocache": round(cached.input_usd / nocache.input_usd, 4),
        "rows": {"dpm_nocache": nocache.wire(), "dpm_cache": cached.wire(), "summ": summ.wire()},
    }


def with_local(figures: dict[str, Any], local: dict[str, Any] | None) -> dict[str, Any]:
    """The section with the local model's answer (benchmarks/local_cache_bench.py), None where it is not installed."""
    return {**figures, "local": local, "local_cache_identical": None if local is None else local["identical"],
            "local_three_tasks_s": None if local is None else local["three_tasks_s"]}  # fmt: skip


def measure() -> dict[str, Any]:
    """The hosted part of the `prompt_cache` section of figures.json (computed: no model is called)."""
    case = long_case(CASE_CHARS)
    figures: dict[str, Any] = {"tasks_at_once": tasks_at_once(case), "agent_stream": agent_stream(case)}
    for name, limit in TARGETS.items():
        figures[name]["target_share"] = limit
        figures[name]["within_target"] = figures[name]["cache_share_of_nocache"] <= limit
    figures |= {"case_chars": sum(len(e.text) for e in case.trajectory.events), "model": MODEL, "note": NOTE,
                "measured": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}  # fmt: skip
    return figures
