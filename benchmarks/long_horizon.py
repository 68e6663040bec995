"""Long horizons: what one decision costs as a case grows from 27,000 to 10,000,000 characters.

In process, offline backend, every model call made LATENCY_MS slow (a sleep: the figures count
calls, tokens and time, not this machine's CPU for a hosted model's work). For each length and
window: DPM's first decision (segment views stored), then its re-decision after one appended
event (the stored views reused); Summ-only's fold over every event, then its re-decision (one
more fold), stopped at SUMM_CAP_S. Summ-only's prompts are one event and its summary, so they fit
either window: it is measured once per length and reported under both.

The budget is the reference cases' tight budget (5% of 27,000 characters) at every length, so
a longer case is asked to keep its decisive facts in the same space; `frp_tight` is the factual
recall of DPM's decisions at that budget (200,000-token window), on one generated case per domain.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only
import matplotlib.pyplot as plt

from pipeline.bench.generate import DOMAINS, GenerationSpec, generate_cases
from pipeline.core.case import Case
from pipeline.core.events import Event, Trajectory
from pipeline.core.model import ModelBackend
from pipeline.core.run import ModelCall, RunResult, SummMemory, SummVariant, finish_summ, run_dpm, summ_step
from pipeline.core.scoring import frp
from pipeline.core.segments import DictSegmentStore
from pipeline.core.task import Budget
from pipeline.core.view import EMPTY_VIEW
from pipeline.core.window import Window
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.llm.latency import LatencyBackend

LENGTHS = (27_000, 100_000, 1_000_000, 10_000_000)
WINDOWS = (8_192, 200_000)
SEGMENT_TOKENS = 16_000  # DPM_SEGMENT_TOKENS' default
LATENCY_MS = 20
SUMM_CAP_S = 120.0
BUDGET = Budget(1_350)
FRP_LENGTHS = (27_000, 1_000_000)
TARGETS = {"redecide_tokens_pct": {"1000000": 20.0, "10000000": 5.0}, "frp_tight_gap": 0.05}


def long_case(chars: int, domain: str = "loan") -> Case:
    """One generated case of about `chars` characters (reference-size events: 82-96 at 27,000)."""
    events = (82, 96) if chars <= 28_000 else (chars // 300, chars // 280)
    spec = GenerationSpec(domains=(domain,), per_domain=1, chars=(chars, chars + chars // 20), events=events)
    return generate_cases(spec)[0]


def appended(trajectory: Trajectory) -> Trajectory:
    """The case with one more event: a routine note, as an agent appends after a decision."""
    last = trajectory.events[-1]
    note = Event(last.case, last.seq + 1, "note", "Servicing note: the file was reviewed again; no figure changed.")
    return Trajectory(trajectory.case, (*trajectory.events, note))


@dataclass(frozen=True)
class _Cost:
    calls: int
    tokens: int
    wall_s: float

    @classmethod
    def of(cls, calls: tuple[ModelCall, ...] | list[ModelCall], wall_s: float) -> _Cost:
        tokens = sum(c.response.usage.input_tokens + c.response.usage.output_tokens for c in calls)
        return cls(len(calls), tokens, round(wall_s, 3))


def _row(arch: str, window: int, chars: int, run: str, cost: _Cost | None, **extra: Any) -> dict[str, Any]:  # noqa: ANN401
    figures = {"calls": cost.calls, "tokens": cost.tokens, "wall_s": cost.wall_s} if cost else {}
    return {"arch": arch, "window_tokens": window, "chars": chars, "run": run, "finished": cost is not None,
            **figures, **extra}  # fmt: skip


def _timed(work: Callable[[], RunResult]) -> tuple[RunResult, float]:
    started = time.perf_counter()
    result = work()
    return result, time.perf_counter() - started


def dpm_rows(case: Case, chars: int, window_tokens: int, backend: ModelBackend) -> list[dict[str, Any]]:
    """DPM's first decision and its re-decision after one appended event, views reused between them."""
    window, views = Window(window_tokens, SEGMENT_TOKENS), DictSegmentStore()
    first, first_s = _timed(lambda: run_dpm(case.trajectory, case.task, BUDGET, backend, window=window, store=views))
    later = appended(case.trajectory)
    again, again_s = _timed(lambda: run_dpm(later, case.task, BUDGET, backend, window=window, store=views))
    return [
        _row("dpm", window_tokens, chars, "first", _Cost.of(first.calls, first_s), segments=len(first.segments),
             label=first.decision.label),
        _row("dpm", window_tokens, chars, "redecide", _Cost.of(again.calls, again_s),
             reused=sum(n.reused for n in again.segments), label=again.decision.label),
    ]  # fmt: skip


