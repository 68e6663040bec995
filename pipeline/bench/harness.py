"""The in-process evaluation: every architecture over every case at every budget, in parallel processes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from pipeline.bench.evaluate import BudgetPoint, evaluate_case
from pipeline.config.settings import ModelSettings
from pipeline.core.case import Case
from pipeline.core.run import SummVariant
from pipeline.core.scoring import Judge, KeywordJudge
from pipeline.core.task import Architecture
from pipeline.llm.judge import LlmJudge
from pipeline.llm.registry import make_backend


@dataclass(frozen=True)
class EvalConfig:
    archs: tuple[Architecture, ...] = (Architecture.DPM, Architecture.SUMM)
    budgets: tuple[str, ...] = ("tight", "moderate", "loose")
    backend: ModelSettings = field(default_factory=lambda: ModelSettings.model_validate({}))
    judge: str = "keyword"
    judge_backend: ModelSettings | None = None
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
                         variant=config.variant, layout=config.backend.prompt_layout)  # fmt: skip


def evaluate_in_process(
    cases: Sequence[Case],
    points: dict[str, list[BudgetPoint]],
    config: EvalConfig,
    progress: Callable[[int, int], None],
) -> list[dict[str, Any]]:
    """Rows for every (case, budget, arch) through the in-memory log, in input order."""
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
