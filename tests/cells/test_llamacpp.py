"""The llama.cpp cell on the real engine: exact reuse accounting, context editing, snapshots, limits."""

from __future__ import annotations

import json

import pytest

from conftest import TINY, ids
from workbench import ContextOverflow, ManifestMismatch, open_cell
from workbench.engine import Cell, Retention, WorkbenchError


def test_cell_satisfies_the_contract_protocol(cell):
    assert isinstance(cell, Cell)


def test_cold_prefix_computes_every_token(cell):
    st = cell.ensure_prefix(ids(100))
    assert (st.prompt_tokens, st.reused_tokens, st.computed_tokens, st.dropped_tokens) == (100, 0, 100, 0)
    assert st.exact and st.granularity_tokens == 1
    assert cell.explain_context().tokens == 100
    assert cell.position_range() == (0, 99)


def test_repeated_prefix_reuses_everything(cell):
    cell.ensure_prefix(ids(100))
    st = cell.ensure_prefix(ids(100))
    assert (st.reused_tokens, st.computed_tokens) == (100, 0)
    assert st.engine_counters["n_p_eval"] == 0


def test_extended_prefix_computes_only_the_extension(cell):
    cell.ensure_prefix(ids(100))
    st = cell.ensure_prefix(ids(130))
    assert (st.reused_tokens, st.computed_tokens, st.dropped_tokens) == (100, 30, 0)
    assert st.engine_counters["n_p_eval"] == 30


def test_divergent_prefix_drops_the_tail_in_the_engine(cell):
    cell.ensure_prefix(ids(100))
    other = ids(60) + ids(20, start=420)
    st = cell.ensure_prefix(other)
    assert (st.reused_tokens, st.computed_tokens, st.dropped_tokens) == (60, 20, 40)
    assert cell.position_range() == (0, 79)


def test_salt_changes_the_reuse_key(cell):
    cell.ensure_prefix(ids(50), salt="a")
    assert cell.ensure_prefix(ids(50), salt="b").reused_tokens == 0
    assert cell.ensure_prefix(ids(50), salt="b").reused_tokens == 50


def test_slots_are_independent_sequences(cell):
    cell.ensure_prefix(ids(40), slot=0)
    cell.ensure_prefix(ids(70, start=320), slot=1)
    assert cell.ensure_prefix(ids(40), slot=0).reused_tokens == 40
    assert cell.used_tokens() == 110
    with pytest.raises(ValueError, match="slot 2 does not exist"):
        cell.ensure_prefix(ids(5), slot=2)


def test_deferred_suffix_rides_the_next_decode(cell):
    cell.ensure_prefix(ids(40))
    st = cell.prefill_suffix(ids(10, start=400), defer=True)
    assert (st.computed_tokens, st.deferred_tokens) == (0, 10)
    assert cell.explain_context().pending_tokens == 10
    r = cell.decode(max_tokens=3)
    assert r.deferred_prefill_tokens == 10 and r.prompt_tokens == 50
    assert cell.explain_context().tokens == 50 + len(r.tokens) - 1


def test_eager_suffix_is_computed_now(cell):
    cell.ensure_prefix(ids(40))
    st = cell.prefill_suffix(ids(10, start=400))
    assert (st.reused_tokens, st.computed_tokens) == (40, 10)


def test_decode_is_deterministic_and_streams(cell):
    seen = []
    cell.ensure_prefix(ids(30))
    a = cell.decode(max_tokens=6, on_token=lambda t, piece, s: seen.append(t))
    cell.ensure_prefix(ids(30))
    b = cell.decode(max_tokens=6)
    assert a.tokens == b.tokens == seen and len(a.tokens) == 6
    assert a.finish_reason == "length" and a.ttft_s >= 0 and len(a.token_times_s) == 6
    assert all(x >= 0 for x in a.inter_token_s)


def test_fully_cached_prompt_recomputes_only_the_last_token_for_logits(cell):
    cell.ensure_prefix(ids(30))
    cell.decode(max_tokens=2)
    cell.ensure_prefix(ids(30))
    assert cell.decode(max_tokens=2).engine_counters["recomputed_last_token"] == 1


