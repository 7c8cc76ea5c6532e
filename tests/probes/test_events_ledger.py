"""events.ledger_closure: the rule row by row, then on the TensorRT-LLM double (both profiles, and the one that
reproduces PR #16335's detach-without-``removed``), then on real vLLM (in-process; and ``vllm serve`` in
tests/cells/test_served_vllm.py's module when the server is up)."""

from __future__ import annotations

import pytest
from doubles.trtllm_fixture import fake_trt, fake_trt_any, model_dir  # noqa: F401 - the fixtures

from workbench import probes, settle
from workbench.events.inventory import Inventory
from workbench.engine import KvEvent
from workbench.probes.events_ledger import Ledger, NaiveInventory, Replay, predict, verdict

B = 32


def _row(phase="readback", predicted=64, reported=64, naive=64, replayed=64):
    return {"phase": phase, "request": 0, "prompt_tokens": 96, "predicted": predicted, "naive_predicted": naive,
            "replayed": replayed, "reported": reported, "reported_tokens": reported, "ledger_blocks": 8,
            "inventory_hashes": 8}


def _account(stored=40, removed=32, resident=8, capacity=8, duplicates=0):
    return {"stored": stored, "removed": removed, "resident": resident, "capacity": capacity,
            "duplicate_removals": duplicates, "replay_resident": 8, "unknown_removals": 0, "orphans": 0}


_CLEARED = {"how": "reset_prefix_cache", "engine_said": True, "inventory_blocks": 0, "predicted": 0, "reported": 0,
            "clear_events": 1}


# --------------------------------------------------------------------------- the rule, each verdict


def test_a_closed_ledger_is_confirmed_with_and_without_the_reset():
    out = verdict([_row("ramp"), _row()], _account(), _CLEARED)
    assert out.verdict == "confirmed" and "after reset_prefix_cache the inventory emptied" in out.summary
    assert verdict([_row()], _account()).verdict == "confirmed"


def test_a_ledger_larger_than_the_pool_is_a_leak():
    out = verdict([_row()], _account(removed=10, resident=30))
    assert out.verdict == "refuted" and "22 more than the pool can hold" in out.summary
    assert out.metrics["ledger_overflow_blocks"] == 22


def test_an_inventory_no_clear_event_ever_reaches_is_stale():
    stale = dict(_CLEARED, inventory_blocks=5, predicted=64, clear_events=0)
    out = verdict([_row()], _account(), stale)
    assert out.verdict == "refuted" and "still held 5 blocks, and no clear event came" in out.summary


def test_a_clear_published_only_with_the_next_step_is_partial():
    """vLLM 0.32: ``reset_prefix_cache`` queues AllBlocksCleared, published with the next step's output
    (``Scheduler.update_from_output``): the request right after the clear is mispredicted."""
    late = dict(_CLEARED, inventory_blocks=7, predicted=64, clear_events=1)
    out = verdict([_row()], _account(), late)
    assert out.verdict == "partial" and "until the engine's next step published the clear" in out.summary
    assert out.metrics["reset_clear_events"] == 1


def test_a_read_back_the_ledger_mispredicts_refutes():
    out = verdict([_row(), _row(predicted=64, reported=32)], _account())
    assert out.verdict == "refuted" and out.metrics["ledger_exact_fraction"] == 0.5


@pytest.mark.parametrize("rows, account, words", [
    ([_row(reported=None)], _account(), "no cached-token count"),
    ([_row("ramp")], _account(), "no cached-token count"),  # nothing read back
    ([_row()], _account(removed=0, stored=8), "evicted nothing"),
    ([_row(predicted=0, reported=0)], _account(), "reused nothing"),
])
def test_what_cannot_be_told_is_inconclusive(rows, account, words):
    out = verdict(rows, account)
    assert out.verdict == "inconclusive" and words in out.summary


