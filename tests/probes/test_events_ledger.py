"""events.ledger_closure: the rule row by row, then on the TensorRT-LLM double (both profiles, and the one that
reproduces PR #16335's detach-without-``removed``). Real vLLM runs it in tests/events/test_events_on_vllm.py
(in-process, the ledger equal to what its block pool holds) and tests/events/test_served_probes.py (``vllm
serve``)."""

from __future__ import annotations

import pytest
from doubles.trtllm_fixture import fake_trt, fake_trt_any, model_dir  # noqa: F401 - the fixtures

from workbench import metrics, probes, settle
from workbench.events.inventory import Inventory
from workbench.engine import KvEvent
from workbench.probes import at_most_inconclusive_without_engine, check_rests
from workbench.probes.events_ledger import Ledger, NaiveInventory, Replay, predict, verdict

B = 32


def _row(phase="readback", predicted=64, reported=64, naive=64, replayed=64):
    return {"phase": phase, "request": 0, "prompt_tokens": 96, "predicted": predicted, "naive_predicted": naive,
            "replayed": replayed, "reported": reported, "reported_tokens": reported, "ledger_blocks": 8,
            "inventory_hashes": 8, "priority": None}


def _account(stored=40, removed=32, resident=8, capacity=8, duplicates=0, held=None):
    return {"stored": stored, "removed": removed, "resident": resident, "capacity": capacity, "held": held,
            "duplicate_removals": duplicates, "replay_resident": 8, "unknown_removals": 0, "orphans": 0,
            "priorities": [100, 10]}


_CLEARED = {"how": "reset_prefix_cache", "engine_said": True, "inventory_blocks": 0, "predicted": 0, "reported": 0,
            "clear_events": 1, "engine_signals_early": 1, "engine_signals": 1}


def _verdict(rows, account, reset=None):
    """The rule's outcome as a finding would keep it: the guard applied (each support read from the engine and
    holding), and every verdict it lets stand resting on supports the probe declares."""
    o = at_most_inconclusive_without_engine(verdict(rows, account, reset), subject=True)
    check_rests(probes.get("events.ledger_closure"), o, subject=True)
    return o


def _rests(o):
    return [(s.metric, s.op) for s in o.rests_on]


# --------------------------------------------------------------------------- the rule, each verdict


def test_a_closed_ledger_is_confirmed_with_and_without_the_reset():
    out = _verdict([_row("ramp"), _row()], _account(), _CLEARED)
    assert out.verdict == "confirmed" and "the engine said so before the next request" in out.summary
    assert ("reset_engine_clear_signals_early", ">") in _rests(out)
    assert _verdict([_row()], _account()).verdict == "confirmed"


def test_a_ledger_larger_than_the_pool_is_a_leak():
    out = _verdict([_row()], _account(removed=10, resident=30))
    assert out.verdict == "refuted" and "22 more than the pool can hold" in out.summary
    assert out.metrics["ledger_overflow_blocks"] == 22 and _rests(out) == [("ledger_overflow_blocks", ">")]


def test_the_worst_leak_no_removed_event_at_all_is_refuted_not_inconclusive():
    """48 blocks stored into a 16-block pool and not one removed event: every eviction went unannounced. The
    read-backs the ledger predicted 80 tokens for got none. The old rule needed a removed event before it would
    call a leak, and said "the ramp evicted nothing"."""
    out = _verdict([_row(predicted=80, reported=0)] * 3, _account(stored=48, removed=0, resident=48, capacity=16))
    assert out.verdict == "refuted" and "no removed event came at all" in out.summary
    assert out.metrics["ledger_overflow_blocks"] == 32 and out.metrics["engine_evicted_min_blocks"] == 32


def test_a_read_back_the_ledger_overclaims_refutes_even_when_the_engine_reused_nothing():
    """No overflow (the pool is large enough to hide it), nothing reused: the ledger still says the engine holds
    blocks it did not serve."""
    out = _verdict([_row(predicted=64, reported=0), _row(predicted=0, reported=0)],
                   _account(stored=8, removed=0, resident=8, capacity=16))
    assert out.verdict == "refuted" and "blocks the engine no longer serves" in out.summary
    assert out.metrics["ledger_overclaimed_requests"] == 1 and _rests(out) == [("ledger_overclaimed_requests", ">")]


def test_evictions_are_at_least_the_blocks_stored_beyond_the_pool():
    out = _verdict([_row()], _account(stored=40, removed=0, resident=8, capacity=8))
    assert out.metrics["engine_evicted_min_blocks"] == 32 and out.verdict == "confirmed"


def test_where_the_engine_says_what_it_holds_the_ledger_must_equal_it():
    """vLLM in-process counts its block pool's cached entries: stored − removed is tested as equality there."""
    equal = _verdict([_row()], _account(held=8))
    assert equal.verdict == "confirmed" and ("ledger_held_gap_blocks", "==") in _rests(equal)
    assert equal.metrics["engine_held_blocks"] == 8 and "the engine's own index holds 8 (equal)" in equal.notes[0]
    for held, words in ((5, "3 more: blocks left with no removed event"), (10, "2 fewer: blocks held that no stored")):
        out = _verdict([_row()], _account(held=held))
        assert out.verdict == "refuted" and words in out.summary, out.summary
        assert _rests(out) == [("ledger_held_gap_blocks", "!=")]
    assert "only the pool bounds it" in _verdict([_row()], _account()).notes[0]


def test_an_inventory_no_engine_signal_ever_reaches_is_stale():
    stale = dict(_CLEARED, inventory_blocks=5, predicted=64, clear_events=0, engine_signals_early=0, engine_signals=0)
    out = _verdict([_row()], _account(), stale)
    assert out.verdict == "refuted" and "its stream said nothing" in out.summary
    assert _rests(out) == [("reset_engine_reused_tokens", "<="), ("reset_engine_clear_signals", "<=")]