def test_json_schema_constrains_the_output(cell):
    cell.ensure_prefix(ids(20))
    r = cell.decode(max_tokens=12, json_schema={"type": "boolean"})
    assert json.loads(r.text) in (True, False)


def test_snapshot_round_trip_continues_identically(cell):
    cell.ensure_prefix(ids(64))
    snap = cell.snapshot()
    assert snap.manifest_digest == cell.manifest.digest and snap.kind == "kv"
    expected = cell.decode(max_tokens=8).tokens
    with open_cell("llamacpp", TINY, kv_budget_tokens=1024) as other:
        st = other.restore(snap)
        assert (st.reused_tokens, st.computed_tokens) == (64, 0)
        assert other.decode(max_tokens=8).tokens == expected


def test_snapshot_restore_onto_another_manifest_is_refused(cell):
    cell.ensure_prefix(ids(32))
    snap = cell.snapshot()
    with open_cell("llamacpp", "synthetic:tiny,seed=1", kv_budget_tokens=1024) as other:
        with pytest.raises(ManifestMismatch):
            other.restore(snap)
        assert other.explain_context().tokens == 0


def test_overflow_is_raised_before_dispatch(cell):
    cell.ensure_prefix(ids(100))
    before = cell.explain_context().tokens
    with pytest.raises(ContextOverflow) as e:
        cell.ensure_prefix(ids(1100))
    assert e.value.requested == 1100 and e.value.limit == 1024
    assert cell.explain_context().tokens == before  # nothing dispatched, nothing lost
    with pytest.raises(ContextOverflow):
        cell.decode(max_tokens=2000)


def test_shared_kv_pool_refuses_the_newcomer_not_the_resident(cell):
    cell.ensure_prefix(ids(600), slot=0)
    with pytest.raises(ContextOverflow, match="KV cache"):
        cell.ensure_prefix(ids(500, start=310), slot=1)
    assert cell.ensure_prefix(ids(600), slot=0).reused_tokens == 600


def test_middle_removal_shifts_positions(cell):
    cell.ensure_prefix(ids(100))
    assert cell.explain_context().capabilities.position_shift
    assert cell.remove_middle(20, 50) == 30
    assert cell.explain_context().tokens == 70
    assert cell.position_range() == (0, 69)
    expected_tokens = ids(20) + ids(100)[50:]
    assert cell.ensure_prefix(expected_tokens).reused_tokens == 70
    assert len(cell.decode(max_tokens=3).tokens) == 3


def test_tail_removal_and_range_recompute(cell):
    cell.ensure_prefix(ids(100))
    assert cell.remove_tail(10) == 10
    assert cell.position_range() == (0, 89)
    assert cell.recompute_range(40, 60) == 50
    assert cell.ensure_prefix(ids(90)).reused_tokens == 90


def test_shifted_import_keeps_greedy_continuation():
    with open_cell("llamacpp", TINY, kv_budget_tokens=1024) as a:
        a.ensure_prefix(ids(64))
        blob = a.export_state()
        ref = a.decode(max_tokens=6).tokens
    with open_cell("llamacpp", TINY, kv_budget_tokens=1024) as b:
        b.import_state(blob, ids(64), position_shift=25)
        assert b.position_range() == (25, 88)
        assert b.decode(max_tokens=6).tokens == ref


def test_chat_messages_render_through_the_model_template(cell):
    msgs = [{"role": "user", "content": "hi"}]
    assert cell.render(msgs) == "<|user|>hi\n<|assistant|>"
    a = cell.ensure_prefix(msgs)
    b = cell.ensure_prefix(msgs + [{"role": "assistant", "content": "yo"}, {"role": "user", "content": "ok"}])
    assert a.computed_tokens > 0 and b.reused_tokens > 0


