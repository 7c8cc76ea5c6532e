"""contract.conformance on the TensorRT-LLM double (``tests/doubles/fake_tensorrt_llm``, 1.2.1 and 1.4.0rc1): each
verdict read from what the engine counted through a channel the session adapter's answers do not pass through
(TensorRT-LLM's iteration stats: ``numCtxTokens``, ``kvCacheStats.reusedBlocks``), and driven otherwise by a fault.

The double models the LLM API as the TensorRT-LLM source shows it (``tests/cells/test_trtllm_double.py``: the
iteration stats row cites ``py_executor.py`` and ``model_engine.py``); nothing here is a finding on TensorRT-LLM.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from doubles.trtllm_fixture import fake_trt14, fake_trt_any, model_dir  # noqa: F401 - the fixtures

from workbench.cells.trtllm import cell as trtllm_cell
from workbench.cells.trtllm.session import TrtllmSession
from workbench.probes import conformance as cf
from workbench.transport.contract import Config, OpenSessionRequest, PrefixInput
from workbench.transport.daemon import Daemon
from workbench.transport.errors import ContextOverflowError
from workbench.transport.manifest import ManifestIdentity, chat_turn

PARAMS = cf.Params(prompt_words=8, suffix_words=2, context_tokens=512)


@pytest.fixture
def trt_run(tmp_path):
    """A conformance run against a daemon on the double: ``make(session_cls, opener)``."""
    opened = []

    def make(session_cls=TrtllmSession, opener=None):
        d = Daemon("trtllm", str(model_dir(tmp_path / f"m{len(opened)}")), options={"context_tokens": 512},
                   faults=True, session_cls=session_cls, opener=opener).start()
        opened.append(d)
        client = d.client()
        ev = client.evidence("Daemon")
        ident = ManifestIdentity(profile_id="t", backend=ev["backend"], add_bos=True, runtime_digest="1" * 64)
        return cf.Run(d, client, PARAMS, np.random.default_rng(0), ident, ev["declared"],
                      max(int(ev.get("block_tokens") or 1), 1))

    for i in range(3):
        (tmp_path / f"m{i}").mkdir()
    yield make
    for d in opened:
        d.stop()


def _verdict(run, row):
    return cf.DECIDE[row](run.values, run.declared).verdict


# --------------------------------------------------------------------------- review item 1: a work counter


def test_the_engines_iteration_stats_count_its_work_and_a_refused_call_moves_none_of_it(fake_trt_any, trt_run):
    run = trt_run()
    w0 = run.work()
    assert w0 is not None and {"prompt_tokens_computed", "prompt_tokens_cached", "iterations"} <= set(w0)
    sess = run.open(num_ctx=16)
    s, _, m = chat_turn([("system", "a system text far longer than sixteen tokens"), ("user", "hi")], 1, run.ident)
    with pytest.raises(ContextOverflowError):
        sess.ensure_prefix(PrefixInput(text=s, manifest=m))
    assert cf.work_delta(w0, run.work()) == 0  # refused before dispatch: no iteration ran
    wide = run.open()
    st = wide.ensure_prefix(PrefixInput(text=s, manifest=m))
    w1 = run.work()
    assert cf.key_delta(w0, w1, "prompt_tokens_computed") == st.prefilled_tokens > 0
    # the stats drained for the work count still reach the iteration_stats observer, once
    observed = run.daemon.service.cell.drain_iteration_stats()
    assert observed and sum(e["inflightBatchingStats"]["numCtxTokens"] for e in observed) == st.prefilled_tokens
    assert run.daemon.service.cell.drain_iteration_stats() == []


class NoGate(TrtllmSession):
    """Ignores the session's NumCtx: an overflowing request reaches the engine."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.num_ctx = 10**6


def test_the_rows_that_rest_on_engine_work_read_and_an_overflow_that_reaches_tensorrt_llm_is_refuted(
        fake_trt_any, trt_run):
    """With no work counter these rows read inconclusive ("the engine keeps no work counter the daemon can read");
    now they read the engine, both ways."""
    run = trt_run()
    cf.wire(run)
    base = cf.manifest_and_prefix(run)
    cf.describe_overflow(run, base)
    cf.embed(run)
    for row in ("cell.wire", "contract.overflow", "contract.describe", "contract.embed"):
        assert _verdict(run, row) == "confirmed", row
    leaky = trt_run(NoGate)
    cf.describe_overflow(leaky, cf.manifest_and_prefix(leaky))
    assert leaky.values["conf_engine_work_overflow"] > 0
    assert _verdict(leaky, "contract.overflow") == _verdict(leaky, "contract.describe") == "refuted"


# --------------------------------------------------------------------------- review item 2: an independent reuse channel


