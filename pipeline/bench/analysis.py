"""From results rows to statistics: paired comparisons per budget, the rho sweep, audit surface, cost."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from statistics import fmean
from typing import Any

from pipeline.bench.stats import paired

AXES = ("frp", "rcs", "eda", "crr")
EXTRA = ("citation_validity", "grounding_rate")


def _pairs(rows: Sequence[dict[str, Any]], budget: str, metric: str) -> tuple[list[float], list[float]]:
    by_case: dict[str, dict[str, float]] = defaultdict(dict)
    for row in rows:
        if row["budget"] == budget and row[metric] is not None:
            by_case[row["case_id"]][row["arch"]] = float(row[metric])
    both = [v for v in by_case.values() if {"dpm", "summ"} <= set(v)]
    return [v["dpm"] for v in both], [v["summ"] for v in both]


def compare_budget(rows: Sequence[dict[str, Any]], budget: str, seed: int) -> dict[str, Any]:
    """Paired DPM-vs-Summ statistics for every axis at one budget (metrics lacking pairs are omitted)."""
    chosen = [r for r in rows if r["budget"] == budget]
    result: dict[str, Any] = {"budget_chars_mean": fmean(r["budget_chars"] for r in chosen), "metrics": {}}
    for metric in AXES + EXTRA:
        dpm, summ = _pairs(rows, budget, metric)
        if dpm:
            result["metrics"][metric] = paired(dpm, summ, seed).as_dict()
    return result


def per_arch(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Audit surface, cost and latency per decision, per architecture (calls counted from audit records)."""
    summary: dict[str, dict[str, float]] = {}
    for arch in sorted({r["arch"] for r in rows}):
        mine = [r for r in rows if r["arch"] == arch]
        summary[arch] = {
            "decisions": len(mine),
            "audit_records_per_decision": fmean(r["audit_records"] for r in mine),
            "llm_calls_per_decision": fmean(r["llm_calls"] for r in mine),
            "tokens_per_decision": fmean(r["input_tokens"] + r["output_tokens"] for r in mine),
            "cost_usd_per_decision": fmean(r["cost_usd"] for r in mine),
            "wall_s_per_decision": fmean(r["wall_s"] for r in mine),
        }
    return summary


def crossover(sweep: Sequence[dict[str, Any]]) -> float | None:
    """The smallest swept rho from which DPM's mean delta over the four axes is positive at every larger rho."""
    ordered = sorted(sweep, key=lambda point: point["rho"])
    found = None
    for point in reversed(ordered):
        deltas = [point["metrics"][a]["delta"] for a in AXES if a in point["metrics"]]
        if deltas and fmean(deltas) > 0:
            found = point["rho"]
        else:
            break
    return found


def analyse(rows: Sequence[dict[str, Any]], budgets: Sequence[str], rhos: Sequence[float], seed: int) -> dict[str, Any]:
    """The whole stats.json body except the determinism study."""
    stats: dict[str, Any] = {
        "seed": seed,
        "n_cases": len({r["case_id"] for r in rows}),
        "budgets": {b: compare_budget(rows, b, seed) for b in budgets if any(r["budget"] == b for r in rows)},
        "per_arch": per_arch([r for r in rows if not r["budget"].startswith("rho=")]),
    }
    if rhos:
        sweep = [{"rho": rho, **compare_budget(rows, f"rho={rho:g}", seed)} for rho in rhos]
        stats["scaling"] = {"points": sweep, "crossover_rho": crossover(sweep)}
    return stats
