"""Per-shape summaries and the paired gain, on rows shaped as the workload writes them."""

from __future__ import annotations

import pytest

from workbench.gateway.measure import paired, shape_rows


def _rows(shape: str, cached: list[int], ttft: list[float], repeat: int = 0) -> list[dict]:
    return [{"shape": shape, "repeat": repeat, "session": i % 3, "turn": i // 3, "prompt_tokens": 100,
             "cached_tokens": c, "predicted_tokens": c, "best_tokens": 96, "ttft_s": t, "e2e_s": t * 2,
             "done_s": 1.0 + i, "retried_from": None} for i, (c, t) in enumerate(zip(cached, ttft))]


def test_a_shape_row_reads_the_hit_rate_from_the_engine_counts_and_the_best_from_the_workbench():
    rows = _rows("kv-exact", [0, 64, 96, 96], [0.4, 0.2, 0.1, 0.1])
    (s,) = shape_rows(rows)
    assert s["engine_hit_rate"] == 256 / 400 and s["best_hit_rate"] == 384 / 400
    assert s["hit_ci_low"] <= s["engine_hit_rate"] <= s["hit_ci_high"]
    assert s["ttft_p50_s"] == pytest.approx(0.15) and s["requests_per_s"] == 4 / 4.0


def test_the_paired_gain_has_an_interval_above_zero_when_every_request_gains():
    rows = (_rows("kv-exact", [64, 96, 96, 96, 64, 96], [0.1] * 6)
            + _rows("round-robin", [0, 32, 64, 32, 0, 64], [0.3] * 6))
    g = paired(rows, "kv-exact", "round-robin")
    assert g["pairs"] == 6 and g["hit_gain"] > 0 and g["hit_gain_ci_low"] > 0
    assert g["ttft_speedup"] == g["ttft_speedup_ci_low"] == pytest.approx(3.0)  # no spread: the value, both bounds


def test_no_gain_is_an_interval_of_zero():
    rows = _rows("kv-exact", [0, 32, 64], [0.2, 0.3, 0.1]) + _rows("least-load", [0, 32, 64], [0.2, 0.2, 0.2])
    g = paired(rows, "kv-exact", "least-load")
    assert (g["hit_gain"], g["hit_gain_ci_low"], g["hit_gain_ci_high"]) == (0.0, 0.0, 0.0)