def test_a_cell_that_misreads_the_engines_reuse_is_refuted_by_the_iteration_stats(fake_trt_any, trt_run, monkeypatch):
    """The reviewer's construction: the cell's own reading of reuse forced to 0 (on 1.4 its exact cached_tokens).
    PrefixStatus then says nothing was reused; the engine's iteration stats, read beside the call, say otherwise."""
    honest = trt_run()
    cf.manifest_and_prefix(honest)
    assert _verdict(honest, "contract.ensure_prefix") == "confirmed"
    warm = trtllm_cell.TrtLlmCell._warm
    monkeypatch.setattr(trtllm_cell.TrtLlmCell, "_warm",
                        lambda self, *a, **k: dataclasses.replace(warm(self, *a, **k), reused_tokens=0))
    run = trt_run()
    cf.manifest_and_prefix(run)
    assert run.values["conf_prefix_counters_exact"] < 1.0
    assert _verdict(run, "contract.ensure_prefix") == "refuted"
    assert run.values["conf_engine_reuse_same"] > 0  # the engine did reuse: the manifest row still reads it


# --------------------------------------------------------------------------- review item 5: RecomputeRange as an operation


class DeniesRecompute(TrtllmSession):
    """Reports RecomputeRange false though its Restore re-prefills a snapshot's tokens."""

    @classmethod
    def capabilities_of(cls, cell):
        return dataclasses.replace(super().capabilities_of(cell), recompute_range=False)


def test_recompute_range_is_judged_by_the_engine_and_the_output_not_by_the_report(fake_trt14, trt_run):
    run = trt_run()
    base = cf.manifest_and_prefix(run)
    cf.snapshot(run, base)
    cf.capabilities(run, base)
    assert run.values["_recompute"]["restored"] is True and _verdict(run, "parity.capability_truth") == "confirmed"
    lying = trt_run(DeniesRecompute)
    base = cf.manifest_and_prefix(lying)
    cf.snapshot(lying, base)
    cf.capabilities(lying, base)
    assert _verdict(lying, "parity.capability_truth") == "refuted"


# --------------------------------------------------------------------------- review item 7: the slot switch's teardown


def test_a_reload_that_keeps_the_engine_is_seen_to_leak_under_the_same_salt(fake_trt14, trt_run, tmp_path):
    """A daemon whose LoadModel keeps the running engine (its opener hands back the cell it opened first, and that
    cell's close does nothing). Switched to an adapter, the new salt would hide the leak; reloaded as the same
    variant, the engine's own count shows the prefix reused from before the switch."""
    from workbench import cells

    kept: list = []

    def keep(engine, model, **options):
        if not kept:
            kept.append(cells.open_cell(engine, model, **options))
            kept[0].close = lambda: None
        return kept[0]

    run = trt_run(opener=keep)
    base = cf.manifest_and_prefix(run)
    adapter = TrtllmSession.write_adapter(run.daemon.service.cell, str(tmp_path / "lora"), 0)
    cf.switch_and_lora(run, base, adapter)  # as the probe runs it: with the adapter it wrote
    assert run.values["conf_switch_engine_reuse"] > 0 and _verdict(run, "contract.slot_switch") == "refuted"
    honest = trt_run()
    cf.switch_and_lora(honest, cf.manifest_and_prefix(honest), adapter)
    assert honest.values["conf_switch_engine_reuse"] == 0 and _verdict(honest, "contract.slot_switch") == "confirmed"


# --------------------------------------------------------------------------- review item 9: a long template header


def test_the_small_window_is_sized_from_the_render_so_a_long_template_header_does_not_abort_the_probe(
        fake_trt14, trt_run):
    """The double renders one token per character, so even a two-word system turn is past a fixed NumCtx of 24 (as
    Llama-3's knowledge-date header would be): the window is sized from the cell's own render instead."""
    run = trt_run()
    base = cf.manifest_and_prefix(run)
    cf.describe_overflow(run, base)
    assert run.values["conf_describe_window"] > 24
    assert _verdict(run, "contract.overflow") == _verdict(run, "contract.describe") == "confirmed"
    small = run.client.open_session(OpenSessionRequest(config=Config(num_ctx=24)))
    s, _, m = chat_turn([("system", "thunder compass"), ("user", "x")], 1, run.ident)
    with pytest.raises(ContextOverflowError):  # what the fixed window met: the probe no longer opens one
        small.ensure_prefix(PrefixInput(text=s, manifest=m))


def test_no_window_between_the_two_renders_is_an_inconclusive_row_not_a_crash(fake_trt14, trt_run):
    run = trt_run()
    base = cf.manifest_and_prefix(run)
    cf.describe_overflow(run, dict(base, prefix_tokens=1))  # a stable prefix no longer than the small one
    assert any(r["row"] == "contract.overflow" and r["ok"] is None for r in run.rows)
    assert _verdict(run, "contract.overflow") == _verdict(run, "contract.describe") == "inconclusive"