def test_a_clear_the_engine_announces_only_with_its_next_step_is_partial():
    """vLLM 0.32: ``reset_prefix_cache`` queues AllBlocksCleared, published with the next step's output
    (``Scheduler.update_from_output``): the request right after the clear is mispredicted."""
    late = dict(_CLEARED, inventory_blocks=7, predicted=64, clear_events=1, engine_signals_early=0)
    out = _verdict([_row()], _account(), late)
    assert out.verdict == "partial" and "announced it only once its next step had run" in out.summary
    assert {("reset_engine_clear_signals_early", "<="), ("reset_engine_clear_signals", ">")} <= set(_rests(out))
    assert out.metrics["reset_clear_events"] == 1


def test_what_the_clear_rests_on_is_the_engines_word_not_the_gateways_inventory():
    """The gateway's inventory and its resyncs are the workbench's own (cell); no verdict rests on them."""
    assert metrics.get("reset_inventory_blocks").source == "cell" and metrics.get("reset_clear_events").source == "cell"
    assert metrics.get("reset_engine_clear_signals").source == "engine"
    outcomes = [_verdict([_row()], _account(), r) for r in (
        _CLEARED, dict(_CLEARED, inventory_blocks=7, predicted=64, engine_signals_early=0),
        dict(_CLEARED, inventory_blocks=5, predicted=64, clear_events=0, engine_signals_early=0, engine_signals=0))]
    assert [o.verdict for o in outcomes] == ["confirmed", "partial", "refuted"]
    assert not {"reset_inventory_blocks", "reset_clear_events"} & {s.metric for o in outcomes for s in o.rests_on}


@pytest.mark.parametrize("reset, words", [
    (dict(_CLEARED, inventory_blocks=0, engine_signals_early=0, engine_signals=0, clear_events=1),
     "on the consumer's own resync"),
    (dict(_CLEARED, inventory_blocks=4, predicted=64), "the workbench's consumer, not the engine"),
])
def test_an_inventory_the_engine_did_not_empty_is_inconclusive(reset, words):
    out = _verdict([_row()], _account(), reset)
    assert out.verdict == "inconclusive" and words in out.summary


def test_a_read_back_the_ledger_mispredicts_refutes():
    out = _verdict([_row(), _row(predicted=32, reported=64)], _account())
    assert out.verdict == "refuted" and out.metrics["ledger_exact_fraction"] == 0.5


@pytest.mark.parametrize("rows, account, words", [
    ([_row(reported=None)], _account(), "no cached-token count"),
    ([_row("ramp")], _account(), "no cached-token count"),  # nothing read back
    ([_row()], _account(removed=0, stored=8), "evicted nothing"),
    ([_row(predicted=0, reported=0)], _account(), "reused nothing"),
])
def test_what_cannot_be_told_is_inconclusive(rows, account, words):
    out = _verdict(rows, account)
    assert out.verdict == "inconclusive" and words in out.summary


def test_a_clear_the_engine_did_not_honour_is_inconclusive():
    out = _verdict([_row()], _account(), dict(_CLEARED, reported=64))
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
    assert f.metric("engine_evicted_min_blocks") > 0 and f.metric("ledger_exact_fraction") == 1.0
    assert "restart (switch)" in f.summary and f.metric("reset_engine_clear_signals_early") > 0  # no clear in the API
    assert f.metric("reset_inventory_blocks") == 0 and f.metrics["reset_inventory_blocks"]["source"] == "cell"
    assert {r["priority"] for r in f.evidence["rows"] if r["phase"] == "ramp"} == {100, 10}
    assert f.metrics["replay_resident_blocks"]["source"] == "derived"  # the replay is computed, never a support
    assert settle.unsettled(f, "gateway.ledger")[0].startswith("it was made on a test double")


def test_the_double_that_detaches_descendants_without_removed_is_refuted(fake_trt, tmp_path, monkeypatch):
    """TensorRT-LLM PR #16335: a block whose ancestor was evicted first leaves, at its own reclaim, with no
    ``removed`` event. The ramp's mixed priorities take that path (a prefix a low request claimed goes before the
    suffixes high requests stored under it); the ledger then holds blocks the pool cannot."""
    monkeypatch.setattr(fake_trt.llmapi.llm.LLM, "detach_without_removed", True)
    f = _run(tmp_path)
    assert f.verdict == "refuted" and "PR #16335" in f.summary, f.summary
    assert f.metric("ledger_overflow_blocks") > 0
    assert [s["metric"] for s in f.rests_on] == ["ledger_overflow_blocks"]


def test_under_one_priority_the_leaf_goes_first_so_the_bug_stays_hidden_and_the_run_is_exploratory(
        fake_trt, tmp_path, monkeypatch):
    """TensorRT-LLM releases a request's blocks last block first (``releaseBlocks``): under one priority no ancestor
    is evicted before its descendants, so the detach never happens. The ledger closes on the buggy double, and the
    finding says it settles nothing (a parameter that hides the outcome moved)."""
    monkeypatch.setattr(fake_trt.llmapi.llm.LLM, "detach_without_removed", True)
    f = _run(tmp_path, mixed_priority=False)
    assert f.verdict == "confirmed", f.summary
    assert any("exploratory" in w and "mixed_priority" in w for w in settle.unsettled(f, "gateway.ledger"))


def test_without_eviction_the_ledger_is_not_tested(fake_trt, tmp_path):
    f = _run(tmp_path, budget_blocks=64, requests=4)
    assert f.verdict == "inconclusive" and "evicted nothing" in f.summary
