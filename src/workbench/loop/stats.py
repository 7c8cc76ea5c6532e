"""Bootstrap confidence intervals over turns.

Arms run the same turns interleaved, so comparisons resample *turn indices* and keep each turn's
arms paired: machine noise that hit one turn hits every arm's copy of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

RESAMPLES = 2000
LEVEL = 0.95


@dataclass(frozen=True)
class Estimate:
    value: float
    low: float
    high: float
    n: int

    def as_dict(self) -> dict:
        return {"value": self.value, "low": self.low, "high": self.high, "n": self.n}


def bootstrap(columns: Sequence[Sequence[float]], stat: Callable[..., float], *, resamples: int = RESAMPLES,
              level: float = LEVEL, seed: int = 0) -> Estimate:
    """Percentile bootstrap of ``stat(*columns)``; every column is resampled with the same turn indices."""
    cols = [np.asarray(c, dtype=float) for c in columns]
    n = len(cols[0])
    if n == 0 or any(len(c) != n for c in cols):
        raise ValueError("bootstrap needs paired, non-empty columns of equal length")
    value = float(stat(*cols))
    if n == 1:
        return Estimate(value, float("nan"), float("nan"), 1)
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    draws = np.array([stat(*(c[i] for c in cols)) for i in idx], dtype=float)
    lo, hi = np.nanpercentile(draws, [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
    return Estimate(value, float(lo), float(hi), n)


def ratio_of_sums(num: np.ndarray, den: np.ndarray) -> float:
    """Σ num / Σ den: a loop-time speed-up (reference time over arm time)."""
    d = den.sum()
    return float(num.sum() / d) if d > 0 else float("nan")


def median_ratio(num: np.ndarray, den: np.ndarray) -> float:
    """Median of per-turn ratios num/den."""
    ok = den > 0
    return float(np.median(num[ok] / den[ok])) if ok.any() else float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else float("nan")


__all__ = ["Estimate", "bootstrap", "median_ratio", "percentile", "ratio_of_sums"]
