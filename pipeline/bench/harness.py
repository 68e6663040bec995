"""`dpm eval`: cases in, results.jsonl + stats.json + report.md + figures out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from pipeline.bench.analysis import analyse
from pipeline.bench.determinism import determinism_study
from pipeline.bench.evaluate import BudgetPoint, evaluate_case, resolve_budgets
from pipeline.bench.report import write_report
from pipeline.bench.via_kafka import evaluate_via_kafka
from pipeline.core.case import Case
from pipeline.core.run import SummVariant
from pipeline.core.scoring import Judge, KeywordJudge
from pipeline.core.task import Architecture
from pipeline.llm.factory import BackendSettings, make_backend
from pipeline.llm.judge import LlmJudge
from pipeline.settings import Settings


@dataclass(frozen=True)
class EvalConfig:
    archs: tuple[Architecture, ...] = (Architecture.DPM, Architecture.SUMM)
    budgets: tuple[str, ...] = ("tight", "moderate", "loose")
    backend: BackendSettings = field(default_factory=BackendSettings)
    judge: str = "keyword"
    judge_backend: BackendSettings | None = None
    jobs: int = 2
    seed: int = 20260420
    via_kafka: bool = False
    variant: SummVariant = SummVariant.REWRITE
    determinism_replays: int = 0
    rhos: tuple[float, ...] = ()


def make_judge(config: EvalConfig) -> Judge:
    """The keyword judge, or an LLM judge on its own backend (another model than the agent's, ideally)."""
    if config.judge == "keyword":
        return KeywordJudge()
    return LlmJudge(make_backend(config.judge_backend or config.backend))


def _case_rows(case: Case, points: list[BudgetPoint], config: EvalConfig) -> list[dict[str, Any]]:
    """One case's rows (runs in a worker process: builds its own backend and judge)."""
    return evaluate_case(case, points, config.archs, make_backend(config.backend), judge=make_judge(config),
                         variant=config.variant)  # fmt: skip


def _in_process(
    cases: Sequence[Case],
    points: dict[str, list[BudgetPoint]],
    config: EvalConfig,
    progress: Callable[[int, int], None],
) -> list[dict[str, Any]]:
    results: dict[str, list[dict[str, Any]]] = {}
    if config.jobs <= 1:
        for i, case in enumerate(cases, start=1):
            results[case.ref.key] = _case_rows(case, points[case.ref.key], config)
            progress(i, len(cases))
    else:
        with ProcessPoolExecutor(max_workers=config.jobs) as pool:
            futures = {pool.submit(_case_rows, c, points[c.ref.key], config): c.ref.key for c in cases}
            for done, future in enumerate(as_completed(futures), start=1):
                results[futures[future]] = future.result()
                progress(done, len(cases))
    return [row for case in cases for row in results[case.ref.key]]  # input order, whatever finished first


def run_eval(
    cases: Sequence[Case],
    out: Path,
    config: EvalConfig,
    *,
    say: Callable[[str], None],
    progress: Callable[[int, int], None],
) -> dict[str, Any]:
    """Runs every architecture over every case at every budget (and the studies asked for); writes the outputs."""
    out.mkdir(parents=True, exist_ok=True)
    specs = list(config.budgets) + [f"rho={rho:g}" for rho in config.rhos]
    points = resolve_budgets(specs, cases)
    if config.via_kafka:
        rows = evaluate_via_kafka(cases, points, config.archs, judge=make_judge(config), settings=Settings.from_env(),
                                  workdir=out, say=say, progress=progress)  # fmt: skip
    else:
        rows = _in_process(cases, points, config, progress)
    (out / "results.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    stats = analyse(rows, config.budgets, config.rhos, config.seed)
    if config.determinism_replays:
        first_budget = {c.ref.key: points[c.ref.key][0].budget for c in cases}
        stats["determinism"] = determinism_study(cases, first_budget, config.archs, make_backend(config.backend),
                                                 config.determinism_replays)  # fmt: skip
    backend = make_backend(config.backend)
    meta = {"domains": ", ".join(sorted({c.domain for c in cases})), "backend": backend.name, "model": backend.model,
            "judge": make_judge(config).name, "path": "kafka" if config.via_kafka else "in-memory log"}  # fmt: skip
    stats["meta"] = meta
    (out / "stats.json").write_bytes(orjson.dumps(stats, option=orjson.OPT_INDENT_2))
    write_report(stats, meta, out)
    return stats
