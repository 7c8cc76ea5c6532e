"""The gates G1–G3 as rules: every verdict each returns, as tables over rows shaped as the measurement writes them
(the same rules on real engines' rows: tests/certify/test_gates_real.py)."""

from __future__ import annotations

import math

import pytest

from workbench.certify import gates

C, B = gates.CANDIDATE, gates.BASELINE
LADDER = (8192, 16384, 32768)


BUDGET = 4 << 20


def serve(arm, role, tier, served=True, capacity=None, refused=None, quality="passed", needs=None):
    """A serve row: ``capacity`` the pool the engine sized from the budget itself (vLLM's own statement), ``needs``
    (tier, bytes) the KV buffer the engine states for the next tier (llama.cpp's), ``quality`` its cell's A2."""
    row = {"kind": "serve", "arm": arm, "role": role, "tier": tier, "served": served, "budget_bytes": BUDGET,
           "engine_capacity_tokens": capacity, "capacity_from": "engine" if capacity is not None else None,
           "refused_by": refused, "quality": quality}
    if needs:
        row |= {"next_tier": needs[0], "next_tier_kv_bytes": needs[1], "next_tier_kv_bytes_from": "its load log"}
    return row


def timed(arm, role, tier, runs, first=None, prefill=None, turn=None, served=True, speculation="none", tokens=128):
    """``runs`` rows of one arm at one tier; ``first`` the first-output time of each (a number or a list);
    ``tokens`` the tokens each delivered of its output cap (128)."""
    def at(x, i):
        return x[i] if isinstance(x, (list, tuple)) else x
    return [{"kind": "timed", "arm": arm, "role": role, "tier": tier, "run": i, "served": served,
             "first_output_s": at(first, i), "prefill_s": at(prefill if prefill is not None else first, i),
             "turn_s": at(turn if turn is not None else first, i), "speculation": speculation, "output_cap": 128,
             "decode_tokens": at(tokens, i)} for i in range(runs)]


def a2(arm, role, status="passed"):
    """The arm's quality smoke (A2) on its timed cell, as the measurement records it."""
    return [{"kind": "a2", "arm": arm, "role": role, "status": status, "equal": status == "passed"}]


TIER = gates.TierRule(budget_bytes=BUDGET)


@pytest.mark.parametrize("rows, verdict", [
    # the candidate serves 32k where no llama.cpp profile does, each profile's engine saying it holds less
    ([serve("cand", C, 32768, capacity=40000), serve("llama:f16", B, 16384, capacity=16384),
      serve("llama:q8_0", B, 16384, capacity=30840)], "confirmed"),
    # … llama.cpp's own statement of the KV buffer it allocates for the next tier, over the budget
    ([serve("cand", C, 32768, capacity=40000), serve("llama:f16", B, 16384, needs=(32768, BUDGET * 2)),
      serve("llama:q4_0", B, 16384, needs=(32768, BUDGET + 1))], "confirmed"),
    # … but one whose next tier fits the budget by its own statement did not refuse it
    ([serve("cand", C, 32768, capacity=40000), serve("llama:q4_0", B, 16384, needs=(32768, BUDGET))], "inconclusive"),
    # … but a profile whose engine said nothing of its limit: no refusal read, no verdict
    ([serve("cand", C, 32768, capacity=40000), serve("llama:f16", B, 16384)], "inconclusive"),
    # the candidate's engine holds less: it serves no tier the baseline cannot
    ([serve("cand", C, 8192, capacity=8159), serve("llama:f16", B, 16384, capacity=16384)], "refuted"),
    ([serve("cand", C, 16384, capacity=20000), serve("llama:f16", B, 16384, capacity=16384)], "refuted"),
    # both at the ladder's top: no limit found
    ([serve("cand", C, 32768, capacity=99999), serve("llama:f16", B, 32768, capacity=99999)], "inconclusive"),
    # neither serves the smallest tier
    ([serve("cand", C, 8192, False, capacity=100, refused="engine"),
      serve("llama:f16", B, 8192, False, capacity=100, refused="engine")], "inconclusive"),
    # the candidate's limit not read from its engine: no refusal, no capacity
    ([serve("cand", C, 8192), serve("llama:f16", B, 16384, capacity=16384)], "inconclusive"),
    ([serve("llama:f16", B, 16384, capacity=16384)], "not-run"),
    ([serve("cand", C, 32768, capacity=40000)], "inconclusive"),  # no baseline ran
])
def test_g1_context_tier(rows, verdict):
    out = gates.decide_tier(TIER, rows, LADDER)
    assert out.verdict == verdict, out.summary