def test_chat_template_runs_sandboxed(cell):
    cell._template = "{{ ''.__class__.__mro__[1].__subclasses__() }}"
    with pytest.raises(Exception, match="unsafe|access"):
        cell.render([{"role": "user", "content": "x"}])


def test_describe_reports_geometry_and_capacity(cell):
    d = cell.describe()
    g = d.geometry
    assert (g.layers, g.kv_heads, g.head_dim) == (2, 2, 16)
    assert g.bytes_per_token == 2 * 2 * 2 * 16 * 2
    assert d.kv_capacity_tokens == 1024 and d.kv_capacity_bytes == 1024 * g.bytes_per_token
    assert d.extra["kv_buffer_bytes"] == d.kv_capacity_bytes
    assert d.slots == 2 and "state_export" in d.observers


def test_the_layers_on_a_gpu_are_llamacpps_word_and_none_here():
    """A CPU build says nothing of offloading even when asked for every layer, so no arm counts as the CUDA cell;
    a GPU build's load log says "offloaded N/M layers to GPU" (llama.cpp src/llama-model.cpp, load_tensors)."""
    import dataclasses

    from workbench.cells.llamacpp._internals import offloaded_layers
    from workbench.loop.arms import on_gpu

    with open_cell("llamacpp", TINY, gpu_layers=-1) as c:
        d = c.describe()
    assert d.extra["offloaded_layers"] is None and not on_gpu(d)
    log = ["load_tensors: offloading output layer to GPU\n", "load_tensors: offloading 29 repeating layers to GPU\n",
           "load_tensors: offloaded 31/31 layers to GPU\n"]
    assert offloaded_layers(log) == (31, 31) and offloaded_layers(log[:2]) is None
    said = [dataclasses.replace(d, extra={"offloaded_layers": got}) for got in ([31, 31], [12, 31], [0, 31])]
    assert [on_gpu(x) for x in said] == [True, False, False]


def test_capacity_is_measured_by_the_engine_refusing():
    with open_cell("llamacpp", TINY, kv_budget_tokens=512) as c:
        assert c.measure_capacity() == 512


def test_capacity_kv_memory_is_the_engines_row_sizes_not_the_state_growth(cell, llama_api):
    """The state grows 268 B per token on the tiny model: 256 of K/V rows plus 12 of the cell's position, seq-id count
    and seq id (src/llama-kv-cache.cpp state_write_meta). kv_memory reads the rows from the engine, at two fill
    levels the same, and an empty cell is left empty."""
    empty = cell.kv_memory()
    assert empty.bytes_per_token == 256 and empty.pool_bytes is None
    assert cell.position_range() == (-1, -1) and cell.explain_context().tokens == 0  # the scratch token is gone
    sizes = {}
    for n in (8, 40):
        cell.ensure_prefix(ids(n))
        sizes[n] = llama_api.llama_state_seq_get_size(cell._ctx, 0)
        assert cell.kv_memory().bytes_per_token == 256
    assert (sizes[40] - sizes[8]) / 32 == 256 + 12


def test_capacity_kv_memory_refuses_a_state_it_cannot_walk(cell):
    from workbench.cells.llamacpp.state import parse_state

    cell.ensure_prefix(ids(8))
    blob = cell.export_state()
    state = parse_state(blob)
    assert (state.cells, state.row_bytes, state.positions) == (8, 256, tuple(range(8)))
    with pytest.raises(WorkbenchError, match="does not parse|ends early"):
        parse_state(blob + b"\0" * 4)  # a layout with more than the K/V rows is not guessed at
    with pytest.raises(WorkbenchError, match="ends early"):
        parse_state(blob[:40])


def test_byte_budget_sets_the_kv_size():
    with open_cell("llamacpp", TINY, kv_budget_bytes=512 * 256) as c:
        assert c.describe().kv_capacity_tokens == 512


def test_embed_returns_one_vector_per_text(cell):
    v = cell.embed(["hello", "world"])
    assert len(v) == 2 and len(v[0]) == 64 and v[0] != v[1]


