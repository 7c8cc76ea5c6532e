"""The event-plane probes' rules as tables, one row per verdict each can return; on the real llama.cpp every
event-plane probe is not-applicable with the engine's observers as evidence (it has no event stream)."""

from __future__ import annotations

import pytest

from workbench import probes
from workbench.probes import at_most_inconclusive_without_engine
from workbench.engine import KvEvent
from workbench.cells.trtllm.hashing import TRTLLM_SALT_SCHEMES, TrtllmHasher
from workbench.cells.vllm.hashing import VllmHasher
from workbench.probes import (events_admission, events_fidelity, events_isolation, events_overflow, events_ownership,
                              events_parity)

EVENT_PROBES = ("events.inventory_fidelity", "events.hash_parity", "events.one_consumer", "events.overflow_resync",
                "events.inventory_isolation")
RIGHT = "right"


def _guarded(o):
    return at_most_inconclusive_without_engine(o)


def _fid(pairs, arm=RIGHT, blind=None):
    """Rows of one arm; ``blind``: what an inventory ignoring removals predicted (default: request 0 asked for an
    evicted block, so the engine reported less than it)."""
    blind = blind or [64] + [p for p, _ in pairs[1:]]
    return [{"request": i, "arm": arm, "predicted": p, "reported": r}
            | ({"predicted_ignoring_removals": b} if arm == RIGHT else {})
            for i, ((p, r), b) in enumerate(zip(pairs, blind))]


