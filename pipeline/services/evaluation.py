"""`dpm eval`: cases in, results.jsonl + stats.json + report.md + figures out (in-process or through Kafka)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from pipeline.bench.analysis import analyse
from pipeline.bench.determinism import determinism_study
from pipeline.bench.evaluate import resolve_budgets
from pipeline.bench.harness import EvalConfig, evaluate_in_process, make_judge
from pipeline.bench.report import write_report
from pipeline.config.settings import Settings
from pipeline.core.case import Case
from pipeline.llm.registry import make_backend
from pipeline.services.evaluation_kafka import evaluate_via_kafka


def run_eval(
    cases: Sequence[Case],
    out: Path,
    config: EvalConfig,
    settings: Settings,
    *,
    say: Callable[[str], None],
    progress: Callable[[int, int], None],
) -> dict[str, Any]:
    """Runs every architecture over every case at every budget (and the studies asked for); writes the outputs."""
    out.mkdir(parents=True, exist_ok=True)
    specs = list(config.budgets) + [f"rho={rho:g}" for rho in config.rhos]
    points = resolve_budgets(specs, cases)
    if config.via_kafka:
        rows = evaluate_via_kafka(cases, points, config.archs, judge=make_judge(config), settings=settings,
                                  workdir=out, say=say, progress=progress)  # fmt: skip
    else:
        rows = evaluate_in_process(cases, points, config, progress)
    (out / "results.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    stats = analyse(rows, config.budgets, config.rhos, config.seed)
    backend = make_backend(config.backend)
    if config.determinism_replays:
        first_budget = {c.ref.key: points[c.ref.key][0].budget for c in cases}
        stats["determinism"] = determinism_study(cases, first_budget, config.archs, backend,
                                                 config.determinism_replays,
                                                 layout=config.backend.prompt_layout)  # fmt: skip
    meta = {"domains": ", ".join(sorted({c.domain for c in cases})), "backend": backend.name, "model": backend.model,
            "judge": make_judge(config).name, "path": "kafka" if config.via_kafka else "in-memory log"}  # fmt: skip
    stats["meta"] = meta
    (out / "stats.json").write_bytes(orjson.dumps(stats, option=orjson.OPT_INDENT_2))
    write_report(stats, meta, out)
    return stats