def test_a_clear_the_engine_did_not_honour_is_inconclusive():
    out = verdict([_row()], _account(), dict(_CLEARED, reported=64))
    assert out.verdict == "inconclusive" and "the clear did not clear" in out.summary


# --------------------------------------------------------------------------- the ledger's parts


def _stored(h, parent, tokens, eid=0):
    return KvEvent("stored", event_id=eid, block_hashes=(h,), parent_hash=parent, block_tokens=(tuple(tokens),))


def _removed(h, eid=0):
    return KvEvent("removed", event_id=eid, block_hashes=(h,))


def test_the_ledger_counts_a_removal_that_left_another_copy():
    ledger = Ledger()
    ledger.see([_stored(7, None, [1] * B), _stored(7, None, [1] * B), _removed(7), _removed(7), _stored(7, None, [1] * B)])
    assert (ledger.stored, ledger.removed, ledger.duplicate_removals, ledger.copies) == (3, 2, 1, {7: 1})


def test_the_prediction_walks_the_engines_own_hashes_by_tokens_and_the_naive_mirror_forgets_a_copy():
    a, b = [1] * B, [2] * B
    events = [_stored(10, None, a), _stored(11, 10, b), _stored(11, 10, b), _removed(11)]
    full, naive = Inventory(None), NaiveInventory(None)
    full.apply_all(events)
    naive.apply_all(events)
    prompt = a + b + [3]
    assert predict(full, prompt, B) == 64 and predict(naive, prompt, B) == 32
    assert predict(full, a + [9] * B + [3], B) == 32 and predict(full, a, B) == 0  # never the last token


def test_the_replay_evicts_the_least_recently_used_block_head_last():
    r = Replay(B, capacity=3)
    assert r.request([1] * 64 + [5]) == 0  # two blocks held
    assert r.request([1] * 64 + [5]) == 64
    assert r.request([2] * 64 + [5]) == 0  # holds 3: one of the first prompt's went, its tail first
    assert r.request([1] * 32 + [5]) == 32 and r.request([1] * 64 + [5]) == 32


# --------------------------------------------------------------------------- on the TensorRT-LLM double


def _run(tmp_path, **params):
    return probes.run("events.ledger_closure", engine="trtllm", isolated=False,
                      model=str(model_dir(tmp_path, vocab_size=32000)), params={"requests": 16, "readback": 4} | params,
                      cell_options={"dummy_weights": True})


def test_the_ledger_closes_on_the_double_of_both_releases_and_settles_nothing(fake_trt_any, tmp_path):
    f = _run(tmp_path)
    assert f.verdict == "confirmed", f.summary
    assert f.metric("ledger_resident_blocks") <= f.metric("engine_capacity_blocks") == 8
    assert f.metric("engine_evicted_blocks") > 0 and f.metric("ledger_exact_fraction") == 1.0
    assert f.metric("reset_inventory_blocks") == 0 and "restart (switch)" in f.summary  # no clear in the LLM API
    assert f.metrics["replay_resident_blocks"]["source"] == "derived"  # the replay is computed, never a support
    assert settle.unsettled(f, "gateway.ledger")[0].startswith("it was made on a test double")


def test_the_double_that_detaches_descendants_without_removed_is_refuted(fake_trt, tmp_path, monkeypatch):
    """TensorRT-LLM PR #16335: descendants of an evicted block leave with no ``removed`` event."""
    monkeypatch.setattr(fake_trt.llmapi.llm.LLM, "detach_without_removed", True)
    f = _run(tmp_path)
    assert f.verdict == "refuted" and "PR #16335" in f.summary
    assert f.metric("ledger_overflow_blocks") > 0
    assert [s["metric"] for s in f.rests_on] == ["engine_evicted_blocks", "ledger_overflow_blocks"]


def test_without_eviction_the_ledger_is_not_tested(fake_trt, tmp_path):
    f = _run(tmp_path, budget_blocks=64, requests=4)
    assert f.verdict == "inconclusive" and "evicted nothing" in f.summary
