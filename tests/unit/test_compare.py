"""`dpm compare`'s arithmetic: agreement over triggers decided by both, accuracy against trigger labels."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.compare import compare


def _decision(trigger: str, arch: str, label: str | None, calls: int) -> dict[str, Any]:
    return {
        "decision_id": f"{trigger}:{arch}",
        "decision": {"label": label},
        "llm_calls": calls,
        "usage": {"input_tokens": 100 * calls, "output_tokens": 10 * calls},
        "latency_s": 0.1 * calls,
        "cost_usd": 0.001 * calls,
    }


def test_agreement_accuracy_and_costs() -> None:
    decisions = {
        d["decision_id"]: d
        for d in (
            _decision("t1", "dpm", "DENY", 2), _decision("t1", "summ", "DENY", 91),
            _decision("t2", "dpm", "APPROVE", 2), _decision("t2", "summ", "DENY", 91),
            _decision("t3", "dpm", "APPROVE", 2), _decision("t3", "summ", None, 91),
            _decision("t4", "dpm", "APPROVE", 2),  # decided by one architecture only: not compared
        )
    }  # fmt: skip
    triggers = {"t1": {"label": "DENY"}, "t2": {"label": "APPROVE"}, "t3": {}}
    result = compare(decisions, triggers)
    assert result.pairs == 3
    assert result.agreement == pytest.approx(1 / 3)
    dpm, summ = result.per_arch
    assert (dpm.architecture, dpm.accuracy, dpm.labelled, dpm.mean_calls) == ("dpm", 1.0, 2, 2)
    assert (summ.accuracy, summ.failures, summ.mean_calls) == (0.5, 1, 91)
    assert summ.total_cost_usd == pytest.approx(0.273)