def test_g1_a_capacity_the_workbench_computed_is_no_refusal():
    """The reviewer's construction (item 16): a llama.cpp row whose only limit is the budget over its bytes per token,
    computed here, and whose row said ``refused_by: engine``: no request was sent, so nothing was refused."""
    computed = serve("llama:f16", B, 16384) | {"engine_capacity_tokens": 16640, "budget_capacity_tokens": 16384,
                                              "capacity_from": "computed"}
    out = gates.decide_tier(TIER, [serve("cand", C, 32768, capacity=40000), computed], LADDER)
    assert out.verdict == "inconclusive" and "no refusal of 32768 tokens was read" in out.summary, out.summary
    stated = computed | {"next_tier": 32768, "next_tier_kv_bytes": BUDGET * 2}
    out = gates.decide_tier(TIER, [serve("cand", C, 32768, capacity=40000), stated], LADDER)
    assert out.verdict == "confirmed" and "states a KV buffer of 8 MiB for 32768 tokens" in out.summary, out.summary


@pytest.mark.parametrize("cand_smoke, base_smoke, verdict", [
    ("passed", "passed", "confirmed"), ("failed", "passed", "inconclusive"), ("not-run", "passed", "inconclusive"),
])
def test_g1_stands_only_on_a_candidate_cell_whose_quality_smoke_passed(cand_smoke, base_smoke, verdict):
    rows = [serve("cand", C, 32768, capacity=40000, quality=cand_smoke),
            serve("llama:f16", B, 16384, capacity=16384, quality=base_smoke)]
    out = gates.decide_tier(TIER, rows, LADDER)
    assert out.verdict == verdict, out.summary
    if verdict == "inconclusive":
        assert f"cand: {cand_smoke}" in out.summary and "would be confirmed" in out.summary
    refuted = [serve("cand", C, 8192, capacity=8159), serve("llama:f16", B, 16384, capacity=16384, quality="failed")]
    assert gates.decide_tier(TIER, refuted, LADDER).verdict == "inconclusive"  # its baseline's cell failed A2


def test_g1_not_comparable_is_never_a_verdict():
    rows = [serve("cand", C, 32768, capacity=40000), serve("llama:f16", B, 16384, capacity=16384)]
    out = gates.decide_tier(TIER, rows, LADDER, not_comparable="llama:f16: quantization: F16 vs Q4_1")
    assert out.verdict == "inconclusive" and "not comparable: llama:f16: quantization" in out.summary


USABLE = gates.UsableRule()  # p95 first output ≤ 2 s, turn ≤ 10 s, 3 runs, 2×


def ladder_rows(arm, role, times, runs=3, smoke="passed", **kw):
    """``times``: the first-output time at each tier of LADDER; ``smoke``: the arm's A2 on its timed cell."""
    return [r for tier, t in zip(LADDER, times) for r in timed(arm, role, tier, runs, t, **kw)] + a2(arm, role, smoke)


@pytest.mark.parametrize("rows, verdict, ratio", [
    # candidate usable to 32k (its top: beyond unknown), llama.cpp to 8k only: [32768/16384, ∞) → ≥ 2
    (ladder_rows("cand", C, (0.2, 0.5, 1.5)) + ladder_rows("llama", B, (1.0, 3.0, 9.0)), "confirmed", (4, 2, math.inf)),
    # one step apart: candidate [16k, 32k), llama.cpp [8k, 16k): the ratio lies in (1, 4): straddles 2
    (ladder_rows("cand", C, (0.5, 1.5, 4.0)) + ladder_rows("llama", B, (1.0, 3.0, 9.0)), "inconclusive", (2, 1, 4)),
    # the candidate is the slower: [8k, 16k) against [32k, ∞): at most 0.5
    (ladder_rows("cand", C, (1.0, 3.0, 9.0)) + ladder_rows("llama", B, (0.2, 0.5, 1.5)), "refuted", (0.25, 0, 0.5)),
    # the same usable bracket [16k, 32k): at most 32768/16384 = 2, so never at least 2× beyond it
    (ladder_rows("cand", C, (0.5, 1.5, 4.0)) + ladder_rows("llama", B, (0.5, 1.5, 4.0)), "refuted", (1, 0.5, 2)),
    # both usable at every tier: no limit found on either side
    (ladder_rows("cand", C, (0.1, 0.2, 0.3)) + ladder_rows("llama", B, (0.1, 0.2, 0.3)), "inconclusive", None),
    # too few runs for a p95
    (ladder_rows("cand", C, (0.2, 0.5, 1.5), runs=2) + ladder_rows("llama", B, (1.0, 3.0, 9.0), runs=2),
     "inconclusive", None),
    (ladder_rows("llama", B, (1.0, 3.0, 9.0)), "not-run", None),
    (ladder_rows("cand", C, (0.2, 0.5, 1.5)), "inconclusive", None),
])
def test_g2_usable_context(rows, verdict, ratio):
    out = gates.decide_usable(USABLE, rows)
    assert out.verdict == verdict, out.summary
    if ratio:
        assert (out.ratio["value"], out.ratio["low"], out.ratio["high"]) == pytest.approx(ratio)


