"""Paired statistics: an exact sign-flip permutation test, SciPy's paired bootstrap CI, Cohen's h.

The permutation test flips the signs of the paired differences: all 2^n flips up to n = 16 (exact),
a seeded Monte Carlo sample above. Flipped sums are compared with a tolerance, so a difference that
floating point rounds a little smaller is not counted as less extreme than the observed one, and the
p-value is never below one over the number of permutations. Each result says which method it used.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats

RESAMPLES = 10_000
EXACT_UP_TO = 16  # 2^16 = 65,536 sign flips: enumerated in one vectorized product
_TOLERANCE = 1e-9


@dataclass(frozen=True)
class SignFlipTest:
    """A two-sided paired permutation test's p-value and how it was computed."""

    p_value: float
    method: str  # "exact" (every sign flip) or "monte-carlo" (seeded random flips)
    permutations: int


def sign_flip_test(differences: Sequence[float], seed: int, resamples: int = RESAMPLES) -> SignFlipTest:
    """Two-sided test of a zero mean paired difference, by flipping the signs of the differences."""
    d = np.asarray(differences, dtype=float)
    n = len(d)
    observed = abs(float(d.sum()))
    tolerance = _TOLERANCE * max(1.0, float(np.abs(d).sum()))
    if n <= EXACT_UP_TO:
        flips = 1 - 2 * ((np.arange(2**n)[:, None] >> np.arange(n)) & 1)  # every sign vector, identity first
        sums = np.abs(flips @ d)
        return SignFlipTest(float(np.mean(sums >= observed - tolerance)), "exact", 2**n)
    rng = np.random.default_rng(seed)
    flips = rng.choice(np.array([-1.0, 1.0]), size=(resamples, n))
    extreme = int(np.sum(np.abs(flips @ d) >= observed - tolerance))
    return SignFlipTest((extreme + 1) / (resamples + 1), "monte-carlo", resamples)


@dataclass(frozen=True)
class PairedComparison:
    """DPM against Summ-only on one metric at one budget, over paired cases."""

    n: int
    mean_dpm: float
    mean_summ: float
    delta: float
    p_value: float
    p_method: str
    permutations: int
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
    """Two-sided sign-flip permutation test and paired bootstrap 95% CI (10,000 seeded resamples)."""
    x, y = np.asarray(dpm, dtype=float), np.asarray(summ, dtype=float)
    if len(x) != len(y) or len(x) == 0:
        raise ValueError("paired samples must be non-empty and of equal length")
    delta = float(np.mean(x) - np.mean(y))
    test = sign_flip_test(x - y, seed)
    if len(x) < 2 or np.allclose(x, y):
        low, high = delta, delta
    else:
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
        low, high = float(ci.low), float(ci.high)
    return PairedComparison(
        n=len(x),
        mean_dpm=float(np.mean(x)),
        mean_summ=float(np.mean(y)),
        delta=delta,
        p_value=test.p_value,
        p_method=test.method,
        permutations=test.permutations,
        ci_low=low,
        ci_high=high,
        cohens_h=cohens_h(float(np.mean(x)), float(np.mean(y))),
    )