def test_retention_is_accepted_and_validated(cell):
    assert cell.ensure_prefix(ids(10), retention=Retention(100, 500)).computed_tokens == 10
    with pytest.raises(ValueError, match="priority"):
        Retention(101)


def test_closed_cell_refuses_work():
    c = open_cell("llamacpp", TINY, kv_budget_tokens=256)
    c.close()
    c.close()
    with pytest.raises(Exception, match="closed"):
        c.ensure_prefix(ids(4))


def test_out_of_vocabulary_ids_are_rejected(cell):
    with pytest.raises(ValueError, match="out of range"):
        cell.ensure_prefix([1, 2, 99999])


def test_the_extra_buffer_decision_reaches_the_engine(monkeypatch):
    import llama_cpp

    from test_cpu import BUILD_AMX, SPR
    from workbench import cpu

    seen = []
    real = llama_cpp.llama_model_load_from_file
    monkeypatch.setattr(llama_cpp, "llama_model_load_from_file",
                        lambda path, params: seen.append(bool(params.use_extra_bufts)) or real(path, params))
    monkeypatch.setattr(cpu, "flags", lambda cpuinfo=None: SPR)
    monkeypatch.setattr(llama_cpp, "llama_print_system_info", lambda: BUILD_AMX.encode())
    with open_cell("llamacpp", TINY, kv_budget_tokens=256) as c:
        assert c.describe().extra["extra_buffers"] is False
    with open_cell("llamacpp", TINY, kv_budget_tokens=256, extra_buffers=True) as c:  # the option overrides
        assert "cell option" in c.describe().extra["extra_buffers_reason"]
    assert seen == [False, True]


@pytest.mark.slow
def test_the_default_model_decodes_on_this_cpu():
    """The first decode is where llama.cpp #20824 crashes; run it in a child so a crash is reported, not fatal."""
    from workbench import doctor

    rep = doctor.decode_check()
    assert rep["ok"], f"{rep['error']}\n" + "\n".join(rep.get("log_tail", []))
    assert len(rep["decoded"]["tokens"]) == doctor.DECODE_TOKENS


def test_every_announced_observer_satisfies_its_protocol(cell):
    from workbench.engine import OBSERVERS, observer_mismatches

    announced = cell.describe().observers
    assert announced and observer_mismatches(cell, announced) == []
    assert all(isinstance(cell, OBSERVERS[name]) for name in announced)


def test_an_observer_with_other_parameters_is_named():
    from workbench.engine import observer_mismatches

    class Drifted:
        def import_state(self, blob, *, slot=0):  # the drift issue 9 found: tokens missing
            pass

        def export_state(self, *, slot=0):
            return b""

    assert observer_mismatches(Drifted(), ["state_export", "nonsense"]) == [
        "state_export: import_state(blob, *, slot=0) differs from the spec "
        "import_state(blob, tokens, *, slot=0, position_shift=0)",
        "nonsense: not a declared observer (request_counters, kv_events, iteration_stats, connector, state_export, "
        "capacity, kv_readback, adapter_requests, cached_blocks)"]


def test_kv_removed_inside_the_engine_is_believed_over_the_cells_own_list(cell):
    """The engine is read back (llama_memory_seq_pos_min/_max) before reuse is counted."""
    import llama_cpp

    prompt = ids(64)
    cell.ensure_prefix(prompt)
    assert cell.resident_tokens() == 64
    llama_cpp.llama_memory_seq_rm(cell._mem, 0, -1, -1)  # behind the cell's back
    st = cell.ensure_prefix(prompt)
    assert (st.reused_tokens, st.computed_tokens) == (0, 64)
    assert st.engine_counters["engine_lost_before"] == 64 and st.engine_counters["engine_resident_after"] == 64
    llama_cpp.llama_memory_seq_rm(cell._mem, 0, 40, -1)  # a lost tail is recomputed, the rest reused
    st = cell.ensure_prefix(prompt)
    assert (st.reused_tokens, st.computed_tokens) == (40, 24)


