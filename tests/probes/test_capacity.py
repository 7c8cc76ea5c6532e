"""capacity.budget_policy: engine bytes graded against byte budgets over a fixed set, every verdict of the rule."""

from __future__ import annotations

import math

import pytest
from doubles.trtllm_fixture import fake_trt, model_dir  # noqa: F401 - the fixture

from workbench.contract import KvMemory
from workbench.probes import at_most_inconclusive_without_engine
from workbench.probes.capacity import BUDGETS, Params, _verdict, budget_row


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
    assert _verdict([_row(256, 256), _row(1000, 1000)], p).verdict == "refuted"
    assert _verdict([_row(256, 256), _row(1000, 1024)], p).verdict == "refuted"  # +2.4 % is within tolerance
    partial = _verdict([_row(256, 256), _row(1000, 1100)], p)  # +10 %: the engine's unit, within max_overshoot
    assert partial.verdict == "partial" and partial.claim_verdicts == {"contract.describe": "partial"}
    over = _verdict([_row(256, 256), _row(300, 512)], p)  # +71 % of the bytes: the budget does not bound it
    assert over.verdict == "confirmed" and over.claim_verdicts == {"contract.describe": "refuted"}
    assert _verdict([_row(256, 256), _row(1000, 600)], p).verdict == "confirmed"  # −40 %: far short
    unread = _verdict([_row(256, 256, memory=False), _row(1000, 1000)], p)
    assert unread.verdict == "inconclusive" and not unread.claim_verdicts


def test_overshoot_is_graded_by_size_not_partial_at_any_size():
    """+71 % was "partial" like +3 %; now the size of the overshoot decides, at a stated bound."""
    rows = [_row(256, 256), _row(300, 512)]
    assert _verdict(rows, Params()).verdict == "confirmed"
    assert _verdict(rows, Params(max_overshoot=0.8)).verdict == "partial"


def test_the_engines_bytes_are_graded_not_tokens_times_the_config_geometry():
    """Capacity in tokens meets every budget, but the engine takes 268 B per token where the config says 256:
    the bytes overshoot, and Describe's geometry is not the engine's."""
    p = Params()
    same = [_row(256, 256), _row(1000, 1000)]
    heavier = [_row(256, 256, engine_bpt=268), _row(1000, 1000, engine_bpt=268)]
    assert _verdict(same, p).verdict == "refuted" and _verdict(same, p).claim_verdicts["contract.describe"] == "confirmed"
    out = _verdict(heavier, p)
    assert out.verdict == "refuted" and out.metrics["max_overshoot"] == pytest.approx(12 / 256)
    assert out.claim_verdicts["contract.describe"] == "partial"  # budget met, geometry not the engine's
    assert _verdict([_row(256, 256, engine_bpt=300), _row(1000, 1000, engine_bpt=300)], p).verdict == "partial"


def test_a_pool_the_engine_allocated_is_graded_apart_from_the_capacity_it_accepts():
    """vLLM-like: the pool is exactly the budget, but its null block holds nothing: usable capacity is short."""
    rows = [_row(256, 224, pool=256 * BPT), _row(1000, 960, pool=992 * BPT)]
    out = _verdict(rows, Params())
    assert out.verdict == "partial" and out.metrics["max_overshoot"] <= 0
    assert out.metrics["capacity_error"] == pytest.approx(-0.125)


def test_the_verdict_rests_on_engine_read_bytes():
    out = _verdict([_row(256, 256), _row(300, 512)], Params())
    assert {s.metric for s in out.rests_on} <= {"engine_kv_bytes", "measured_capacity_tokens"}
    assert at_most_inconclusive_without_engine(out).verdict == "confirmed"
    out.metrics.pop("engine_kv_bytes")
    assert at_most_inconclusive_without_engine(out).verdict == "inconclusive"


def test_each_capacity_verdict_is_downgraded_when_the_engines_bytes_contradict_it():
    """Each verdict states the engine-read value it rests on; the same verdict beside bytes that say otherwise
    (a budget met while "confirmed" says it was missed, and the reverse) cannot stand."""
    from dataclasses import replace

    confirmed = _verdict([_row(256, 256), _row(300, 512)], Params())  # 512 tokens taken for a 300-token budget
    met = replace(confirmed, metrics=confirmed.metrics | {"engine_kv_bytes": confirmed.metrics["budget_bytes"]})
    assert at_most_inconclusive_without_engine(met).verdict == "inconclusive"
    assert "does not support it" in at_most_inconclusive_without_engine(met).summary
    refuted = _verdict([_row(256, 256), _row(1000, 1000)], Params())  # every budget met
    assert refuted.verdict == "refuted" and at_most_inconclusive_without_engine(refuted).verdict == "refuted"
    doubled = replace(refuted, metrics=refuted.metrics | {"engine_kv_bytes": 2 * refuted.metrics["budget_bytes"]})
    assert at_most_inconclusive_without_engine(doubled).verdict == "inconclusive"


def test_params_are_checked():
    with pytest.raises(ValueError):
        Params(tolerance=0.3, max_overshoot=0.2)


def test_on_tensorrt_llm_the_pool_tensor_handed_to_the_connector_states_the_bytes(fake_trt, tmp_path):
    """No capacity observer there: the primary pool the engine registers with a KV connector is its KV memory
    (the double hands over a pool of 1.2's shape; only the reading is checked, no finding is made)."""
    from workbench.cells import trtllm as trtllm_cell
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
