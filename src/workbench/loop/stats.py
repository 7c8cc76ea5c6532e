"""Bootstrap confidence intervals over turns (:func:`scipy.stats.bootstrap`).

Arms run the same turns interleaved, so comparisons resample *turn indices* and keep each turn's
arms paired (``paired=True``): machine noise that hit one turn hits every arm's copy of it. Over
fewer than :data:`FEW_TURNS` turns an interval is labelled with its count wherever it is shown: a
percentile interval of a ratio over turns never reaches past the turns' own per-turn ratios (3 turns
have 10 distinct resamples), so over few turns it is narrower than its level says.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
from scipy import stats

RESAMPLES = 2000
LEVEL = 0.95
FEW_TURNS = 10  # turns below which a bootstrap CI is shown as "CI over n turns": too few to read as its level


@dataclass(frozen=True)
class Estimate:
    value: float
    low: float
    high: float
    n: int

    @property
    def few(self) -> bool:
        """Computed over fewer than :data:`FEW_TURNS` turns."""
        return self.n < FEW_TURNS

    def as_dict(self) -> dict:
        return {"value": self.value, "low": self.low, "high": self.high, "n": self.n, "few_turns": self.few}


def bootstrap(columns: Sequence[Sequence[float]], stat: Callable[..., float], *, resamples: int = RESAMPLES,
              level: float = LEVEL, seed: int = 0) -> Estimate:
    """``stat(*columns)`` with its paired percentile bootstrap interval (:func:`scipy.stats.bootstrap`, seeded):
    every column is resampled with the same turn indices. A statistic undefined on some resample (NaN) gives
    no interval, never one over the resamples where it happened to be defined."""
    cols = [np.asarray(c, dtype=float) for c in columns]
    n = len(cols[0])
    if n == 0 or any(c.ndim != 1 or len(c) != n for c in cols):
        raise ValueError("bootstrap needs paired, non-empty, one-dimensional columns of equal length")
    value = float(stat(*cols))
    if n == 1:
        return Estimate(value, float("nan"), float("nan"), 1)
    with warnings.catch_warnings():  # scipy warns of the NaN interval it returns; the NaN says it
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        ci = stats.bootstrap(cols, stat, paired=True, vectorized=False, n_resamples=resamples,
                             confidence_level=level, method="percentile", rng=np.random.default_rng(seed)).confidence_interval
    return Estimate(value, float(ci.low), float(ci.high), n)


def interval(e: Mapping) -> str:
    """An estimate as the loop shows it, ``1.5× [1.2, 1.8]``, with ``(CI over 3 turns)`` where its ``n`` is
    below :data:`FEW_TURNS` (an estimate dict without ``n`` is shown without it)."""
    text = f"{e['value']:.3g}× [{e['low']:.3g}, {e['high']:.3g}]"
    return text + few_turns(e.get("n"))


def few_turns(n: float | None) -> str:
    """`` (CI over 3 turns)`` where ``n`` is below :data:`FEW_TURNS` (too few to read the CI as its level), else
    nothing: the one wording of the label wherever the loop shows a CI."""
    return f" (CI over {n:g} turn{'s' if n != 1 else ''})" if n is not None and n < FEW_TURNS else ""


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


__all__ = ["Estimate", "FEW_TURNS", "bootstrap", "interval", "few_turns", "median_ratio", "percentile", "ratio_of_sums"]
