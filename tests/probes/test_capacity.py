"""capacity.budget_policy: engine bytes graded against byte budgets over a fixed set, every verdict of the rule."""

from __future__ import annotations

import math

import pytest
from doubles.trtllm_fixture import fake_trt, model_dir  # noqa: F401 - the fixture

from workbench.engine import KvMemory
from workbench.probes import at_most_inconclusive_without_engine
from workbench.probes.capacity import BUDGETS, Budgets, Params, budget_row, decide, summarise, verdict


def test_the_budget_set_is_fixed_and_holds_non_aligned_budgets():
    assert len(BUDGETS) >= 4
    assert any(t % 256 for t in BUDGETS) and any(t != int(t) for t in BUDGETS)  # not a power of two; not a whole token


def test_llamacpp_pads_a_non_aligned_budget_far_beyond_its_bytes_and_is_confirmed(run_probe):
    """A real engine into a non-happy verdict: llama.cpp pads n_ctx to 256 cells, so 300 tokens' worth of bytes
    takes 512 tokens' worth (+71 %), read from the engine (cells it accepted × its own K/V row sizes)."""
    f = run_probe("capacity.budget_policy")
    rows = {r["budget_tokens"]: r for r in f.evidence["rows"]}
    assert set(rows) == set(BUDGETS)
    assert rows[256]["measured_capacity_tokens"] == 256 and rows[256]["over_budget_bytes"] == 0
    assert rows[300]["measured_capacity_tokens"] == 512
    assert rows[300]["engine_kv_bytes"] == 512 * rows[300]["engine_kv_bytes_per_token"] == 512 * 256
    assert rows[1000.5]["budget_bytes"] == 1000 * 256 + 128  # half a token over 1000
    assert f.verdict == "confirmed" and f.metric("max_overshoot") > 0.7
    assert f.claim_verdicts == {"contract.describe": "refuted"}
    for tag in ("measured_capacity_tokens", "engine_kv_bytes", "engine_kv_bytes_per_token"):
        assert f.metrics[tag]["source"] == "engine"
    assert f.metrics["kv_bytes_per_token"]["source"] == "cell"  # the config's geometry, beside the engine's
    assert "kv_buffer_bytes" not in f.metrics  # a log line rounded to 0.01 MiB is not an engine reading


BPT = 256


def _row(tokens, measured, *, engine_bpt=BPT, pool=None, memory=True):
    mem = KvMemory(engine_bpt, pool, "test") if memory else None
    return budget_row(round(tokens * BPT), tokens, measured, measured, "filled", BPT, mem, None)


def test_rule_returns_each_of_its_verdicts():
    p = Params()
    assert verdict([_row(256, 256), _row(1000, 1000)], p).verdict == "refuted"
    assert verdict([_row(256, 256), _row(1000, 1024)], p).verdict == "refuted"  # +2.4 % is within tolerance
    partial = verdict([_row(256, 256), _row(1000, 1100)], p)  # +10 %: the engine's unit, within max_overshoot
    assert partial.verdict == "partial" and partial.claim_verdicts == {"contract.describe": "partial"}
    over = verdict([_row(256, 256), _row(300, 512)], p)  # +71 % of the bytes: the budget does not bound it
    assert over.verdict == "confirmed" and over.claim_verdicts == {"contract.describe": "refuted"}
    assert verdict([_row(256, 256), _row(1000, 600)], p).verdict == "confirmed"  # −40 %: far short
    unread = verdict([_row(256, 256, memory=False), _row(1000, 1000)], p)
    assert unread.verdict == "inconclusive" and not unread.claim_verdicts


def test_overshoot_is_graded_by_size_not_partial_at_any_size():
    """+71 % was "partial" like +3 %; now the size of the overshoot decides, at a stated bound."""
    rows = [_row(256, 256), _row(300, 512)]
    assert verdict(rows, Params()).verdict == "confirmed"
    assert verdict(rows, Params(max_overshoot=0.8)).verdict == "partial"