def test_g2_reads_the_p95_over_the_runs_not_the_median():
    """One slow run of three puts a tier beyond the budget: the p95 of (1, 1, 3) s is above 2 s."""
    rows = (ladder_rows("cand", C, ([0.2] * 3, [0.5] * 3, [1.0, 1.0, 3.0])) + ladder_rows("llama", B, (1.0, 3.0, 9.0)))
    out = gates.decide_usable(USABLE, rows)
    assert out.verdict == "inconclusive" and "candidate [16384, 32768)" in out.summary, out.summary


def test_g2_a_copying_workload_needs_the_baseline_with_its_own_speculation():
    rows = ladder_rows("cand", C, (0.2, 0.5, 1.5)) + ladder_rows("llama", B, (1.0, 3.0, 9.0))
    out = gates.decide_usable(USABLE, rows, copies=0.8)
    assert out.verdict == "inconclusive" and "speculation" in out.summary
    spec = ladder_rows("llama-spec", B, (0.9, 2.5, 8.0), speculation="engine")
    assert gates.decide_usable(USABLE, rows + spec, copies=0.8).verdict == "confirmed"
    assert gates.decide_usable(USABLE, rows, copies=0.1).verdict == "confirmed"


def test_g2_a_turn_cut_short_by_end_of_sequence_is_not_the_budgets_turn():
    """The reviewer's construction (item 12): the candidate hits its end-of-sequence token after 3 tokens at 32k, so
    its turn is short of the 128-token cap and fits the 10 s budget it would not fit at 128 tokens."""
    rows = (ladder_rows("cand", C, (0.2, 0.5, 1.5)) + ladder_rows("llama", B, (1.0, 3.0, 9.0)))
    assert gates.decide_usable(USABLE, rows).verdict == "confirmed"
    cut = [r | {"decode_tokens": 3} if r["arm"] == "cand" and r.get("tier") == 32768 else r for r in rows]
    out = gates.decide_usable(USABLE, cut)
    assert out.verdict == "inconclusive" and "fewer tokens than the output cap (3, 3, 3 of 128)" in out.summary, \
        out.summary
    slow = [r | {"decode_tokens": 3, "first_output_s": 5.0} if r["arm"] == "llama" and r.get("tier") == 16384 else r
            for r in rows]  # beyond the budget on its first output, whatever its replies' length
    assert gates.usable_bracket(slow, "llama", USABLE)[:2] == (8192, 16384)


@pytest.mark.parametrize("cand_smoke, base_smoke", [("failed", "passed"), ("passed", "failed"), ("passed", "not-run")])
def test_g2_and_g3_stand_only_where_both_cells_passed_their_quality_smoke(cand_smoke, base_smoke):
    """The reviewer's construction (item 5): an A2 row {status: failed} for the candidate left G2 and G3 confirmed."""
    rows = (ladder_rows("cand", C, (0.2, 0.5, 1.5), smoke=cand_smoke) + ladder_rows("llama", B, (1.0, 3.0, 9.0),
                                                                                 smoke=base_smoke))
    if base_smoke == "not-run":
        rows = [r for r in rows if not (r["kind"] == "a2" and r["arm"] == "llama")]
    out = gates.decide_usable(USABLE, rows)
    assert out.verdict == "inconclusive" and "quality smoke did not pass" in out.summary, out.summary
    prefill = [r for r in rows if r["kind"] == "a2"] + timed("cand", C, 32768, 3, 1.0) + timed("llama", B, 32768, 3,
                                                                                                4.0)
    out = gates.decide_prefill(PREFILL, prefill)
    assert out.verdict == "inconclusive" and "would be confirmed" in out.summary, out.summary


