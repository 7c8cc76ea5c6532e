"""contract.conformance: every row's ladder as a table, and each verdict driven otherwise by a fault on the real
llama.cpp through the daemon (a capability that lies, a counter that does not advance, an overflow that reaches the
engine, a stale fence accepted, an adapter identity dropped from the salt, a poisoned session that goes back to the
engine)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from conftest import require_engine
from workbench.cells.llamacpp.session import LlamaSession
from workbench.probes import conformance as cf
from workbench.transport.contract import ResidencyCapabilities
from workbench.transport.manifest import ManifestIdentity

LLAMA = {"can_defer": False, "defers_by_default": False}
REQUEST = {"can_defer": True, "defers_by_default": True}

TABLE = [  # row, readings, declared, verdict
    ("cell.wire", {"conf_engine_work_stale_fence": 0, "conf_wire_refusals": 1.0}, LLAMA, "confirmed"),
    ("cell.wire", {"conf_engine_work_stale_fence": 3, "conf_wire_refusals": 0.5}, LLAMA, "refuted"),
    ("cell.wire", {"conf_engine_work_stale_fence": 0, "conf_wire_refusals": 0.5}, LLAMA, "inconclusive"),
    ("contract.manifest", {"conf_engine_reuse_same": 40, "conf_engine_reuse_cross": 0}, LLAMA, "confirmed"),
    ("contract.manifest", {"conf_engine_reuse_same": 40, "conf_engine_reuse_cross": 32}, LLAMA, "refuted"),
    ("contract.manifest", {"conf_engine_reuse_same": 0, "conf_engine_reuse_cross": 0}, LLAMA, "inconclusive"),
    ("contract.ensure_prefix", {"conf_prefix_counters_exact": 1.0}, LLAMA, "confirmed"),
    ("contract.ensure_prefix", {"conf_prefix_counters_exact": 0.6}, LLAMA, "refuted"),
    ("contract.ensure_prefix", {}, LLAMA, "inconclusive"),
    ("contract.prefill_suffix", {"conf_suffix_counters_exact": 1.0}, LLAMA, "not-applicable"),
    ("contract.prefill_suffix", {"conf_suffix_counters_exact": 1.0, "conf_deferred_engine_work": 0,
                                 "conf_deferred_carried": True}, REQUEST, "confirmed"),
    ("contract.prefill_suffix", {"conf_suffix_counters_exact": 1.0, "conf_deferred_engine_work": 40}, REQUEST, "refuted"),
    ("contract.prefill_suffix", {"conf_suffix_counters_exact": 0.5, "conf_deferred_engine_work": 0}, REQUEST, "refuted"),
    ("contract.decode", {"conf_engine_decoded_tokens": 8, "conf_structured_valid": True, "conf_stream_frames": 8},
     LLAMA, "confirmed"),
    ("contract.decode", {"conf_engine_decoded_tokens": 8, "conf_structured_valid": True, "conf_stream_frames": 1},
     LLAMA, "partial"),
    ("contract.decode", {"conf_engine_decoded_tokens": 8, "conf_structured_valid": False}, LLAMA, "refuted"),
    ("contract.explain_context", {"conf_caps_lies": 0, "_caps_row": True}, REQUEST, "confirmed"),
    ("contract.explain_context", {"conf_caps_lies": 0, "_caps_row": False}, LLAMA, "not-applicable"),
    ("contract.explain_context", {"conf_caps_lies": 1}, LLAMA, "refuted"),
    ("parity.capability_truth", {"conf_caps_lies": 0}, LLAMA, "confirmed"),
    ("parity.capability_truth", {"conf_caps_lies": 2}, LLAMA, "refuted"),
    ("parity.capability_truth", {}, LLAMA, "inconclusive"),
    ("contract.snapshot", {"conf_restore_output_equal": True, "conf_snapshot_engine_blob": False}, REQUEST, "confirmed"),
    ("contract.snapshot", {"conf_restore_output_equal": True, "conf_snapshot_engine_blob": True}, LLAMA,
     "not-applicable"),
    ("contract.snapshot", {"conf_restore_output_equal": False}, LLAMA, "refuted"),
    ("contract.describe", {"conf_engine_work_overflow": 0, "_overflow_right": True, "conf_describe_window_right": True,
                           "conf_describe_kv_bytes_match": True}, LLAMA, "confirmed"),
    ("contract.describe", {"conf_engine_work_overflow": 0, "_overflow_right": True, "conf_describe_window_right": True,
                           "conf_describe_kv_bytes_match": None}, REQUEST, "confirmed"),
    ("contract.describe", {"conf_engine_work_overflow": 0, "_overflow_right": True, "conf_describe_window_right": True,
                           "conf_describe_kv_bytes_match": False}, LLAMA, "refuted"),
    ("contract.describe", {"conf_engine_work_overflow": 0, "_overflow_right": True, "conf_describe_window_right": False,
                           "conf_describe_kv_bytes_match": True}, LLAMA, "refuted"),
    ("contract.describe", {"conf_engine_work_overflow": 12}, LLAMA, "refuted"),
    ("contract.describe", {}, LLAMA, "inconclusive"),
    ("contract.overflow", {"conf_engine_work_overflow": 0, "_overflow_right": True}, LLAMA, "confirmed"),
    ("contract.overflow", {"conf_engine_work_overflow": 53}, LLAMA, "refuted"),
    ("contract.overflow", {"conf_engine_work_overflow": 0, "_overflow_right": False}, LLAMA, "inconclusive"),
    ("contract.embed", {"conf_engine_work_embed": 0, "conf_embed_vector": 0, "_embed_refused": True}, REQUEST,
     "confirmed"),
    ("contract.embed", {"conf_engine_work_embed": 0, "conf_embed_vector": 576}, LLAMA, "not-applicable"),
    ("contract.embed", {"conf_engine_work_embed": 5, "conf_embed_vector": 0}, REQUEST, "refuted"),
    ("contract.lora", {"lora_changed_output": True, "_lora_identity": True}, LLAMA, "confirmed"),
    ("contract.lora", {"lora_changed_output": False}, LLAMA, "refuted"),
    ("contract.lora", {"lora_changed_output": True, "_lora_identity": False}, LLAMA, "inconclusive"),
    ("contract.slot_switch", {"conf_switch_engine_reuse": 0, "conf_switch_generation": 1, "_switch_refusals": True,
                              "conf_engine_reuse_same": 40}, LLAMA, "confirmed"),
    # no room to differ: an engine that reused nothing before the switch reuses nothing after it either
    ("contract.slot_switch", {"conf_switch_engine_reuse": 0, "conf_switch_generation": 1, "_switch_refusals": True,
                              "conf_engine_reuse_same": 0}, LLAMA, "inconclusive"),
    ("contract.slot_switch", {"conf_switch_engine_reuse": 53}, LLAMA, "refuted"),
    ("parity.fatal", {"conf_fatal_engine_failed": True, "conf_engine_work_after_fatal": 0,
                      "conf_engine_work_after_heal": 40, "conf_fatal_reported": True}, LLAMA, "confirmed"),
    ("parity.fatal", {"conf_fatal_engine_failed": True, "conf_engine_work_after_fatal": 49,
                      "conf_engine_work_after_heal": 40, "conf_fatal_reported": True}, LLAMA, "refuted"),
    ("parity.fatal", {"conf_fatal_engine_failed": True, "conf_engine_work_after_fatal": 0,
                      "conf_engine_work_after_heal": 0, "conf_fatal_reported": True}, LLAMA, "inconclusive"),
    ("parity.fatal", {"conf_fatal_engine_failed": False, "conf_engine_work_after_fatal": 0}, LLAMA, "inconclusive"),
    ("parity.deferred_prefill", {"conf_suffix_counters_exact": 1.0}, LLAMA, "not-applicable"),
    ("parity.deferred_prefill", {"conf_suffix_counters_exact": 0.5}, LLAMA, "refuted"),
    ("parity.deferred_prefill", {"conf_suffix_counters_exact": 1.0, "conf_deferred_engine_work": 0}, REQUEST,
     "confirmed"),
]


@pytest.mark.parametrize("row, values, declared, want", TABLE)
def test_each_rows_ladder(row, values, declared, want):
    assert cf.DECIDE[row](values, declared).verdict == want


def test_every_row_and_every_verdict_it_rests_is_declared():
    from workbench import metrics

    probe = cf.Conformance()
    for row, values, declared, _ in TABLE:
        d = cf.DECIDE[row](values, declared)
        if d.rests_on:
            assert metrics.undeclared(probe.rests, row, d.verdict, d.rests_on) is None, (row, d)
    assert set(cf.DECIDE) == set(cf.ROWS) == set(probe.claims)


# --------------------------------------------------------------------------- faults on the real llama.cpp


class LyingCaps(LlamaSession):
    """Reports RemoveTail false though llama.cpp removes the tail."""

    @classmethod
    def capabilities_of(cls, cell):
        return ResidencyCapabilities(remove_tail=False, remove_middle=True, position_shift=True)


class StuckCounters(LlamaSession):
    """PrefixStatus.ReusedTokens never advances, and PrefillSuffix never counts a physical prefill."""

    def ensure_prefix(self, prefix):
        st = super().ensure_prefix(prefix)
        st.reused_tokens, st.prefilled_tokens = 0, st.prefix_tokens
        return st

    def prefill_suffix(self, suffix):
        before = dict(self.counters)
        out = super().prefill_suffix(suffix)
        self.counters.update(before)
        return out


class NoGate(LlamaSession):
    """Ignores the session's NumCtx: an overflowing request reaches the engine."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.num_ctx = 10**6


