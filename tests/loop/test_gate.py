"""The entry.step_function rule: every verdict it can give, and the bootstrap it reads."""

from __future__ import annotations

import math

import numpy as np
import pytest

from workbench import claims
from workbench.loop import gate, stats


def est(value, low, high):
    return {"value": value, "low": low, "high": high}


@pytest.mark.parametrize("speedup, on_target, verdict", [
    (est(3.0, 2.2, 3.5), True, "confirmed"),
    (est(3.0, 2.2, 3.5), False, "inconclusive"),  # off target a win is no certification
    (est(1.2, 1.0, 1.4), True, "refuted"),
    (est(2.1, 1.8, 2.5), True, "inconclusive"),  # the interval straddles 2×
    (est(2.5, float("nan"), float("nan")), True, "inconclusive"),
])
def test_gate_verdicts(speedup, on_target, verdict):
    out = gate.decide(gate.GateRule(), speedup, None, "llamacpp-spec", on_target)
    assert out.verdict == verdict


def test_gate_is_unresolved_without_the_subject_or_a_reference():
    out = gate.decide(gate.GateRule(), None, "tensorrt_llm is not installed", "llamacpp", False)
    assert out.verdict == "not-run" and "tensorrt_llm" in out.reason
    assert gate.decide(gate.GateRule(), est(3, 3, 3), None, None, True).verdict == "not-run"


def test_rule_is_a_parameter():
    lenient = gate.GateRule(min_speedup=1.1)
    assert gate.decide(lenient, est(1.5, 1.2, 1.8), None, "llamacpp", True).verdict == "confirmed"
    point = gate.GateRule(bound="value")
    assert gate.decide(point, est(2.1, 1.8, 2.5), None, "llamacpp", True).verdict == "confirmed"
    with pytest.raises(ValueError):
        gate.GateRule(bound="median")
    assert claims.get(gate.CLAIM).section == "entry"


def test_bootstrap_pairs_turns_and_brackets_the_estimate():
    rng = np.random.default_rng(1)
    ref = rng.uniform(1, 2, 40)
    arm = ref / 2 * rng.uniform(0.9, 1.1, 40)
    e = stats.bootstrap([ref, arm], stats.ratio_of_sums, seed=3)
    assert e.low <= e.value <= e.high and 1.8 < e.value < 2.2
    assert e == stats.bootstrap([ref, arm], stats.ratio_of_sums, seed=3)  # seeded: reproducible
    assert math.isnan(stats.bootstrap([[1.0], [2.0]], stats.ratio_of_sums).low)
    with pytest.raises(ValueError):
        stats.bootstrap([[1.0, 2.0], [1.0]], stats.ratio_of_sums)
