"""Per shape, what the requests measured: the engine-read hit rate (its ``cached_tokens`` over prompt tokens)
beside the workbench-computed best placement, TTFT p50/p95 and throughput (timed by the gateway), and the gain
of one shape over another with 95% bootstrap intervals (:func:`scipy.stats.bootstrap`, paired: every shape
replays the same requests, so request *k* of one shape is paired with request *k* of the other)."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 2000


def _ci(stat: Callable[..., float], *samples: np.ndarray, seed: int = 0) -> tuple[float, float, float]:
    """The statistic and its paired percentile bootstrap interval (the loop's, :func:`workbench.loop.stats.bootstrap`);
    a degenerate sample (every resample the same) or an undefined interval gives the value as both bounds."""
    value = float(stat(*samples))
    if len(samples[0]) < 2 or all(np.ptp(s) == 0 for s in samples):
        return value, value, value
    from ..loop.stats import bootstrap  # here: the loop package imports scipy.stats (seconds), which a process
    # that only reads the routing probe's declarations (a notebook drawing its figures) never needs

    e = bootstrap(samples, stat, resamples=RESAMPLES, level=CONFIDENCE, seed=seed)
    return (value, e.low, e.high) if np.isfinite(e.low) and np.isfinite(e.high) else (value, value, value)


def _rate(cached: np.ndarray, prompt: np.ndarray) -> float:
    return float(cached.sum() / prompt.sum()) if prompt.sum() else 0.0


def shape_rows(rows: Sequence[dict]) -> list[dict]:
    """One row per shape: requests, engine-read hit rate with its interval over requests, best placement,
    TTFT p50/p95 (with the p50's interval), end-to-end p50, throughput (requests over the shape's wall time, summed
    over repeats; ``done_s``: when the request's wave completed, since its shape started)."""
    out = []
    for shape in dict.fromkeys(r["shape"] for r in rows):
        mine = [r for r in rows if r["shape"] == shape]
        cached = np.array([r["cached_tokens"] or 0 for r in mine], float)
        prompt = np.array([r["prompt_tokens"] for r in mine], float)
        ttft = np.array([r["ttft_s"] for r in mine], float)
        rate, lo, hi = _ci(_rate, cached, prompt)
        p50, p50_lo, p50_hi = _ci(np.median, ttft)
        wall = sum(max(x["done_s"] for x in mine if x["repeat"] == k) for k in {r["repeat"] for r in mine})
        out.append({"shape": shape, "requests": len(mine), "engine_hit_rate": rate, "hit_ci_low": lo, "hit_ci_high": hi,
                    "best_hit_rate": _rate(np.array([r["best_tokens"] for r in mine], float), prompt),
                    "predicted_hit_rate": _rate(np.array([r["predicted_tokens"] or 0 for r in mine], float), prompt),
                    "ttft_p50_s": p50, "ttft_p50_ci_low": p50_lo, "ttft_p50_ci_high": p50_hi,
                    "ttft_p95_s": float(np.percentile(ttft, 95)),
                    "e2e_p50_s": float(np.median([r["e2e_s"] for r in mine])),
                    "requests_per_s": len(mine) / wall if wall > 0 else None,
                    "retried": sum(1 for r in mine if r.get("retried_from"))})
    return out


def paired(rows: Sequence[dict], a: str, b: str) -> dict:
    """Shape ``a`` against shape ``b`` on the same requests: the engine-read hit-rate gain (a − b, with its
    interval) and the TTFT speed-up (b's median over a's, with its interval)."""
    def key(r: dict) -> tuple:
        return r["repeat"], r["session"], r["turn"]

    left = {key(r): r for r in rows if r["shape"] == a}
    right = {key(r): r for r in rows if r["shape"] == b}
    keys = sorted(left.keys() & right.keys())
    if not keys:
        raise ValueError(f"shapes {a} and {b} share no request")
    ca = np.array([left[k]["cached_tokens"] or 0 for k in keys], float)
    cb = np.array([right[k]["cached_tokens"] or 0 for k in keys], float)
    prompt = np.array([left[k]["prompt_tokens"] for k in keys], float)
    ta = np.array([left[k]["ttft_s"] for k in keys], float)
    tb = np.array([right[k]["ttft_s"] for k in keys], float)
    gain = _ci(lambda x, y, p: _rate(x, p) - _rate(y, p), ca, cb, prompt)
    speedup = _ci(lambda x, y: float(np.median(y) / np.median(x)), ta, tb)
    return {"shape": a, "against": b, "pairs": len(keys), "hit_gain": gain[0], "hit_gain_ci_low": gain[1],
            "hit_gain_ci_high": gain[2], "ttft_speedup": speedup[0], "ttft_speedup_ci_low": speedup[1],
            "ttft_speedup_ci_high": speedup[2]}
