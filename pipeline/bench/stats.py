"""Paired statistics with SciPy: permutation tests, bootstrap CIs of the mean delta, Cohen's h."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats

RESAMPLES = 10_000


@dataclass(frozen=True)
class PairedComparison:
    """DPM against Summ-only on one metric at one budget, over paired cases."""

    n: int
    mean_dpm: float
    mean_summ: float
    delta: float
    p_value: float
    ci_low: float
    ci_high: float
    cohens_h: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def cohens_h(p1: float, p2: float) -> float:
    """Effect size between two proportions: 2 asin sqrt(p1) - 2 asin sqrt(p2)."""
    a, b = (min(1.0, max(0.0, p)) for p in (p1, p2))
    return 2 * math.asin(math.sqrt(a)) - 2 * math.asin(math.sqrt(b))


def _mean_delta(x: np.ndarray, y: np.ndarray, axis: int = -1) -> Any:  # noqa: ANN401 - numpy scalar or array
    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


def paired(dpm: Sequence[float], summ: Sequence[float], seed: int) -> PairedComparison:
    """Two-sided paired permutation test (10,000 resamples, seeded) and paired bootstrap 95% CI."""
    x, y = np.asarray(dpm, dtype=float), np.asarray(summ, dtype=float)
    if len(x) != len(y) or len(x) == 0:
        raise ValueError("paired samples must be non-empty and of equal length")
    delta = float(np.mean(x) - np.mean(y))
    if len(x) < 2 or np.allclose(x, y):
        p_value, low, high = 1.0, delta, delta
    else:
        test = stats.permutation_test(
            (x, y),
            _mean_delta,
            permutation_type="samples",
            n_resamples=RESAMPLES,
            alternative="two-sided",
            rng=np.random.default_rng(seed),
            vectorized=True,
        )
        ci = stats.bootstrap(
            (x, y),
            _mean_delta,
            paired=True,
            n_resamples=RESAMPLES,
            confidence_level=0.95,
            rng=np.random.default_rng(seed),
            vectorized=True,
            method="percentile",
        ).confidence_interval
        p_value, low, high = float(test.pvalue), float(ci.low), float(ci.high)
    return PairedComparison(
        n=len(x),
        mean_dpm=float(np.mean(x)),
        mean_summ=float(np.mean(y)),
        delta=delta,
        p_value=p_value,
        ci_low=low,
        ci_high=high,
        cohens_h=cohens_h(float(np.mean(x)), float(np.mean(y))),
    )
