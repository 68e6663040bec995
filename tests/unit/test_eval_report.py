"""report.md opens with what won, by how much, where nothing did and why; axes spelled out; zero cost explained."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.bench.report import write_report

META = {"domains": "loan", "backend": "extractive", "model": "extractive-v1", "judge": "keyword", "path": "memory"}


def _metric(dpm: float, summ: float, p: float) -> dict[str, Any]:
    return {"mean_dpm": dpm, "mean_summ": summ, "delta": dpm - summ, "ci_low": dpm - summ - 0.1,
            "ci_high": dpm - summ + 0.1, "p_value": p, "p_method": "exact", "cohens_h": 0.0, "n": 10}  # fmt: skip


def _stats(tight: dict[str, dict[str, Any]], cost: float = 0.0) -> dict[str, Any]:
    arch = {"decisions": 10, "audit_records_per_decision": 2.0, "llm_calls_per_decision": 2.0,
            "tokens_per_decision": 3000.0, "cost_usd_per_decision": cost, "wall_s_per_decision": 0.05}  # fmt: skip
    return {"n_cases": 10, "seed": 7, "budgets": {"tight": {"budget_chars_mean": 1338, "metrics": tight}},
            "per_arch": {"dpm": arch, "summ": {**arch, "llm_calls_per_decision": 90.0}}}  # fmt: skip


def test_the_headline_names_the_winner_the_margin_and_where_there_was_none(tmp_path: Path) -> None:
    stats = _stats({"frp": _metric(0.9, 0.4, 0.002), "rcs": _metric(0.8, 0.75, 0.6),
                    "eda": _metric(1.0, 1.0, 1.0), "crr": _metric(0.9, 0.9, 1.0)})  # fmt: skip
    report = write_report(stats, META, tmp_path).read_text()
    assert report.index("## Headline") < report.index("## Setup") < report.index("## Four axes by budget")
    assert "DPM on FRP at the tight budget (0.900 against 0.400, delta +0.500, p = 0.002)" in report
    assert (
        "No significant difference on RCS at tight, EDA at tight, CRR at tight: differences there are within" in report
    )
    for axis in ("FRP, factual recall", "RCS, reasoning coherence", "EDA, decision accuracy", "CRR, compliance"):
        assert axis in report
    assert "Cost is 0 and not drawn" in report
    assert (tmp_path / "per_arch.png").read_bytes().startswith(b"\x89PNG")


def test_identical_scores_are_called_what_they_are(tmp_path: Path) -> None:
    stats = _stats({a: _metric(1.0, 1.0, 1.0) for a in ("frp", "rcs", "eda", "crr")}, cost=0.002)
    report = write_report(stats, META, tmp_path).read_text()
    assert "Significant differences: none." in report
    assert "both scored 1.000 everywhere: these cases do not separate the architectures" in report
    assert "Cost is the provider's list price" in report