class NoPoison(LlamaSession):
    """An engine failure is reported fatal but the session stays open and goes back to the engine."""

    def mark_fatal(self, err):
        from workbench.transport.errors import ErrSessionFatal

        self.fatal_error = self.fatal_error or str(err)
        return ErrSessionFatal(str(err))

    def _check(self):
        pass


class SaltWithoutAdapters(LlamaSession):
    """Derives its engine key from the manifest alone: the adapters (their digests, order, scale) are not folded in."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.adapters = ()


def _run(session_cls=LlamaSession, fence: bool = True, faults: bool = True):
    from workbench.transport.daemon import Daemon

    d = Daemon("llamacpp", "smollm2-135m", options={"context_tokens": 512, "threads": 1}, faults=faults,
               session_cls=session_cls, fence=fence).start()
    client = d.client()
    ev = client.evidence("Daemon")
    run = cf.Run(d, client, cf.Params(), np.random.default_rng(0),
                 ManifestIdentity(profile_id="t", backend=ev["backend"], add_bos=True, runtime_digest="1" * 64),
                 ev["declared"], 1)
    return d, run


@pytest.fixture
def llama():
    """A run on the real llama.cpp through the daemon; when the test ends, every reading it took is given again by
    its rows alone (:func:`conformance.readings`, what a reader re-derives the finding's verdicts from)."""
    require_engine("llamacpp")
    opened = []

    def make(*a, **k):
        d, run = _run(*a, **k)
        opened.append((d, run))
        return run

    yield make
    for d, run in opened:
        d.stop()
    for _, run in opened:  # (``_recompute`` is the snapshot's case handed to the capability rows, which record it)
        _again(run)


def _again(run) -> None:
    """Every reading ``run`` took is given again by its rows alone (what a reader re-derives the verdicts from)."""
    again = cf.readings(json.loads(json.dumps(run.rows)), run.block)
    took = {k: v for k, v in run.values.items() if k != "_recompute"}
    assert {k: again.get(k) for k in took} == took, run.rows


@pytest.fixture(scope="module")
def honest():
    """One run on the honest adapter through every stage the two tests on it read (manifest and prefix, snapshot,
    capabilities, describe and overflow, fatal): one daemon start, not one per test."""
    require_engine("llamacpp")
    d, run = _run()
    try:
        base = cf.manifest_and_prefix(run)
        cf.snapshot(run, base)
        cf.capabilities(run, base)
        cf.describe_overflow(run, base)
        cf.fatal(run, base)
    finally:
        d.stop()
    _again(run)
    return run


@pytest.mark.slow
def test_the_rows_hold_on_the_honest_adapter_and_a_lying_capability_is_refuted(honest, llama):
    run = honest
    assert cf.DECIDE["contract.manifest"](run.values, run.declared).verdict == "confirmed"
    assert cf.DECIDE["contract.ensure_prefix"](run.values, run.declared).verdict == "confirmed"
    assert cf.DECIDE["parity.capability_truth"](run.values, run.declared).verdict == "confirmed"
    assert cf.DECIDE["contract.overflow"](run.values, run.declared).verdict == "confirmed"
    lying = llama(LyingCaps)
    cf.capabilities(lying, cf.manifest_and_prefix(lying))
    assert cf.DECIDE["parity.capability_truth"](lying.values, lying.declared).verdict == "refuted"


@pytest.mark.slow
def test_a_counter_that_does_not_advance_is_refuted(llama):
    run = llama(StuckCounters)
    base = cf.manifest_and_prefix(run)
    cf.prefill_suffix(run, base)
    assert cf.DECIDE["contract.ensure_prefix"](run.values, run.declared).verdict == "refuted"
    assert cf.DECIDE["parity.deferred_prefill"](run.values, run.declared).verdict == "refuted"


@pytest.mark.slow
def test_an_overflow_that_reaches_the_engine_is_refuted(llama):
    run = llama(NoGate)
    cf.describe_overflow(run, cf.manifest_and_prefix(run))
    assert run.values["conf_engine_work_overflow"] > 0
    assert cf.DECIDE["contract.overflow"](run.values, run.declared).verdict == "refuted"
    assert cf.DECIDE["contract.describe"](run.values, run.declared).verdict == "refuted"


@pytest.mark.slow
def test_a_stale_fence_accepted_is_refuted(llama):
    run = llama(fence=False)
    cf.wire(run)
    assert run.values["conf_engine_work_stale_fence"] > 0
    assert cf.DECIDE["cell.wire"](run.values, run.declared).verdict == "refuted"


@pytest.mark.slow
def test_a_poisoned_session_that_goes_back_to_the_engine_is_refuted(llama):
    run = llama(NoPoison)
    cf.fatal(run, cf.manifest_and_prefix(run))
    assert cf.DECIDE["parity.fatal"](run.values, run.declared).verdict == "refuted"


@pytest.mark.slow
def test_a_salt_without_the_adapters_keeps_the_lora_row_from_confirming(llama, tmp_path):
    run = llama(SaltWithoutAdapters)
    base = cf.manifest_and_prefix(run)
    adapter = LlamaSession.write_adapter(run.daemon.service.cell, str(tmp_path), 0)
    cf.switch_and_lora(run, base, adapter)
    assert run.values["lora_changed_output"] is True
    assert cf.DECIDE["contract.lora"](run.values, run.declared).verdict == "inconclusive"
    assert cf.DECIDE["contract.slot_switch"](run.values, run.declared).verdict == "confirmed"


class Liar(LlamaSession):
    """Four faults at once, each caught by its own engine reading (review items 4, 5, 6):

    * after an engine fault it answers as a poisoned session should (session_fatal on every later call, Closed and
      FatalError in its report) yet keeps its slot and sends the next EnsurePrefix to llama.cpp first, under a fault
      that aborts one llama_decode only;
    * it reports RecomputeRange though, as modeld's llama cell, its Restore takes the engine's state blob only;
    * Describe states 2 more KV bytes per token than llama.cpp holds, and twice the window asked for."""

    def mark_fatal(self, err):
        from workbench.transport.errors import ErrSessionFatal

        self.fatal_error = self.fatal_error or f"{type(err).__name__}: {err}"
        return ErrSessionFatal(self.fatal_error)  # the slot kept: the daemon still routes the session's calls

    def _check(self):
        pass

    def ensure_prefix(self, prefix):
        if not self.fatal_error:
            return super().ensure_prefix(prefix)
        from workbench.transport.errors import ErrSessionFatal

        super().ensure_prefix(prefix)  # goes to the engine
        raise ErrSessionFatal(self.fatal_error)

    def explain_context(self):
        rep = super().explain_context()
        rep.closed = rep.closed or bool(self.fatal_error)
        return rep

    @classmethod
    def inject_fault(cls, cell, sess):
        ll, seen = cell._ll, []
        cb = ll.ggml_abort_callback(lambda _data: not seen and not seen.append(1))  # aborts once
        cell._fault_abort = cb
        ll.llama_set_abort_callback(cell._ctx, cb, None)
        return "abort once"

    @classmethod
    def capabilities_of(cls, cell):
        return dataclasses.replace(super().capabilities_of(cell), recompute_range=True)

    @classmethod
    def kv_bytes_per_token(cls, cell):
        per_token, where = super().kv_bytes_per_token(cell)
        return per_token + 2, where

    @classmethod
    def model_info(cls, cell, config, policy, kv=None):
        info = super().model_info(cell, config, policy, kv)
        info.effective_context *= 2
        return info


@pytest.mark.slow
def test_each_lie_is_read_from_the_engine_not_from_the_adapters_own_word(llama):
    """Before: parity.fatal confirmed (the stage log of a session that poisoned itself could not count the dispatch),
    capability_truth confirmed (Restore read the reported flag), contract.describe confirmed (Describe's KV bytes were
    compared with themselves; a wrong window only left it inconclusive)."""
    run = llama(Liar)
    base = cf.manifest_and_prefix(run)
    cf.snapshot(run, base)
    cf.capabilities(run, base)
    cf.describe_overflow(run, base)
    cf.fatal(run, base)
    assert run.values["conf_engine_work_after_fatal"] > 0 and run.values["conf_engine_work_after_heal"] > 0
    assert cf.DECIDE["parity.fatal"](run.values, run.declared).verdict == "refuted"
    assert run.values["_recompute"]["restored"] is False  # refused without the blob, whatever the report says
    assert cf.DECIDE["parity.capability_truth"](run.values, run.declared).verdict == "refuted"
    assert run.values["conf_describe_kv_bytes_match"] is False and run.values["conf_describe_window_right"] is False
    assert cf.DECIDE["contract.describe"](run.values, run.declared).verdict == "refuted"
    assert cf.DECIDE["contract.overflow"](run.values, run.declared).verdict == "confirmed"  # enforced all the same


@pytest.mark.slow
def test_the_honest_adapter_holds_where_the_liar_fails(honest):
    run = honest
    for row in ("parity.fatal", "parity.capability_truth", "contract.describe", "contract.ensure_prefix"):
        assert cf.DECIDE[row](run.values, run.declared).verdict == "confirmed", row