def test_g2_an_unserved_run_ends_the_usable_bracket():
    rows = ladder_rows("cand", C, (0.2, 0.5, 1.5)) + ladder_rows("llama", B, (0.2, 0.5, 1.5))
    rows = [r | {"served": False} if r["arm"] == "llama" and r.get("tier") == 16384 and r.get("run") == 0 else r
            for r in rows]
    assert gates.usable_bracket(rows, "llama", USABLE)[:2] == (8192, 16384)


PREFILL = gates.PrefillRule()  # 3× on the lower bound at 32k+, 3 runs


@pytest.mark.parametrize("cand, base, verdict", [
    ([1.0, 1.1, 1.2], [4.0, 4.2, 4.5], "confirmed"),  # per-run ratios 4.0, 3.8, 3.75: the least above 3
    ([1.0, 1.1, 1.6], [4.0, 4.2, 4.5], "inconclusive"),  # 4.0, 3.8, 2.8: straddles 3
    ([1.0, 2.0, 1.0], [4.0, 8.0, 4.0], "confirmed"),  # a slow run that slowed both arms: its pair is still 4×
    ([1.0, 1.1, 1.2], [1.5, 2.0, 2.5], "refuted"),  # at most 2.1×
    ([2.0, 2.1, 2.2], [1.0, 1.1, 1.2], "refuted"),  # the candidate is slower
    ([1.0, 1.1], [4.0, 4.2], "inconclusive"),  # fewer runs than the rule's 3
])
def test_g3_prefill_at_32k(cand, base, verdict):
    rows = (timed("cand", C, 32768, len(cand), cand) + timed("llama", B, 32768, len(base), base)
            + timed("cand", C, 8192, len(cand), 0.01) + timed("llama", B, 8192, len(base), 1.0)  # 8k never counts
            + a2("cand", C) + a2("llama", B))
    out = gates.decide_prefill(PREFILL, rows)
    assert out.verdict == verdict, out.summary
    assert out.ratio["low"] == pytest.approx(min(b / c for b, c in zip(base, cand)))


def test_g3_takes_the_fastest_baseline_arm_and_needs_a_32k_tier_both_served():
    rows = (timed("cand", C, 32768, 3, 1.0) + timed("slow", B, 32768, 3, 9.0) + timed("fast", B, 32768, 3, 2.0)
            + a2("cand", C) + a2("slow", B) + a2("fast", B))
    out = gates.decide_prefill(PREFILL, rows)
    assert out.verdict == "refuted" and "over fast" in out.summary
    only_small = timed("cand", C, 16384, 3, 0.1) + timed("llama", B, 16384, 3, 9.0)
    assert gates.decide_prefill(PREFILL, only_small).verdict == "inconclusive"
    unserved = timed("cand", C, 32768, 3, 1.0, served=False) + timed("llama", B, 32768, 3, 9.0)
    assert gates.decide_prefill(PREFILL, unserved).verdict == "inconclusive"


def test_g3_first_output_counts_as_well_as_prefill():
    rows = (timed("cand", C, 32768, 3, [1.0] * 3, prefill=[3.0] * 3)
            + timed("llama", B, 32768, 3, [4.0] * 3, prefill=[3.0] * 3) + a2("cand", C) + a2("llama", B))
    out = gates.decide_prefill(PREFILL, rows)
    assert out.verdict == "confirmed" and "first output at 32768: 4×" in out.summary, out.summary


@pytest.mark.parametrize("rule, moved", [
    (gates.PrefillRule(), None), (gates.UsableRule(), None), (gates.TierRule(budget_bytes=123), None),
    (gates.TierRule(budget_bytes=123, budget_rule="given: 0.1 MiB"), "budget_rule"),
    (gates.PrefillRule(min_ratio=2.0), "min_ratio"), (gates.PrefillRule(min_tier=4096), "min_tier"),
    (gates.UsableRule(first_output_s=5.0), "first_output_s"), (gates.UsableRule(min_runs=2), "min_runs"),
])
def test_a_rule_that_moves_a_claims_number_is_exploratory(rule, moved):
    assert (rule.exploratory is None) == (moved is None)
    if moved:
        assert moved in rule.exploratory and rule.as_dict()["exploratory"] == rule.exploratory


def test_the_numbers_are_the_sources_and_the_budget_is_said_to_be_the_workbenchs():
    assert gates.PrefillRule().min_ratio == 3.0 and gates.UsableRule().min_ratio == 2.0
    assert "the source states none" in gates.UsableRule().describe()
