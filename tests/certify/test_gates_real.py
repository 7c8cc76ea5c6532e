"""Each gate's rule returns confirmed, refuted and inconclusive on real rows: rows the gates' measurement took on real
llama.cpp cells (:func:`workbench.certify.long_context.serve_row`, :func:`~.long_context.timed_row`), each arm driven
there through the engine's own configuration (its KV precision, its context, its batch).

- G1 rests on what the engine says it holds in a memory budget (its cells and its own bytes per token): q4_0 KV holds
  about 3.6× the tokens of f16 in the same bytes, so a q4_0 candidate serves a tier an f16 baseline cannot.
- G2 rests on what each arm serves within a latency budget: a baseline whose context the engine holds to 1024 tokens
  cannot serve 2048 at any speed (the budget here is generous, so no timing decides it).
- G3 rests on timings, paired by run. No pair of CPU engines here is 3× apart at a steady margin (llama.cpp batched
  against one token at a time is about 4×, by 2× to 9× per run on a shared machine), so its confirmed is shown with the
  rule's bar at 1.5× (exploratory: the rule, not the claim's number); refuted and inconclusive hold at the claim's 3×.
"""

from __future__ import annotations

import pytest

from workbench import cells
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
    opened = {name: cells.open_cell("llamacpp", MODEL, threads=1, **opts) for name, opts in (
        ("batched", {"context_tokens": 4096}), ("one-by-one", {"context_tokens": 4096, "n_batch": 1}),
        ("short", {"context_tokens": 1024}))}
    try:
        rows = [lc.timed_row(arm(name, C), cell, tier, run, PLAN, None, 512)
                for run in range(3) for tier in LADDER for name, cell in opened.items()]
    finally:
        for cell in opened.values():
            cell.close()
    return rows


def pick(rows, name, role, runs=3):
    return [r | {"role": role} for r in rows if r["arm"] == name and r["run"] < runs]


def test_the_timed_rows_are_cold_with_their_stages_and_warm_state(timed_rows):
    served = [r for r in timed_rows if r["served"]]
    assert served and all(r["cold"] and r["warm"]["state"] == "cold" for r in served)
    assert all(r["stages"]["ensure_prefix_s"] == r["prefill_s"] and r["stages"]["session_open_s"] is None
               for r in served)
    short = [r for r in timed_rows if r["arm"] == "short"]
    assert [r["served"] for r in short if r["run"] == 0] == [True, False, False]  # the engine holds 1024 tokens
    assert all("overflow" in r["error"] for r in short if not r["served"])


def test_g2_on_real_rows(timed_rows):
    rule = gates.UsableRule(first_output_s=30.0, turn_s=60.0)  # generous: what decides is what each arm serves
    both = pick(timed_rows, "batched", C) + pick(timed_rows, "short", B)
    out = gates.decide_usable(rule, both)
    assert out.verdict == "confirmed" and out.ratio["low"] >= 2, out.summary  # [4096, ∞) against [1024, 2048)
    swapped = pick(timed_rows, "short", C) + pick(timed_rows, "batched", B)
    assert gates.decide_usable(rule, swapped).verdict == "refuted"
    same = pick(timed_rows, "batched", C) + pick(timed_rows, "one-by-one", B)
    assert gates.decide_usable(rule, same).verdict == "inconclusive"  # both serve the whole ladder in budget
    few = pick(timed_rows, "batched", C, runs=2) + pick(timed_rows, "short", B, runs=2)
    assert gates.decide_usable(gates.UsableRule(first_output_s=30.0, turn_s=60.0), few).verdict == "inconclusive"


def test_g3_on_real_rows(timed_rows):
    fast_vs_slow = pick(timed_rows, "batched", C) + pick(timed_rows, "one-by-one", B)
    bar = gates.PrefillRule(min_ratio=1.5, min_tier=2048)  # exploratory: see the module's words
    out = gates.decide_prefill(bar, fast_vs_slow)
    assert out.verdict == "confirmed" and bar.exploratory, out.summary
    claims_bar = gates.PrefillRule(min_tier=2048)  # the claim's 3×, at this test's tiers
    slow_vs_fast = pick(timed_rows, "one-by-one", C) + pick(timed_rows, "batched", B)
    assert gates.decide_prefill(claims_bar, slow_vs_fast).verdict == "refuted"
    few = pick(timed_rows, "batched", C, runs=2) + pick(timed_rows, "one-by-one", B, runs=2)
    assert gates.decide_prefill(claims_bar, few).verdict == "inconclusive"
    unlike = gates.decide_prefill(claims_bar, fast_vs_slow, not_comparable="quantization: F32 vs Q4_1")
    assert unlike.verdict == "inconclusive" and "not comparable" in unlike.summary