def test_the_engines_bytes_are_graded_not_tokens_times_the_config_geometry():
    """Capacity in tokens meets every budget, but the engine takes 268 B per token where the config says 256:
    the bytes overshoot, and Describe's geometry is not the engine's."""
    p = Params()
    same = [_row(256, 256), _row(1000, 1000)]
    heavier = [_row(256, 256, engine_bpt=268), _row(1000, 1000, engine_bpt=268)]
    assert verdict(same, p).verdict == "refuted" and verdict(same, p).claim_verdicts["contract.describe"] == "confirmed"
    out = verdict(heavier, p)
    assert out.verdict == "refuted" and out.metrics["max_overshoot"] == pytest.approx(12 / 256)
    assert out.claim_verdicts["contract.describe"] == "partial"  # budget met, geometry not the engine's
    assert "the engine 268" in out.claim_reasons["contract.describe"]  # the row's own reason says which half failed
    assert "are the engine's" in verdict(same, p).claim_reasons["contract.describe"]
    assert verdict([_row(256, 256, engine_bpt=300), _row(1000, 1000, engine_bpt=300)], p).verdict == "partial"


def test_a_pool_the_engine_allocated_is_graded_apart_from_the_capacity_it_accepts():
    """vLLM-like: the pool is exactly the budget, but its null block holds nothing: usable capacity is short."""
    rows = [_row(256, 224, pool=256 * BPT), _row(1000, 960, pool=992 * BPT)]
    out = verdict(rows, Params())
    assert out.verdict == "partial" and out.metrics["max_overshoot"] <= 0
    assert out.metrics["capacity_error"] == pytest.approx(-0.125)


def test_the_verdict_rests_on_engine_read_bytes():
    out = verdict([_row(256, 256), _row(300, 512)], Params())
    assert {s.metric for s in out.rests_on} <= {"engine_kv_bytes", "measured_capacity_tokens"}
    assert at_most_inconclusive_without_engine(out).verdict == "confirmed"
    out.metrics.pop("engine_kv_bytes")
    assert at_most_inconclusive_without_engine(out).verdict == "inconclusive"


def test_each_capacity_verdict_is_downgraded_when_the_engines_bytes_contradict_it():
    """Each verdict states the engine-read value it rests on; the same verdict beside bytes that say otherwise
    (a budget met while "confirmed" says it was missed, and the reverse) cannot stand."""
    from dataclasses import replace

    confirmed = verdict([_row(256, 256), _row(300, 512)], Params())  # 512 tokens taken for a 300-token budget
    met = replace(confirmed, metrics=confirmed.metrics | {"engine_kv_bytes": confirmed.metrics["budget_bytes"]})
    assert at_most_inconclusive_without_engine(met).verdict == "inconclusive"
    assert "does not support it" in at_most_inconclusive_without_engine(met).summary
    refuted = verdict([_row(256, 256), _row(1000, 1000)], Params())  # every budget met
    assert refuted.verdict == "refuted" and at_most_inconclusive_without_engine(refuted).verdict == "refuted"
    doubled = replace(refuted, metrics=refuted.metrics | {"engine_kv_bytes": 2 * refuted.metrics["budget_bytes"]})
    assert at_most_inconclusive_without_engine(doubled).verdict == "inconclusive"


def test_params_are_checked():
    with pytest.raises(ValueError):
        Params(tolerance=0.3, max_overshoot=0.2)


