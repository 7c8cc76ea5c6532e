"""Equal work before equal time: which turns are compared, as a table of rows that would make the loop lie."""

from __future__ import annotations

import pandas as pd
import pytest

from workbench.loop import equal

RULE = equal.EqualWork(reference="llamacpp")


def row(arm, step=0, *, asked=10, got=10, finish="length", match=1.0):
    return {"arm": arm, "step": step, "max_tokens": asked, "decode_tokens": got, "finish": finish,
            "output_match": match}


@pytest.mark.parametrize("rows, arm, why", [
    ([row("llamacpp"), row("x")], "x", None),
    ([row("llamacpp"), row("x", got=1)], "x", "less-work"),  # stopped after 1 token of 10
    ([row("llamacpp"), row("x", got=1, finish="stop")], "x", "less-work"),  # a stop the reference did not hit
    ([row("llamacpp", got=4, finish="stop"), row("x", got=4, finish="stop")], "x", None),  # a genuine shared stop
    ([row("llamacpp", got=4, finish="stop"), row("x", got=3, finish="stop")], "x", "less-work"),
    ([row("llamacpp", got=4, finish="stop"), row("llamacpp-spec", got=4, finish="stop", match=1.0)], "llamacpp", None),
    ([row("llamacpp"), row("x", match=0.9)], "x", "other-output"),  # full length, other tokens
    ([row("llamacpp", got=2), row("x")], "x", "reference-incomplete"),
    ([row("x")], "x", "no-reference"),
])
def test_which_turns_are_compared(rows, arm, why):
    marked = equal.mark(pd.DataFrame(rows), RULE)
    got = marked[marked.arm == arm].iloc[0]
    assert got["excluded"] == why and bool(got["comparable"]) == (why is None)


def test_a_declared_tolerance_admits_small_divergence_and_is_stated():
    lax = equal.EqualWork(reference="llamacpp", token_tolerance=0.2)
    marked = equal.mark(pd.DataFrame([row("llamacpp"), row("x", match=0.85)]), lax)
    assert marked.comparable.all()
    assert "within 20%" in lax.describe() and "token-identical" in RULE.describe()
    with pytest.raises(ValueError):
        equal.EqualWork(token_tolerance=float("nan"))
    with pytest.raises(ValueError):
        equal.EqualWork(max_failed_share=1.5)


def test_an_arm_failing_more_than_the_share_is_disqualified_and_says_why():
    rows = [r for s in range(10) for r in (row("llamacpp", s), row("x", s, got=1 if s < 2 else 10))]
    marked = equal.mark(pd.DataFrame(rows), RULE)
    why = equal.disqualified(marked, "x", RULE)
    assert why and "2 of its 10 turns" in why and "less work" in why and "decoded 1 of the 10" in why
    assert equal.disqualified(marked, "llamacpp", RULE) is None
    assert equal.disqualified(marked, "x", equal.EqualWork(reference="llamacpp", max_failed_share=0.2)) is None  # 20% ≤ 20%
    assert equal.common_turns(marked, ["llamacpp", "x"]) == list(range(2, 10))


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


@pytest.mark.parametrize("names, needs", [
    (["llamacpp-server-spec"], "add llamacpp-server"),
    (["vllm-spec", "llamacpp-spec"], "add vllm or llamacpp"),
    (["trtllm", "llamacpp-cold"], "add llamacpp"),  # the cold arm reuses nothing: not plain decode with reuse
])
def test_an_arm_set_without_a_plain_arm_names_the_one_to_add(names, needs):
    with pytest.raises(ValueError, match=needs) as e:
        equal.EqualWork().for_arms(names, "trtllm")
    assert "--reference" in str(e.value)


def test_a_declared_reference_is_kept_and_must_be_in_the_run():
    work = equal.EqualWork(reference="llamacpp-server").for_arms(["llamacpp", "llamacpp-server"], "trtllm", ["llamacpp"])
    assert work.reference == "llamacpp-server" and work.chosen_by == "declared"
    with pytest.raises(ValueError, match="--reference vllm is not one of the run's arms"):
        equal.EqualWork(reference="vllm").for_arms(["llamacpp"], "trtllm")
    # the subject alone needs none: nothing is compared, and the gate says why it did not run
    assert equal.EqualWork().for_arms(["trtllm"], "trtllm").reference is None


def test_without_its_reference_in_the_rows_nothing_is_compared():
    marked = equal.mark(pd.DataFrame([row("llamacpp-server"), row("x")]), RULE)
    assert set(marked.excluded) == {"no-reference"} and "llamacpp did not serve" in marked.excluded_why.iloc[0]
