"""The loop's bootstrap over turns (scipy.stats.bootstrap, paired and seeded) and how a CI over few turns is shown."""

from __future__ import annotations

import math

import numpy as np
import pytest

from workbench.loop import stats


def test_bootstrap_pairs_turns_and_brackets_the_estimate():
    rng = np.random.default_rng(1)
    ref = rng.uniform(1, 2, 40)
    arm = ref / 2 * rng.uniform(0.9, 1.1, 40)
    e = stats.bootstrap([ref, arm], stats.ratio_of_sums, seed=3)
    assert e.low <= e.value <= e.high and 1.8 < e.value < 2.2
    assert e == stats.bootstrap([ref, arm], stats.ratio_of_sums, seed=3)  # seeded: reproducible
    assert e != stats.bootstrap([ref, arm], stats.ratio_of_sums, seed=4)
    assert math.isnan(stats.bootstrap([[1.0], [2.0]], stats.ratio_of_sums).low)
    with pytest.raises(ValueError):
        stats.bootstrap([[1.0, 2.0], [1.0]], stats.ratio_of_sums)


def test_turns_are_resampled_in_pairs():
    """Turn lengths vary tenfold but each arm's copy of a turn is half the reference's: resampled in pairs the
    speed-up barely moves; resampled apart, the turns' own spread would swamp it."""
    rng = np.random.default_rng(2)
    ref = rng.uniform(1, 10, 30)
    arm = ref / 2 * rng.uniform(0.99, 1.01, 30)
    e = stats.bootstrap([ref, arm], stats.ratio_of_sums)
    assert 1.98 < e.low < e.value < e.high < 2.02
    apart = [stats.ratio_of_sums(ref[rng.integers(0, 30, 30)], arm[rng.integers(0, 30, 30)]) for _ in range(200)]
    assert np.ptp(apart) > 10 * (e.high - e.low)


def test_a_sample_with_no_spread_has_its_value_as_both_bounds():
    e = stats.bootstrap([[2.0] * 5, [1.0] * 5], stats.ratio_of_sums)
    assert (e.value, e.low, e.high) == (2.0, 2.0, 2.0)


def test_a_statistic_undefined_on_some_resamples_has_no_interval():
    """The hand-written bootstrap dropped NaN resamples (``nanpercentile``): an interval over the resamples where
    the statistic happened to be defined."""
    e = stats.bootstrap([[1.0, 2.0, 3.0], [0.0, 0.0, 3.0]], stats.median_ratio)
    assert e.value == 1.0 and math.isnan(e.low) and math.isnan(e.high)


def test_a_column_of_columns_is_refused():
    with pytest.raises(ValueError, match="one-dimensional"):
        stats.bootstrap([np.ones((3, 2)), np.ones((3, 2))], stats.ratio_of_sums)


@pytest.mark.parametrize("n, label", [(2, "(CI over 2 turns)"), (3, "(CI over 3 turns)"), (9, "(CI over 9 turns)"),
                                      (10, None), (40, None), (None, None)])
def test_a_ci_over_few_turns_is_labelled_with_its_count(n, label):
    e = {"value": 0.967, "low": 0.851, "high": 1.01} | ({"n": n} if n is not None else {})
    shown = stats.interval(e)
    assert shown.startswith("0.967× [0.851, 1.01]")
    assert (label in shown) if label else "CI over" not in shown
    if n is not None:
        assert stats.Estimate(1.0, 0.9, 1.1, n).as_dict()["few_turns"] is (label is not None)