def summ_rows(case: Case, chars: int, backend: ModelBackend, cap_s: float) -> list[dict[str, Any]]:
    """Summ-only's fold over every event and its decision; then one more event folded and decided."""
    calls: list[ModelCall] = []

    def call(request: Any) -> Any:  # noqa: ANN401 - a ModelRequest in, a ModelResponse out
        response = backend.complete(request)
        calls.append(ModelCall(request, response))
        return response

    started = time.perf_counter()
    memory = SummMemory(EMPTY_VIEW)
    for index, event in enumerate(case.trajectory.events, start=1):
        if time.perf_counter() - started > cap_s:
            stopped = {"events_folded": index - 1, "events": len(case.trajectory), "cap_s": cap_s}
            return [_row("summ", w, chars, run, None, **stopped) for w in WINDOWS for run in ("first", "redecide")]
        memory = summ_step(memory, index, event, task=case.task, budget=BUDGET, variant=SummVariant.REWRITE, call=call)
    first = finish_summ(case.trajectory, case.task, BUDGET, backend, memory, calls=calls)
    first_cost = _Cost.of(first.calls, time.perf_counter() - started)
    later = appended(case.trajectory)
    calls.clear()
    started = time.perf_counter()
    memory = summ_step(memory, len(later), later.events[-1], task=case.task, budget=BUDGET, variant=SummVariant.REWRITE,
                       call=call)  # fmt: skip
    again = finish_summ(later, case.task, BUDGET, backend, memory, calls=calls)
    again_cost = _Cost.of(again.calls, time.perf_counter() - started)
    return [row for w in WINDOWS for row in (_row("summ", w, chars, "first", first_cost, label=first.decision.label),
                                              _row("summ", w, chars, "redecide", again_cost))]  # fmt: skip


def frp_tight(lengths: tuple[int, ...] = FRP_LENGTHS) -> dict[str, float]:
    """DPM's mean factual recall at BUDGET (200,000-token window), one generated case per domain and length."""
    backend, window = ExtractiveBackend(), Window(200_000, SEGMENT_TOKENS)
    means: dict[str, float] = {}
    for chars in lengths:
        scores = []
        for domain in DOMAINS:
            case = long_case(chars, domain)
            result = run_dpm(case.trajectory, case.task, BUDGET, backend, window=window)
            output = "\n".join((result.view_text, result.decision.rationale, result.decision.notice))
            scores.append(frp(case, output))
        means[str(chars)] = round(sum(scores) / len(scores), 4)
    return means


def measure(lengths: tuple[int, ...] = LENGTHS, cap_s: float = SUMM_CAP_S) -> dict[str, Any]:
    """The `long_horizon` section of the figures file."""
    backend = LatencyBackend(ExtractiveBackend(), LATENCY_MS)
    rows: list[dict[str, Any]] = []
    for chars in lengths:
        case = long_case(chars)
        print(
            f"  long_horizon: {case.trajectory.char_length:,} characters, {len(case.trajectory):,} events", flush=True
        )
        for window in WINDOWS:
            rows += dpm_rows(case, chars, window, backend)
        rows += summ_rows(case, chars, backend, cap_s)
    measured = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")  # a section may be measured apart from the others
    return {"rows": rows, "frp_tight": frp_tight(), "latency_ms": LATENCY_MS, "budget_chars": BUDGET.chars,
            "segment_tokens": SEGMENT_TOKENS, "summ_cap_s": cap_s, "targets": TARGETS,
            "measured": measured}  # fmt: skip


def redecide_share(section: dict[str, Any], window: int, chars: int) -> float:
    """A DPM re-decision's tokens as a share (%) of its first decision's, at one window and length."""
    tokens = {r["run"]: r["tokens"] for r in section["rows"]
              if r["arch"] == "dpm" and r["window_tokens"] == window and r["chars"] == chars}  # fmt: skip
    return 100.0 * float(tokens["redecide"]) / float(tokens["first"])


def plot(section: dict[str, Any], path: Path) -> None:
    """Tokens per decision against case length, both architectures, log-log."""
    figure, axes = plt.subplots(figsize=(7.5, 4.5))
    styles = {("dpm", "first"): "-o", ("dpm", "redecide"): "--o", ("summ", "first"): "-s", ("summ", "redecide"): "--s"}
    for (arch, run), style in styles.items():
        for window in WINDOWS if arch == "dpm" else WINDOWS[:1]:
            points = [(r["chars"], r["tokens"]) for r in section["rows"] if r["arch"] == arch and r["run"] == run
                      and r["window_tokens"] == window and r["finished"]]  # fmt: skip
            if not points:
                continue
            name = "DPM" if arch == "dpm" else "Summ-only"
            where = f", {window:,}-token window" if arch == "dpm" else ""
            label = f"{name} {'first decision' if run == 'first' else 're-decision after one event'}{where}"
            axes.plot(*zip(*points, strict=True), style, label=label, markersize=4)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("case length (characters of event text)")
    axes.set_ylabel("tokens per decision (in + out)")
    axes.set_title(f"Cost per decision, offline backend, budget {section['budget_chars']:,} characters")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=7)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
