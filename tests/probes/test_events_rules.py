"""The event-plane probes' rules as tables, one row per verdict each can return; on the real llama.cpp every
event-plane probe is not-applicable with the engine's observers as evidence (it has no event stream)."""

from __future__ import annotations

import pytest

from workbench import probes
from workbench.probes import at_most_inconclusive_without_engine
from workbench.probes import events_fidelity, events_isolation, events_overflow, events_ownership, events_parity

EVENT_PROBES = ("events.inventory_fidelity", "events.hash_parity", "events.one_consumer", "events.overflow_resync",
                "events.inventory_isolation")
RIGHT = "right"


def _guarded(o):
    return at_most_inconclusive_without_engine(o)


def _fid(pairs, arm=RIGHT):
    return [{"request": i, "arm": arm, "predicted": p, "reported": r} for i, (p, r) in enumerate(pairs)]


@pytest.mark.parametrize("rows,evicted,verdict,diagnosis", [
    (_fid([(0, 0), (64, 64)]) + _fid([(0, 0), (0, 64)], "wrong"), 3, "confirmed", "confirmed"),
    (_fid([(0, 0), (64, 64), (32, 64)]) + _fid([(0, 0), (32, 64), (0, 0)], "wrong"), 3, "partial", "refuted"),
    (_fid([(64, 0), (0, 64)]), 3, "refuted", "inconclusive"),
    (_fid([(0, 0), (64, 64)]), 0, "inconclusive", "inconclusive"),  # nothing evicted
    (_fid([(0, 0), (0, 0)]), 2, "inconclusive", "inconclusive"),  # nothing reused
    (_fid([(0, None)]), 2, "inconclusive", "inconclusive"),  # no engine count
])
def test_fidelity_rule(rows, evicted, verdict, diagnosis):
    o = _guarded(events_fidelity.verdict(rows, evicted, RIGHT))
    assert o.verdict == verdict, o.summary
    assert o.claim_verdicts["gateway.diagnosis"] == diagnosis


@pytest.mark.parametrize("rows,verdict", [
    ([{"engine_blocks": 3, "equal": 3}], "confirmed"),
    ([{"engine_blocks": 3, "equal": 1}], "partial"),
    ([{"engine_blocks": 3, "equal": 0}], "refuted"),
    ([{"engine_blocks": 0, "equal": 0}], "inconclusive"),
])
def test_parity_rule(rows, verdict):
    assert _guarded(events_parity.verdict(rows, "0", "0")).verdict == verdict


@pytest.mark.parametrize("seqs,verdict", [
    ([[0, 2, 4], [1, 3]], "confirmed"),  # a destructive drain splits the stream
    ([[0, 1, 2], [0, 1, 2]], "refuted"),  # fan-out: each sees all
    ([[0, 1], [1, 2]], "partial"),
    ([[], []], "inconclusive"),
])
def test_one_consumer_rule(seqs, verdict):
    rows = [{"consumer": i, "seqs": s, "gaps": 0} for i, s in enumerate(seqs)]
    assert _guarded(events_ownership.verdict(rows, [])).verdict == verdict


def _marks(*kinds):
    return [{"mark": k, "count": n, "seq": 0, "detail": k, "t_s": 0.0} for k, n in kinds]


@pytest.mark.parametrize("marks,rows,verdict", [
    (_marks(("gap", 5), ("cleared", 5)), [(0, 64), (64, 64)], "confirmed"),
    (_marks(("gap", 5), ("cleared", 5)), [(0, 64), (0, 64)], "refuted"),
    (_marks(("gap", 5), ("replayed", 5)), [(64, 64), (64, 64)], "inconclusive"),  # the buffer held it all
    (_marks(("events", 1)), [(64, 64)], "inconclusive"),  # no gap
])
def test_overflow_rule(marks, rows, verdict):
    rows = [{"request": i, "predicted": p, "reported": r} for i, (p, r) in enumerate(rows)]
    assert _guarded(events_overflow.verdict(rows, marks)).verdict == verdict


def _iso(cross_pred, cross_rep, repeat_pred, repeat_rep):
    return [{"prompt": 0, "step": 0, "tenant": "A", "predicted": 0, "reported": 0},
            {"prompt": 0, "step": 1, "tenant": "B", "predicted": cross_pred, "reported": cross_rep},
            {"prompt": 0, "step": 2, "tenant": "A", "predicted": repeat_pred, "reported": repeat_rep}]


@pytest.mark.parametrize("rows,verdict", [
    (_iso(0, 0, 64, 64), "confirmed"),
    (_iso(0, 0, 32, 64), "partial"),
    (_iso(64, 0, 64, 64), "refuted"),  # the inventory merges tenants
    (_iso(64, 64, 64, 64), "refuted"),  # the engine itself merges them
    (_iso(0, 0, 0, 0), "inconclusive"),
    (_iso(0, None, 64, 64), "inconclusive"),
])
def test_isolation_rule(rows, verdict):
    assert _guarded(events_isolation.verdict(rows)).verdict == verdict


@pytest.mark.parametrize("name", EVENT_PROBES)
def test_llamacpp_has_no_event_stream(run_probe, name):
    f = run_probe(name)
    assert f.verdict == "not-applicable"
    assert "kv_events" not in f.evidence["rows"][0]["observers"] and "no KV event stream" in f.summary


@pytest.mark.parametrize("name", EVENT_PROBES)
def test_trtllm_is_not_run_here(name, tmp_path):
    f = probes.run(name, engine="trtllm", model="synthetic:tiny", out=tmp_path, isolated=False)
    assert f.verdict == "not-run" and "tensorrt_llm" in f.reason