def test_on_tensorrt_llm_the_pool_tensor_handed_to_the_connector_states_the_bytes(fake_trt, tmp_path):
    """No capacity observer there: the primary pool the engine registers with a KV connector is its KV memory
    (the double hands over a pool of 1.2's shape; only the reading is checked, no finding is made)."""
    from workbench.cells.trtllm import cell as trtllm_cell
    from workbench.probes.capacity import _memory

    with trtllm_cell.TrtLlmCell.open(str(model_dir(tmp_path)), kv_budget_tokens=256, connector="record") as c:
        d = c.describe()
        m, _ = _memory(c, d)
        pool = next(x["args"] for x in c.connector_log() if x["method"] == "register_kv_caches")
    assert "capacity" not in d.observers and m.pool_bytes == pool["bytes"] == math.prod(pool["shape"]) * 2
    assert m.bytes_per_token == m.pool_bytes / (pool["shape"][0] * d.block_tokens)
    with trtllm_cell.TrtLlmCell.open(str(model_dir(tmp_path, name="plain")), kv_budget_tokens=256) as c:
        assert _memory(c, c.describe())[0] is None  # without the recording connector there is no channel


def test_pool_memory_needs_exactly_one_pool_with_its_bytes():
    from workbench.probes.capacity import pool_memory

    one = {"method": "register_kv_caches", "args": {"shape": [8, 2, 2, 2048], "bytes": 8 * 2 * 2 * 2048 * 2}}
    assert pool_memory([one], 32).bytes_per_token == 2 * 2 * 2048 * 2 / 32
    assert pool_memory([one, one], 32) is None and pool_memory([], 32) is None
    assert pool_memory([{"method": "register_kv_caches", "args": {"shape": [8], "bytes": None}}], 32) is None


# --------------------------------------------------------------------------- the decision ladder, as a table


def _summary(*rows, p=Params()):
    return summarise(list(rows), p)


@pytest.mark.parametrize("summary, verdict_, case, describe", [
    (_summary(_row(256, 256), _row(1000, 1000)), "refuted", "met", "confirmed"),
    (_summary(_row(256, 256), _row(1000, 1024)), "refuted", "met", "confirmed"),  # +2.4 %: within tolerance
    (_summary(_row(256, 256, engine_bpt=268), _row(1000, 1000, engine_bpt=268)), "refuted", "met", "partial"),
    (_summary(_row(256, 256), _row(1000, 1100)), "partial", "missed", "partial"),  # +10 %: the engine's unit
    (_summary(_row(256, 224, pool=256 * BPT), _row(1000, 960, pool=992 * BPT)), "partial", "missed", "partial"),
    (_summary(_row(256, 256), _row(300, 512)), "confirmed", "over", "refuted"),  # +71 % of the bytes
    (_summary(_row(256, 256), _row(300, 512), p=Params(max_overshoot=0.8)), "partial", "missed", "partial"),
    (_summary(_row(256, 256), _row(1000, 600)), "confirmed", "short", "refuted"),  # −40 %: far short
    (_summary(_row(1000, 600)), "confirmed", "short", "refuted"),  # one budget both the most over and most short
    (_summary(_row(256, 256, memory=False), _row(1000, 1000)), "inconclusive", "unread", None),
    (Budgets((), 2, 0.05, 0.25), "inconclusive", "unread", None),
])
def test_the_budget_ladder_gives_each_verdict_from_its_summary(summary, verdict_, case, describe):
    d = decide(summary)
    assert (d.verdict, d.case, d.claim_verdicts.get("contract.describe")) == (verdict_, case, describe)
    assert bool(d.rests_on) == (verdict_ != "inconclusive")


def test_a_capacity_short_beyond_the_bound_rests_on_the_capacity_even_when_that_budget_also_overshot_least():
    """Every budget (here the only one) short by 40 %: the highest overshoot and the lowest capacity are the same
    budget. The verdict rests on the capacity the engine accepted and says so, so the engine's own reading keeps it
    (it rested on 'the engine's bytes over the budget', which they are not, and was downgraded to inconclusive)."""
    out = verdict([_row(1000, 600)], Params())
    assert out.verdict == "confirmed" and "the engine accepted" in out.summary
    assert [s.metric for s in out.rests_on] == ["measured_capacity_tokens"]
    assert at_most_inconclusive_without_engine(out).verdict == "confirmed"