@pytest.mark.parametrize("rows,evicted,verdict,diagnosis", [
    # the wrong arms' hits stay 0, but event ownership, the claim's third cause, is never tested: partial
    (_fid([(0, 0), (64, 64)]) + _fid([(0, 0), (0, 64)], "wrong"), 3, "confirmed", "partial"),
    # evictions happened, but no request asked for an evicted block: ignoring removals predicts the same
    (_fid([(0, 0), (64, 64)], blind=[0, 64]) + _fid([(0, 0), (0, 64)], "wrong"), 3, "inconclusive", "partial"),
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
    assert any("not tested: event ownership" in n for n in o.notes)


@pytest.mark.parametrize("rows,verdict", [
    ([{"engine_blocks": 3, "equal": 3}], "confirmed"),
    ([{"engine_blocks": 3, "equal": 1}], "partial"),
    ([{"engine_blocks": 3, "equal": 0}], "refuted"),
    ([{"engine_blocks": 0, "equal": 0}], "inconclusive"),
])
def test_parity_rule(rows, verdict):
    assert _guarded(events_parity.verdict(rows, "0", "0")).verdict == verdict


def _stored(chain, block_size=4):
    return [KvEvent("stored", i, (h,), None, ((1,) * block_size,)) for i, h in enumerate(chain)]


PROMPT = list(range(100, 109))  # two stored blocks of 4 (the last token never enters a key)


@pytest.mark.parametrize("engine,verdict,named", [  # the engine hashes under each scheme; the client declares 1.2
    (TrtllmHasher(4), "confirmed", None),
    (TrtllmHasher(4, TRTLLM_SALT_SCHEMES[1]), "partial", "std::hash<std::string>"),
    (TrtllmHasher(4, TRTLLM_SALT_SCHEMES[2]), "partial", "does not enter the block key"),
    (VllmHasher(4, "sha256", "0"), "refuted", None),  # a scheme no row of the table knows: refuted, as before
])
def test_parity_names_a_release_whose_salt_scheme_changed(engine, verdict, named):
    rows = [{"request": i, **events_parity.request_row(_stored(engine.chain(PROMPT, salt=f"s{i}")), PROMPT,
                                                       f"s{i}", TrtllmHasher(4))} for i in range(2)]
    o = _guarded(events_parity.verdict(rows, "0", "0", "trtllm 1.3.0", TrtllmHasher(4)))
    assert o.verdict == verdict, o.summary
    assert ("hash scheme changed in trtllm 1.3.0" in o.summary) == bool(named), o.summary
    assert named is None or named in o.summary


def test_parity_compares_full_blocks_and_leaves_a_partial_tail_apart():
    h = events_parity.compare  # TensorRT-LLM: three context blocks, then the partial tail stored on release
    stored = [KvEvent("stored", 1, (7, 8, 9), None, ((1,) * 4,) * 3), KvEvent("stored", 2, (10,), 9, ((2,),))]
    assert h(stored, [7, 8, 9], 4) | {"first_engine": None} == {
        "engine_blocks": 3, "partial_blocks": 1, "client_blocks": 3, "equal": 3, "first_engine": None,
        "first_client": 7}
    assert h(stored, [7, 5, 6], 4)["equal"] == 1  # a chain that diverges after block 0
    assert h(stored, [], 4)["equal"] == 0


@pytest.mark.parametrize("seqs,verdict", [
    ([[0, 2, 4], [1, 3]], "confirmed"),  # a destructive drain splits the stream
    ([[0, 1, 2], [0, 1, 2]], "refuted"),  # fan-out: each sees all
    ([[0, 1], [1, 2]], "partial"),
    ([[0, 1, 2], []], "inconclusive"),  # the second received nothing: it took nothing from the first
    ([[0, 2], []], "inconclusive"),
    ([[], []], "inconclusive"),
])
def test_one_consumer_rule(seqs, verdict):
    rows = [{"consumer": i, "seqs": s, "gaps": 0} for i, s in enumerate(seqs)]
    assert _guarded(events_ownership.verdict(rows, [])).verdict == verdict


def test_numbers_the_cell_drained_itself_are_not_part_of_the_split():
    rows = [{"consumer": i, "seqs": s, "gaps": 0} for i, s in enumerate([[0, 3, 5], [4, 6]])]
    assert events_ownership.verdict([dict(r) for r in rows], [], frozenset({1, 2})).verdict == "confirmed"
    assert events_ownership.verdict(rows, []).verdict == "partial"  # 1 and 2 would read as lost


def _marks(*kinds):
    return [{"mark": k, "count": n, "seq": 0, "detail": k, "t_s": 0.0, "cause": cause}
            for k, n, cause in (x if len(x) == 3 else (*x, "") for x in kinds)]


LOST = ("cleared", 5, "beyond-buffer")


@pytest.mark.parametrize("marks,rows,verdict", [
    (_marks(("gap", 5), LOST), [(0, 64), (64, 64)], "confirmed"),
    (_marks(("gap", 5), ("cleared", 5, "no-replay")), [(0, 0), (64, 64)], "confirmed"),  # TensorRT-LLM: no replay
    (_marks(("gap", 5), LOST), [(0, 64), (0, 64)], "refuted"),
    # the consumer cleared by its own policy, never asking the buffer: no loss of the engine's is shown
    (_marks(("gap", 5), ("cleared", 5, "policy")), [(0, 64), (64, 64)], "inconclusive"),
    # nothing after the resync hit: an empty inventory would predict the same zeros
    (_marks(("gap", 5), LOST), [(0, 64), (0, 0), (0, 0)], "inconclusive"),
    (_marks(("gap", 5), LOST), [(0, 64), (64, None)], "inconclusive"),  # no engine count
    (_marks(("gap", 5), ("replayed", 5)), [(64, 64), (64, 64)], "inconclusive"),  # the buffer held it all
    (_marks(("events", 1)), [(64, 64)], "inconclusive"),  # no gap
])
def test_overflow_rule(marks, rows, verdict):
    rows = [{"request": i, "predicted": p, "reported": r} for i, (p, r) in enumerate(rows)]
    assert _guarded(events_overflow.verdict(rows, marks)).verdict == verdict


def _iso(cross_pred, cross_rep, repeat_pred, repeat_rep, arm="salt"):
    return [{"arm": arm, "prompt": 0, "step": 0, "tenant": "A", "predicted": 0, "reported": 0},
            {"arm": arm, "prompt": 0, "step": 1, "tenant": "B", "predicted": cross_pred, "reported": cross_rep},
            {"arm": arm, "prompt": 0, "step": 2, "tenant": "A", "predicted": repeat_pred, "reported": repeat_rep}]


@pytest.mark.parametrize("rows,verdict", [
    (_iso(0, 0, 64, 64), "confirmed"),
    (_iso(0, 0, 32, 64), "partial"),
    (_iso(64, 0, 64, 64), "refuted"),  # the inventory merges tenants
    (_iso(64, 64, 64, 64), "refuted"),  # the engine itself merges them
    (_iso(0, 0, 0, 0), "inconclusive"),
    (_iso(0, None, 64, 64), "inconclusive"),
    (_iso(0, 0, 64, 64) + _iso(0, 0, 64, 64, "lora"), "confirmed"),
    (_iso(0, 0, 64, 64) + _iso(64, 0, 64, 64, "lora"), "refuted"),  # salts kept apart, the adapter merged
    (_iso(0, 0, 64, 64) + _iso(64, 64, 64, 64, "lora"), "refuted"),  # the engine reuses base KV for the adapter
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


def _adm(reported_block, reported_hash, reproduces, engine_block=32, status=200, decisions=("admitted", "refused")):
    return [{"rule_block": b, "reported_block": reported_block, "reported_hash": reported_hash,
             "reported_hash_reproduces": reproduces, "engine_block": engine_block, "status": status, "decision": dec}
            for b, dec in zip((engine_block or 32, 16), decisions)]


LEGACY = ("admitted (legacy: nothing reported)",) * 2


@pytest.mark.parametrize("rows,verdict", [
    (_adm(32, "sha256", True), "confirmed"),
    (_adm(None, None, None, status=404, decisions=LEGACY), "refuted"),  # TensorRT-LLM 1.2's shape: admitted blind
    (_adm(64, "sha256", True, decisions=("refused", "refused")), "refuted"),  # a block size the events contradict
    (_adm(32, "sha256", False), "refuted"),  # a hash that does not recompute the engine's stored hashes
    (_adm(32, None, None), "partial"),
    (_adm(32, "xxhash", None), "partial"),  # named, but not reproducible here: unchecked
    (_adm(32, "sha256", True)[:1], "partial"),  # no mismatched rule in the rows: no refusal was seen
    (_adm(32, "sha256", True, engine_block=None), "inconclusive"),
    (_adm(32, "sha256", True, status=503), "inconclusive"),
])
def test_admission_rule(rows, verdict):
    assert _guarded(events_admission.verdict(rows)).verdict == verdict


def test_the_engine_block_size_is_read_from_chained_blocks_not_a_partial_tail():
    full = KvEvent("stored", 1, (11, 12), None, ((1,) * 32, (2,) * 32))
    tail = KvEvent("stored", 2, (13,), 12, ((3,) * 7,))  # TensorRT-LLM stores a request's partial tail on release
    assert events_admission.engine_block_size([tail]) is None  # a lone block: no parent, so not known to be full
    assert events_admission.engine_block_size([full, tail]) == 32
    lone = KvEvent("stored", 3, (14,), None, ((4,) * 64,))
    child = KvEvent("stored", 4, (15,), 14, ((5,) * 64,))
    assert events_admission.engine_block_size([lone, child]) == 64  # a parent in an earlier event is full


class _StreamCtx:
    """A probe context whose one cell announces ``observers`` (a kv_events stream or none), recording its options."""

    def __init__(self, tmp_path, observers, engine="vllm"):
        from types import SimpleNamespace

        self.tmp, self.opened, self.closed, self.engine = tmp_path, [], False, engine
        d = SimpleNamespace(observers=observers, absent={} if observers else {"kv_events": "no stream here"},
                            engine="e", engine_version="1", extra={})
        self.cell = SimpleNamespace(describe=lambda: d, close=lambda: setattr(self, "closed", True))

    def scratch(self, prefix):
        return self.tmp

    def open(self, **options):
        self.opened.append(options)
        return self.cell


@pytest.mark.parametrize("observers, verdict, measured", [
    (("kv_events",), "confirmed", True),  # a stream: measured, on the cell, with the probe's seeded generator
    ((), "not-applicable", False),  # none: the engine's own answer, nothing measured, the cell closed
])
def test_every_event_probe_opens_its_stream_alike(tmp_path, observers, verdict, measured):
    from types import SimpleNamespace

    import numpy as np

    from workbench.probes.events_common import on_stream

    ctx, seen = _StreamCtx(tmp_path, observers), []

    def measure(c, p, cell, rng):
        seen.append((c, p, cell, rng.integers(1 << 30)))
        return probes.Outcome("confirmed", "measured")

    p = SimpleNamespace(hash_seed="7", seed=3)
    out = on_stream(ctx, p, measure, buffer_steps=5, budget_tokens=64 * 32)
    assert out.verdict == verdict and bool(seen) == measured and ctx.closed != measured
    assert seen in ([], [(ctx, p, ctx.cell, np.random.default_rng(3).integers(1 << 30))])
    first = ctx.opened[0]
    assert (first["hash_seed"], first["kv_budget_tokens"], first["context_tokens"]) == ("7", 64 * 32, 128)
    assert first["kv_events_config"]["buffer_steps"] == 5


def test_an_engine_whose_options_lack_the_stream_ones_is_opened_without_them(tmp_path):
    """Which options an engine takes is its registered options class's, not a guess from a refusal's wording."""
    from types import SimpleNamespace

    from workbench.probes.events_common import on_stream

    ctx = _StreamCtx(tmp_path, ("kv_events",), engine="trtllm")
    on_stream(ctx, SimpleNamespace(hash_seed="7", seed=3), lambda c, p, cell, rng: probes.Outcome("confirmed", "m"))
    assert ctx.opened == [{"kv_budget_tokens": 32 * 32, "context_tokens": 128}]


@pytest.mark.parametrize("module", [events_fidelity, events_isolation, events_overflow, events_ownership,
                                    events_parity])
def test_each_event_probe_opens_through_the_one_helper(module, monkeypatch):
    opened = probes.Outcome("not-applicable", "no stream")
    monkeypatch.setattr(module, "on_stream", lambda ctx, p, measure, **kw: opened)
    probe = next(v for v in vars(module).values() if isinstance(v, type) and issubclass(v, probes.Probe)
                 and v is not probes.Probe)
    assert probe().run(None, probe.Params()) is opened
