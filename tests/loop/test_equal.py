"""Equal work before equal time: which turns are compared, as a table of rows that would make the loop lie."""

from __future__ import annotations

import pandas as pd
import pytest

from workbench.loop import equal

RULE = equal.EqualWork()


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
    lax = equal.EqualWork(token_tolerance=0.2)
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
    assert equal.disqualified(marked, "x", equal.EqualWork(max_failed_share=0.2)) is None  # 20% ≤ 20%
    assert equal.common_turns(marked, ["llamacpp", "x"]) == list(range(2, 10))


def test_output_match_is_the_shared_prefix_of_the_longer_output():
    assert equal.output_match([1, 2, 3, 4], [1, 2, 3, 4]) == 1.0
    assert equal.output_match([1, 2, 9, 9], [1, 2, 3, 4]) == 0.5
    assert equal.output_match([1], [1, 2, 3, 4]) == 0.25
    assert equal.output_match([], []) == 1.0