def test_reused_logits_match_a_cold_recompute(cell):
    prompt = ids(96)
    cell.ensure_prefix(prompt[:64])
    cell.ensure_prefix(prompt)
    warm = cell.last_logits()
    cell.ensure_prefix(prompt, slot=1, salt="cold")
    cold = cell.last_logits(slot=1)
    assert len(warm) == len(cold) and max(abs(a - b) for a, b in zip(warm, cold)) < 0.05


def test_a_request_refused_under_a_new_salt_leaves_the_slots_kv_intact(cell):
    cell.ensure_prefix(ids(600), slot=0)
    cell.ensure_prefix(ids(300, start=301), slot=1)
    with pytest.raises(ContextOverflow):
        cell.ensure_prefix(ids(800), slot=1, salt="new")  # does not fit beside slot 0
    assert cell.resident_tokens(slot=1) == 300 and cell.ensure_prefix(ids(300, start=301), slot=1).reused_tokens == 300


def test_a_byte_budget_below_one_token_is_refused():
    with pytest.raises(ValueError, match="kv_budget_bytes=100 is below one token"):
        open_cell("llamacpp", TINY, kv_budget_bytes=100)


def test_a_hole_removed_inside_the_engine_is_seen(cell):
    """pos_min/pos_max cannot see a hole: removing positions 10–39 left "all 64 held (read back from engine)"."""
    import llama_cpp

    prompt = ids(64)
    cell.ensure_prefix(prompt)
    assert cell.engine_positions() == set(range(64))
    llama_cpp.llama_memory_seq_rm(cell._mem, 0, 10, 40)  # behind the cell's back, a hole in the middle
    assert cell.position_range() == (0, 63)  # the old read-back saw nothing wrong
    assert cell.resident_tokens() == 10 and len(cell.engine_positions()) == 34
    st = cell.ensure_prefix(prompt)
    assert (st.reused_tokens, st.computed_tokens) == (10, 54) and st.engine_counters["engine_lost_before"] == 54
    assert cell.engine_positions() == set(range(64)) and cell.resident_tokens() == 64
    warm = cell.last_logits()
    cell.ensure_prefix(prompt, slot=1, salt="cold")
    assert max(abs(a - b) for a, b in zip(warm, cell.last_logits(slot=1))) < 0.05


def test_the_fast_read_back_still_sees_a_hole_once_calibrated(cell):
    """Sizes learnt from full reads let a hole-free sequence skip the blob copy; a hole still forces a read."""
    import llama_cpp

    for n in (8, 16):
        cell.ensure_prefix(ids(n), slot=1, salt=f"calibrate-{n}")
        cell.engine_positions(slot=1)
    assert cell._state_size is not None
    prompt = ids(64)
    cell.ensure_prefix(prompt)
    assert cell.resident_tokens() == 64
    llama_cpp.llama_memory_seq_rm(cell._mem, 0, 10, 40)
    assert cell.resident_tokens() == 10


# --------------------------------------------------------------------------- issue 23: messages keep the engine's reason


def test_a_failed_load_keeps_llama_cpps_own_reason(tmp_path):
    import gguf

    path = tmp_path / "foo.gguf"
    w = gguf.GGUFWriter(str(path), "foo")  # an architecture llama.cpp does not know
    w.add_name("made up")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(WorkbenchError, match="unknown model architecture: 'foo'"):
        open_cell("llamacpp", str(path))


def test_a_chat_template_with_an_unknown_filter_names_the_fix(cell):
    cell._template = "{{ messages | nosuchfilter }}"  # as a GGUF's tokenizer.chat_template may be written
    with pytest.raises(WorkbenchError, match="chat template .* cannot be rendered .*nosuchfilter.*tokenizer.chat_template"):
        cell.render([{"role": "user", "content": "hi"}])


def test_a_bad_context_names_context_tokens_not_kv_budget():
    with pytest.raises(ValueError, match="raise context_tokens") as e:
        open_cell("llamacpp", TINY, context_tokens=-5)
    assert "kv_budget" not in str(e.value)
