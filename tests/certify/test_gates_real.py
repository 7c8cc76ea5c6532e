"""Each gate's rule returns confirmed, refuted and inconclusive on real llama.cpp rows alone (where vLLM is not installed;
vLLM against llama.cpp: test_gates_vllm.py): rows the gates' measurement took on real llama.cpp cells
(:func:`workbench.certify.long_context.serve_row`, :func:`~.long_context.time_arms`), each arm driven there through the
engine's own configuration (its KV precision, its context, its batch).

- G1 rests on what the engine says of the budget: q4_0 KV holds about 3.6× the tokens of f16 in the same bytes, so a
  q4_0 candidate serves a tier an f16 baseline cannot, whose own statement of the KV buffer for that tier is over the
  budget.
- G2 rests on what each arm serves within a latency budget: a baseline whose context the engine holds to 1024 tokens
  cannot serve 2048 at any speed (the budget is the claim's, the ladder this test's).
- G3 rests on timings, paired by run. No pair of CPU engines here is 3× apart at their defaults, so its confirmed is
  llama.cpp batched against one token a forward pass (``n_batch=1``, 2.7× to 10× on the interval's lower bound at
  4096 tokens on 2 cores, loaded to quiet), at 1.5× on a 4k tier (the rule's ``min_tier`` and ratio moved:
  exploratory).
"""

from __future__ import annotations

import pytest

from workbench.certify import gates
from workbench.certify import long_context as lc

from conftest import require_engine

MODEL = "synthetic:long,ctx=4096"
LADDER = (1024, 2048, 4096)
PLAN = lc.Plan("vllm", MODEL, tiers=LADDER, runs=3, output_tokens=8, threads=1)
C, B = gates.CANDIDATE, gates.BASELINE


def arm(name, role, **options):
    return lc.Arm(name, role, "llamacpp", options, options.get("kv_type"))


@pytest.fixture(scope="module")
def serve_rows():
    """Each KV precision under one budget: 2048 tokens of f16 (512 KiB)."""
    require_engine("llamacpp")
    budget = 2048 * 256
    return {kv: lc.serve_row(PLAN, arm(f"llamacpp:{kv}", C, kv_type=kv), budget, LADDER) for kv in ("f16", "q4_0")}, budget


def as_role(row, role):
    return row | {"role": role}


def test_g1_on_real_rows(serve_rows):
    rows, budget = serve_rows
    f16, q4 = rows["f16"], rows["q4_0"]
    assert (f16["tier"], f16["served"], q4["tier"], q4["served"]) == (2048, True, 4096, True), (f16, q4)
    assert q4["engine_kv_bytes_per_token"] < f16["engine_kv_bytes_per_token"]  # the engine's own bytes per token
    assert f16["capacity_from"] == "computed" and f16["next_tier"] == 4096 and f16["next_tier_kv_bytes"] > budget
    assert f16["quality"] == q4["quality"] == "passed"  # each serve cell's own A2
    rule = gates.TierRule(budget_bytes=budget)
    assert gates.decide_tier(rule, [as_role(q4, C), as_role(f16, B)], LADDER).verdict == "confirmed"
    assert gates.decide_tier(rule, [as_role(f16, C), as_role(q4, B)], LADDER).verdict == "refuted"
    assert gates.decide_tier(rule, [as_role(q4, C), as_role(q4, B)], LADDER).verdict == "inconclusive"  # ladder top
    assert gates.decide_tier(rule, [as_role(q4, C)], LADDER).verdict == "inconclusive"  # no baseline


@pytest.fixture(scope="module")
def timed_rows():
    """Three interleaved runs of the ladder on three llama.cpp cells: batched (512), one token at a time, and batched
    with its context held to 1024 tokens by the engine."""
    require_engine("llamacpp")
    plan = lc.Plan("vllm", MODEL, tiers=LADDER, runs=3, output_tokens=8, threads=1, seed=1)
    return lc.time_arms(plan, [arm("batched", C), arm("one-by-one", C, n_batch=1),
                               arm("short", C, context_tokens=1024)])


def pick(rows, name, role, runs=3):
    return [r | {"role": role} for r in rows if r["arm"] == name and r.get("run", 0) < runs]


def test_the_timed_rows_are_cold_with_their_stages_and_warm_state(timed_rows):
    served = [r for r in timed_rows if r["kind"] == "timed" and r["served"]]
    assert served and all(r["cold"] and r["warm"]["state"] == "cold" for r in served)
    assert all(r["stages"]["ensure_prefix_s"] == r["prefill_s"] and r["stages"]["session_open_s"] is None
               for r in served)
    short = [r for r in timed_rows if r["kind"] == "timed" and r["arm"] == "short"]
    assert [r["served"] for r in short if r["run"] == 0] == [True, False, False]  # the engine holds 1024 tokens
    assert all("overflow" in r["error"] for r in short if not r["served"])
    assert {r["arm"] for r in timed_rows if r["kind"] == "warmup"} == {"batched", "one-by-one", "short"}


def test_g2_on_real_rows(timed_rows):
    rule = gates.UsableRule()  # the claim's budget: what decides is what each arm serves
    both = pick(timed_rows, "batched", C) + pick(timed_rows, "short", B)
    out = gates.decide_usable(rule, both)
    assert out.verdict == "confirmed" and out.ratio["low"] >= 2, out.summary  # [4096, ∞) against [1024, 2048)
    swapped = pick(timed_rows, "short", C) + pick(timed_rows, "batched", B)
    assert gates.decide_usable(rule, swapped).verdict == "refuted"
    same = pick(timed_rows, "batched", C) + pick(timed_rows, "one-by-one", B)
    assert gates.decide_usable(rule, same).verdict == "inconclusive"  # both serve the whole ladder in budget
    few = pick(timed_rows, "batched", C, runs=2) + pick(timed_rows, "short", B, runs=2)
    assert gates.decide_usable(rule, few).verdict == "inconclusive"


def test_g3_on_real_rows(timed_rows):
    # a bar of 1.5× on this test's top tier (exploratory: see above): batched against one token a forward pass measured
    # 2.7× to 10× on its lower bound from a loaded to a quiet 2-core machine, so the rule's confirmed is not a coin toss
    at_4k = gates.PrefillRule(min_tier=4096, min_ratio=1.5)
    fast_vs_slow = pick(timed_rows, "batched", C) + pick(timed_rows, "one-by-one", B)
    out = gates.decide_prefill(at_4k, fast_vs_slow)
    assert out.verdict == "confirmed" and at_4k.exploratory, out.summary
    slow_vs_fast = pick(timed_rows, "one-by-one", C) + pick(timed_rows, "batched", B)
    assert gates.decide_prefill(at_4k, slow_vs_fast).verdict == "refuted"
    few = pick(timed_rows, "batched", C, runs=2) + pick(timed_rows, "one-by-one", B, runs=2)
    assert gates.decide_prefill(at_4k, few).verdict == "inconclusive"
    unlike = gates.decide_prefill(at_4k, fast_vs_slow, not_comparable="quantization: F32 vs Q4_1")
    assert unlike.verdict == "inconclusive" and "not comparable" in unlike.summary
