"""capacity.budget_policy: graded by overshoot over a fixed set of budgets, every verdict of the rule."""

from __future__ import annotations

from workbench.probes.capacity import BUDGETS, Params, _verdict


def test_llamacpp_rounds_non_aligned_budgets_up_and_is_graded_partial(run_probe):
    f = run_probe("capacity.budget_policy")
    rows = {r["budget_tokens"]: r for r in f.evidence["rows"]}
    assert set(rows) == set(BUDGETS)
    assert rows[256]["measured_capacity_tokens"] == 256
    assert rows[300]["measured_capacity_tokens"] == 512  # llama.cpp pads n_ctx to 256
    assert f.verdict == "partial" and f.metric("max_overshoot") > 0.7
    assert f.metrics["measured_capacity_tokens"]["source"] == "engine"
    assert "kv_buffer_bytes" not in f.metrics  # a log line rounded to 0.01 MiB is not an engine reading


def _row(budget, measured):
    return {"budget_bytes": budget * 256, "budget_tokens": budget, "measured_capacity_tokens": measured,
            "kv_bytes_per_token": 256, "measured_by": "filled", "log_kv_buffer_bytes_rounded": None,
            "over_budget_bytes": (measured - budget) * 256, "capacity_error": (measured - budget) / budget}


def test_rule_returns_each_of_its_verdicts():
    p = Params()
    assert _verdict([_row(256, 256), _row(1000, 1000)], p).verdict == "refuted"
    assert _verdict([_row(256, 256), _row(300, 512)], p).verdict == "partial"
    assert _verdict([_row(256, 256), _row(1000, 600)], p).verdict == "confirmed"
    assert _verdict([_row(256, 256), _row(1000, 1024)], p).verdict == "refuted"  # +2.4 % is within tolerance
