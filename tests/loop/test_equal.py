"""Equal work before equal time: which turns are compared, as a table of scored rows that would make the loop lie."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from workbench.loop import equal

RULE = equal.EqualWork()  # margin 0.25 σ


def row(arm, step=0, *, asked=10, got=10, finish="length", gap=0.0, stop=3.0):
    return {"arm": arm, "step": step, "max_tokens": asked, "decode_tokens": got, "finish": finish,
            "greedy_gap_sd": gap, "greedy_gap_at": 0 if gap is not None else None, "stop_gap_sd": stop}


@pytest.mark.parametrize("r, why", [
    (row("x"), None),  # every token the scorer's argmax
    (row("x", gap=0.2), None),  # a near-tie broken the other way: the same work
    (row("x", gap=0.3), "not-greedy"),  # a token greedy decoding would not pick
    (row("x", got=1), "less-work"),  # stopped after 1 token of 10
    (row("x", got=4, finish="stop", stop=0.0), None),  # the greedy stop: end of generation the scorer's top token
    (row("x", got=4, finish="stop", stop=0.1), "less-work"),  # a near-tie stop is not the greedy stop: it ends the work
    (row("x", asked=200, got=5, finish="stop", stop=0.2), "less-work"),  # 5 of 200 tokens timed as if 200 (issue 35.4)
    (row("x", got=4, finish="stop", stop=1.5), "less-work"),  # a stop greedy decoding would not make
    (row("x", got=4, finish="length", stop=0.0), "less-work"),  # cut short by a length, not a stop
    (row("x", gap=None, stop=None), "unscored"),
])
def test_which_turns_are_compared(r, why):
    got = equal.mark(pd.DataFrame([r]), RULE).iloc[0]
    assert got["excluded"] == why and bool(got["comparable"]) == (why is None)


def test_the_margin_is_stated_bounded_and_decides():
    lax = equal.EqualWork(margin_sd=0.5)
    assert equal.mark(pd.DataFrame([row("x", gap=0.4)]), lax).comparable.all()
    assert "within 0.5 σ" in lax.describe() and "within 0.25 σ" in RULE.describe()
    why = equal.mark(pd.DataFrame([row("x", gap=0.4)]), RULE).excluded_why.iloc[0]
    assert "0.40 σ below the scorer's top token" in why and "margin 0.25 σ" in why
    for bad in (float("nan"), -0.1, equal.MAX_MARGIN_SD):
        with pytest.raises(ValueError, match="margin_sd"):
            equal.EqualWork(margin_sd=bad)
    with pytest.raises(ValueError, match="max_failed_share"):
        equal.EqualWork(max_failed_share=1.5)


def test_an_arm_failing_more_than_the_share_is_disqualified_and_says_why():
    rows = [r for s in range(10) for r in (row("llamacpp", s), row("x", s, got=1 if s < 2 else 10))]
    marked = equal.mark(pd.DataFrame(rows), RULE)
    why = equal.disqualified(marked, "x", RULE)
    assert why and "2 of its 10 turns" in why and "less work" in why and "decoded 1 of the 10" in why
    assert equal.disqualified(marked, "llamacpp", RULE) is None
    assert equal.disqualified(marked, "x", equal.EqualWork(max_failed_share=0.2)) is None  # 20% ≤ 20%
    assert equal.common_turns(marked, ["llamacpp", "x"]) == list(range(2, 10))


def spec(step=0, *, gap=0.0, numeric=None):
    """A row of an arm verified in batches: ``numeric`` the batched-vs-sequential gap the scorer measured."""
    return row("llamacpp-spec", step, gap=gap) | {"numeric_gap_sd": numeric}


@pytest.mark.parametrize("rows, margin, compared", [
    ([row("llamacpp", gap=0.27)], 0.25, False),  # a plain arm: decoded as the scorer reads, the claim's margin
    ([spec(gap=0.27)], 0.25, False),  # no gap measured: the claim's margin
    ([spec(gap=0.27, numeric=0.27)], 0.52, True),  # its batches read it 0.27 σ off decode: a near-tie broken there
    ([spec(gap=0.27, numeric=0.27), spec(1, gap=0.3, numeric=0.01)], 0.52, True),  # the arm's largest gap, every turn
    ([spec(gap=0.6, numeric=0.05)], 0.30, False),  # off greedy in its own batches too: numerics do not excuse it
    ([spec(gap=0.6, numeric=0.6)], 0.25, False),  # past the cap: the claim's margin, and disqualified (below)
])
def test_a_batch_verified_arm_is_held_to_the_claims_margin_plus_its_measured_gap(rows, margin, compared):
    marked = equal.mark(pd.DataFrame(rows), RULE)
    assert marked.near_tie_margin_sd.iloc[0] == pytest.approx(margin)
    assert bool(marked.comparable.iloc[0]) == compared
    assert RULE.exploratory is None  # measured, not set: the claim's rule still


def test_the_calibration_is_capped_and_never_a_parameter():
    marked = equal.mark(pd.DataFrame([spec(s, gap=0.6, numeric=0.6 if s == 0 else 0.0) for s in range(10)]), RULE)
    why = equal.disqualified(marked, "llamacpp-spec", RULE)
    assert why and "0.60 σ" in why and f"{equal.NUMERIC_GAP_CAP_SD:g} σ" in why  # one turn past the cap is enough
    assert equal.NUMERIC_GAP_CAP_SD == 2 * equal.CLAIM_MARGIN_SD
    assert "numeric_gap_sd" not in {f.name for f in dataclasses.fields(equal.EqualWork)}  # no way to pass one in
    moved = equal.EqualWork(margin_sd=0.3)  # a user's margin is still exploratory, calibrated or not
    assert moved.exploratory and "margin_sd 0.3" in moved.exploratory
    assert equal.mark(pd.DataFrame([spec(gap=0.5, numeric=0.2)]), moved).near_tie_margin_sd.iloc[0] == pytest.approx(0.5)
    assert "batched-vs-sequential gap" in RULE.describe() and "at most 0.5 σ" in RULE.describe()


def test_output_match_is_the_shared_prefix_of_the_longer_output():
    assert equal.output_match([1, 2, 3, 4], [1, 2, 3, 4]) == 1.0
    assert equal.output_match([1, 2, 9, 9], [1, 2, 3, 4]) == 0.5
    assert equal.output_match([1], [1, 2, 3, 4]) == 0.25
    assert equal.output_match([], []) == 1.0


@pytest.mark.parametrize("names, ran, reference", [
    (["llamacpp-cold", "llamacpp", "llamacpp-spec", "trtllm"], None, "llamacpp"),  # `all`'s order: the plain in-process arm
    (["llamacpp-server", "llamacpp-server-spec"], None, "llamacpp-server"),  # no in-process llama.cpp in the run
    (["vllm", "vllm-spec"], None, "vllm"),
    (["vllm", "llamacpp-server", "llamacpp"], None, "llamacpp-server"),  # llama.cpp first, then the run's order
    (["llamacpp", "llamacpp-server", "llamacpp-server-spec"], ["llamacpp-server", "llamacpp-server-spec"],
     "llamacpp-server"),  # the first plain arm that ran
    (["trtllm", "llamacpp-spec", "llamacpp"], None, "llamacpp"),  # never the gate's subject
])
def test_the_reference_is_the_first_plain_arm_that_ran_llamacpp_first(names, ran, reference):
    work = equal.EqualWork().for_arms(names, "trtllm", ran)
    assert work.reference == reference and work.chosen_by == equal.CHOSEN and reference in work.describe()


def test_a_run_without_a_plain_arm_shows_its_outputs_against_none():
    work = equal.EqualWork().for_arms(["llamacpp-server-spec", "trtllm"], "trtllm")
    assert work.reference is None and "shown against" not in work.describe()


def test_a_declared_reference_is_kept_and_must_be_in_the_run():
    work = equal.EqualWork(reference="llamacpp-server").for_arms(["llamacpp", "llamacpp-server"], "trtllm", ["llamacpp"])
    assert work.reference == "llamacpp-server" and work.chosen_by == "declared"
    with pytest.raises(ValueError, match="--reference vllm is not one of the run's arms"):
        equal.EqualWork(reference="vllm").for_arms(["llamacpp"], "trtllm")
    # the subject alone needs none: nothing is compared, and the gate says why it did not run
    assert equal.EqualWork().for_arms(["trtllm"], "trtllm").reference is None
