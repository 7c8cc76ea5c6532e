"""The TensorRT-LLM cell against the double of the tensorrt_llm 1.2 LLM API.

The double (``tests/doubles/fake_tensorrt_llm``) is loaded as ``tensorrt_llm`` only by the
``fake_trt`` fixture and handed to the cell through the guard's one import. Every call the cell
makes is asserted with its arguments. Tests without the fixture run against this machine: no
tensorrt_llm, no GPU. The tests under "what a real 1.2 install does" pin behaviours of 1.2 the cell
must survive.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from doubles.trtllm_fixture import fake_trt, model_dir  # noqa: F401 - the fixture

from workbench.events.sequence import Sequencer
from workbench import cells, environment
from workbench.cells.trtllm import cell as trtllm_cell
from workbench.cells.trtllm import guard as trtllm_guard
from workbench.engine import (
    OBSERVERS,
    observer_mismatches,
    Cell,
    ContextOverflow,
    EngineUnavailable,
    KvEvent,
    ManifestMismatch,
    Retention,
    UnsupportedFeature,
    WorkbenchError,
)
from workbench.models import ModelSpecError
from workbench.cells.trtllm import connector as trtllm_connector

SRC = Path(trtllm_cell.__file__).resolve().parents[3]
BYTES_PER_TOKEN = 2 * 2 * 2 * 16 * 2  # K+V · layers · kv_heads · head_dim · bf16
OPEN_REQUESTS = 1  # the cell's open request precedes every probe request


def _tensorrt_llm_importable() -> bool:
    try:
        return importlib.util.find_spec("tensorrt_llm") is not None
    except (ImportError, ValueError):
        return False


@pytest.fixture
def hf_dir(tmp_path):
    return model_dir(tmp_path)


@pytest.fixture
def cell(fake_trt, hf_dir):
    c = trtllm_cell.TrtLlmCell.open(str(hf_dir), context_tokens=256)
    yield c
    c.close()


def _llm(fake_trt):
    return fake_trt.llmapi.llm.LLM.instances[-1]


def _calls(llm, name):
    return [kw for n, kw in llm.calls if n == name]


def _requests(llm):
    """The probe's requests: every generate_async after the cell's open request."""
    return _calls(llm, "generate_async")[OPEN_REQUESTS:]


# --------------------------------------------------------------------------- this machine


def test_importing_the_cell_does_not_import_tensorrt_llm():
    code = ("import sys, workbench, workbench.cells.trtllm, workbench.cells.trtllm.connector; "
            "assert 'tensorrt_llm' not in sys.modules, 'imported'")
    subprocess.run([sys.executable, "-c", code], check=True, env=os.environ | {"PYTHONPATH": str(SRC)})


@pytest.mark.skipif(_tensorrt_llm_importable(), reason="tensorrt_llm is installed here")
def test_unavailable_here_with_a_precise_reason():
    a = cells.availability("trtllm")
    assert not a.available and a.version is None
    assert "tensorrt_llm is not installed" in a.reason
    assert "'trtllm' extra" in a.reason and "NVIDIA" in a.reason


@pytest.mark.skipif(_tensorrt_llm_importable(), reason="tensorrt_llm is installed here")
def test_open_cell_raises_engine_unavailable_here(hf_dir):
    with pytest.raises(EngineUnavailable) as e:
        cells.open_cell("trtllm", str(hf_dir))
    assert e.value.engine == "trtllm" and "tensorrt_llm" in e.value.reason


def test_availability_with_release_and_gpu(fake_trt):
    a = trtllm_cell.TrtLlmCell.availability()
    assert a.available and a.version == "1.2.1" and a.reason is None
    rows = a.details["guard"]
    assert len(rows) == len(trtllm_guard.GUARD) and all(r["ok"] for r in rows)
    assert {r["symbol"] for r in rows} >= {"tensorrt_llm.LLM.generate_async", "tensorrt_llm.llmapi.KvCacheConfig"}


def test_availability_without_gpu_gives_nvml_reason(fake_trt, monkeypatch):
    no_gpu = {"available": False, "source": None, "devices": [], "driver": None, "cuda": None,
              "reason": "no NVIDIA GPU: NVML unavailable (NVMLError: Driver Not Loaded); nvidia-smi not on PATH"}
    monkeypatch.setattr(environment, "gpus", lambda: no_gpu)
    a = trtllm_cell.TrtLlmCell.availability()
    assert not a.available and a.reason == no_gpu["reason"]
    assert a.details["guard"]  # tensorrt_llm imported, so the table is there


def test_availability_and_open_refuse_other_versions(fake_trt, hf_dir, monkeypatch):
    monkeypatch.setattr(fake_trt, "__version__", "1.3.0rc27")
    a = trtllm_cell.TrtLlmCell.availability()
    assert not a.available and "1.3.0rc27" in a.reason and "1.2.x" in a.reason
    with pytest.raises(EngineUnavailable, match="1.3.0rc27"):
        trtllm_cell.TrtLlmCell.open(str(hf_dir))

# --------------------------------------------------------------------------- open: the LLM the cell builds


def test_open_builds_the_llm_from_a_byte_budget(fake_trt, hf_dir, monkeypatch):
    given = []
    original = fake_trt.llmapi.KvCacheConfig

    class Spy(original):
        def __init__(self, **kw):
            given.append(kw)
            super().__init__(**kw)

    monkeypatch.setattr(fake_trt.llmapi, "KvCacheConfig", Spy)
    budget = 1000 * BYTES_PER_TOKEN + 5
    with trtllm_cell.TrtLlmCell.open(str(hf_dir), kv_budget_bytes=budget, context_tokens=256, tokens_per_block=16,
                                     host_cache_size=1 << 20, event_buffer_max_size=64,
                                     enable_partial_reuse=False) as c:
        init = _calls(_llm(fake_trt), "__init__")[0]
        assert given == [{"max_tokens": 992, "tokens_per_block": 16, "enable_block_reuse": True,
                          "enable_partial_reuse": False, "event_buffer_max_size": 64, "host_cache_size": 1 << 20,
                          "use_kv_cache_manager_v2": False}]  # never the memory fraction alone
        assert init["model"] == str(hf_dir.resolve()) and init["kv_cache_config"].max_tokens == 992
        assert init["max_seq_len"] == 256 and init["max_num_tokens"] == 256
        assert init["return_perf_metrics"] is True and init["enable_iter_perf_stats"] is True
        assert init["guided_decoding_backend"] == "xgrammar" and init["skip_tokenizer_init"] is False
        assert "load_format" not in init and "lora_config" not in init and "kv_connector_config" not in init
        d = c.describe()
        assert d.geometry.bytes_per_token == BYTES_PER_TOKEN and d.block_tokens == 16
        assert d.context_tokens == 256 and d.kv_capacity_tokens == 992
        assert d.kv_capacity_bytes == 992 * BYTES_PER_TOKEN and d.extra["kv_capacity_source"] == "created KV event"
        assert d.extra["gpu_devices"][0]["name"] == "Fake H100"


def test_use_kv_cache_manager_v2_is_set_only_where_the_field_exists(fake_trt, hf_dir, monkeypatch):
    @dataclasses.dataclass(kw_only=True)
    class KvCacheConfig12rc:  # a release without the field
        enable_block_reuse: bool = True
        max_tokens: int | None = None
        free_gpu_memory_fraction: float | None = 0.9
        host_cache_size: int | None = None
        event_buffer_max_size: int = 0
        enable_partial_reuse: bool = True
        tokens_per_block: int = 32

    monkeypatch.setattr(fake_trt.llmapi, "KvCacheConfig", KvCacheConfig12rc)
    monkeypatch.setattr(fake_trt.llmapi.llm_args, "KvCacheConfig", KvCacheConfig12rc)
    with trtllm_cell.TrtLlmCell.open(str(hf_dir)) as c:
        kv = _calls(_llm(fake_trt), "__init__")[0]["kv_cache_config"]
        assert isinstance(kv, KvCacheConfig12rc) and kv.max_tokens == c.kv_budget_tokens
    rows = {r.symbol: r for r in trtllm_guard.check_guard(fake_trt)}
    assert rows["tensorrt_llm.llmapi.KvCacheConfig"].ok
    assert "use_kv_cache_manager_v2 absent" in rows["tensorrt_llm.llmapi.KvCacheConfig"].detail


def test_default_budget_is_context_times_slots_and_dummy_weights(fake_trt, hf_dir):
    with trtllm_cell.TrtLlmCell.open(str(hf_dir), slots=3, dummy_weights=True) as c:
        init = _calls(_llm(fake_trt), "__init__")[0]
        assert init["max_seq_len"] == 512  # min(model ceiling, 4096)
        assert init["kv_cache_config"].max_tokens == 3 * 512 and init["load_format"] == "dummy"
        assert c.describe().slots == 3


def test_options_are_validated(fake_trt, hf_dir, tmp_path):
    with pytest.raises(TypeError, match="unknown trtllm option"):
        trtllm_cell.TrtLlmCell.open(str(hf_dir), free_gpu_memory_fraction=0.5)
    with pytest.raises(ValueError, match="power of two"):
        trtllm_cell.TrtLlmCell.open(str(hf_dir), tokens_per_block=48)
    with pytest.raises(ValueError, match="not both"):
        trtllm_cell.TrtLlmCell.open(str(hf_dir), kv_budget_bytes=1 << 20, kv_budget_tokens=1024)
    with pytest.raises(ValueError, match="less than one block"):
        trtllm_cell.TrtLlmCell.open(str(hf_dir), kv_budget_tokens=8)
    with pytest.raises(ValueError, match="enable_block_reuse"):
        trtllm_cell.TrtLlmCell.open(str(hf_dir), connector=True, enable_block_reuse=False)
    with pytest.raises(ContextOverflow):
        trtllm_cell.TrtLlmCell.open(str(hf_dir), context_tokens=1024)  # model ceiling is 512
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 16)
    with pytest.raises(ModelSpecError, match="Hugging Face"):
        trtllm_cell.TrtLlmCell.open(str(gguf))
    assert fake_trt.llmapi.llm.LLM.instances == []


def test_a_failed_llm_construction_leaves_nothing_behind(fake_trt, hf_dir, monkeypatch):
    def refuse(self, *a, **kw):
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(fake_trt.llmapi.llm.LLM, "__init__", refuse)
    before = set(Path(os.environ.get("TMPDIR", "/tmp")).glob("workbench-trtllm-*"))
    with pytest.raises(RuntimeError, match="out of memory"):
        trtllm_cell.TrtLlmCell.open(str(hf_dir), connector=True)
    assert trtllm_connector.LOG_ENV not in os.environ
    assert set(Path(os.environ.get("TMPDIR", "/tmp")).glob("workbench-trtllm-*")) == before


def test_cell_satisfies_the_protocol(cell):
    assert isinstance(cell, Cell) and cell.engine == "trtllm"


# --------------------------------------------------------------------------- EnsurePrefix


def test_ensure_prefix_warms_up_with_retention_and_salt(fake_trt, cell):
    prefix = list(range(3, 103))  # 100 tokens: 3 full blocks of 32 before the last token
    status = cell.ensure_prefix(prefix)
    call = _calls(_llm(fake_trt), "generate_async")[-1]
    assert call["inputs"] == prefix and call["streaming"] is False and call["lora_request"] is None
    assert call["cache_salt"] == cell.manifest.cache_key(None) == cell.manifest.digest
    sp = call["sampling_params"]
    assert sp.max_tokens == 1 and sp.temperature == 0.0 and sp.guided_decoding is None
    ret = call["kv_cache_retention_config"]
    (rng,) = ret.token_range_retention_configs
    assert (rng.token_start, rng.token_end, rng.priority, rng.duration_ms) == (0, 100, 100, None)
    assert status.prompt_tokens == 100 and status.reused_tokens == 0 and status.computed_tokens == 100
    assert status.exact is False and status.granularity_tokens == 32 and status.source == "perf_metrics"
    assert status.engine_counters["num_missed_blocks"] == 4

    again = cell.ensure_prefix(prefix)
    assert again.reused_tokens == 96 and again.computed_tokens == 4  # 3 blocks x 32, converted
    assert again.engine_counters["num_reused_blocks"] == 3 and again.engine_counters["reused_tokens_est"] == 96

    salted = cell.ensure_prefix(prefix, salt="tenant-b", retention=Retention(priority=70, duration_ms=500))
    call = _calls(_llm(fake_trt), "generate_async")[-1]
    assert call["cache_salt"] == cell.manifest.cache_key("tenant-b") != cell.manifest.digest
    (rng,) = call["kv_cache_retention_config"].token_range_retention_configs
    assert rng.priority == 70 and rng.duration_ms == timedelta(milliseconds=500)
    assert salted.reused_tokens == 0 and salted.dropped_tokens == 100  # another key: the old tail is moot


def test_ensure_prefix_reports_a_divergent_tail_as_dropped(cell):
    cell.ensure_prefix(list(range(3, 103)))
    status = cell.ensure_prefix(list(range(3, 73)) + [120] * 10)
    assert status.dropped_tokens == 30 and status.reused_tokens == 64


def test_retention_default_comes_from_options(fake_trt, hf_dir):
    with trtllm_cell.TrtLlmCell.open(str(hf_dir), retention_priority=90, retention_duration_ms=2000) as c:
        c.ensure_prefix([5] * 40)
        (rng,) = _calls(_llm(fake_trt), "generate_async")[-1]["kv_cache_retention_config"].token_range_retention_configs
        assert rng.priority == 90 and rng.duration_ms == timedelta(seconds=2)


def test_chat_messages_render_through_the_template(fake_trt, cell):
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    cell.ensure_prefix(msgs)
    tok = _llm(fake_trt).tokenizer
    assert ("apply_chat_template", {"conversation": msgs, "tokenize": True, "add_generation_prompt": True}) in tok.calls
    prompt = _calls(_llm(fake_trt), "generate_async")[-1]["inputs"]
    assert prompt == tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True)
    more = [{"role": "user", "content": "and?"}]
    status = cell.prefill_suffix(more)
    suffix = tok.apply_chat_template(more, tokenize=True, add_generation_prompt=False)[1:]  # no second BOS
    assert status.deferred_tokens == len(suffix) and status.prompt_tokens == len(prompt) + len(suffix)
    cell.prefill_suffix(" tail")
    assert ("encode", {"text": " tail", "add_special_tokens": False}) in tok.calls


# --------------------------------------------------------------------------- PrefillSuffix and Decode


def test_prefill_is_deferred_and_rides_the_streaming_decode(fake_trt, cell):
    prefix, suffix = [7] * 64, [9] * 10
    cell.ensure_prefix(prefix)
    n_calls = len(_calls(_llm(fake_trt), "generate_async"))
    status = cell.prefill_suffix(suffix, defer=False)
    assert len(_calls(_llm(fake_trt), "generate_async")) == n_calls  # bookkeeping only
    assert (status.deferred_tokens, status.computed_tokens, status.reused_tokens) == (10, 0, 64)
    assert cell.explain_context().pending_tokens == 10

    seen = []
    result = cell.decode(max_tokens=5, on_token=lambda t, piece, s: seen.append((t, piece, s)))
    call = _calls(_llm(fake_trt), "generate_async")[-1]
    assert call["inputs"] == prefix + suffix and call["streaming"] is True
    assert call["cache_salt"] == cell.manifest.digest
    (rng,) = call["kv_cache_retention_config"].token_range_retention_configs
    assert (rng.token_start, rng.token_end, rng.priority) == (0, 64, 100)  # the prefix stays retained
    sp = call["sampling_params"]
    assert (sp.max_tokens, sp.temperature, sp.top_p, sp.top_k, sp.seed) == (5, 0.0, None, None, 0)
    assert sp.end_id is None and sp.detokenize is True  # the LLM's tokenizer supplies the end id
    assert len(result.tokens) == 5 and [t for t, _, _ in seen] == result.tokens
    assert "".join(p for _, p, _ in seen) == result.text and len(result.text) == 5
    assert result.token_times_s == sorted(result.token_times_s) and result.ttft_s == result.token_times_s[0]
    assert result.prompt_tokens == 74 and result.deferred_prefill_tokens == 10 and result.finish_reason == "length"
    assert result.engine_counters["engine_ttft_s"] == pytest.approx(0.01)
    assert result.engine_counters["num_reused_blocks"] == 2  # both prefix blocks, stored by the warm-up
    x = cell.explain_context()
    assert x.pending_tokens == 0 and x.tokens == 79


def test_decode_sampling_stop_and_guided_json(fake_trt, cell):
    cell.ensure_prefix([4] * 20)
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    cell.decode(max_tokens=3, temperature=0.7, top_p=0.9, top_k=40, seed=11, stop=["\n"], json_schema=schema)
    sp = _calls(_llm(fake_trt), "generate_async")[-1]["sampling_params"]
    assert (sp.temperature, sp.top_p, sp.top_k, sp.seed, sp.stop) == (0.7, 0.9, 40, 11, ["\n"])
    assert isinstance(sp.guided_decoding, fake_trt.llmapi.GuidedDecodingParams) and sp.guided_decoding.json == schema


def test_without_a_tokenizer_prompts_are_token_ids(fake_trt, tmp_path):
    d = model_dir(tmp_path, "no-tokenizer", tokenizer=False)
    with trtllm_cell.TrtLlmCell.open(str(d), dummy_weights=True) as c:
        init = _calls(_llm(fake_trt), "__init__")[0]
        assert init["skip_tokenizer_init"] is True and "guided_decoding_backend" not in init
        c.ensure_prefix([5] * 33)
        r = c.decode(max_tokens=2)
        sp = _calls(_llm(fake_trt), "generate_async")[-1]["sampling_params"]
        assert sp.end_id == 2 and sp.detokenize is False and r.text == "" and len(r.tokens) == 2
        with pytest.raises(UnsupportedFeature):
            c.tokenize("hello")
        with pytest.raises(UnsupportedFeature):
            c.ensure_prefix([{"role": "user", "content": "hi"}])
        with pytest.raises(UnsupportedFeature):
            c.decode(json_schema={"type": "object"})
        with pytest.raises(ValueError, match="out of range"):
            c.ensure_prefix([1, 500])


def test_context_overflow_is_raised_before_dispatch(fake_trt, hf_dir):
    with trtllm_cell.TrtLlmCell.open(str(hf_dir), context_tokens=128, kv_budget_tokens=70) as c:
        assert c.kv_budget_tokens == 64  # whole blocks
        n = len(_calls(_llm(fake_trt), "generate_async"))
        with pytest.raises(ContextOverflow) as e:
            c.ensure_prefix([3] * 128)  # + the warm-up token
        assert (e.value.requested, e.value.limit, e.value.what) == (129, 128, "context")
        with pytest.raises(ContextOverflow) as e:
            c.ensure_prefix([3] * 70)
        assert (e.value.limit, e.value.what) == (64, "KV cache")
        c.ensure_prefix([3] * 40)
        with pytest.raises(ContextOverflow):
            c.decode(max_tokens=30)
        with pytest.raises(ContextOverflow):
            c.prefill_suffix([3] * 30)
        assert len(_calls(_llm(fake_trt), "generate_async")) == n + 1


def test_slots_are_bookkeeping(cell, fake_trt):
    with pytest.raises(ValueError, match="slot 1 does not exist"):
        cell.ensure_prefix([3] * 8, slot=1)
    with pytest.raises(WorkbenchError, match="call ensure_prefix first"):
        cell.decode()
    with pytest.raises(WorkbenchError, match="no prefix"):
        cell.prefill_suffix([3])


# --------------------------------------------------------------------------- the rest of the contract


def test_explain_context_capabilities(cell):
    cell.ensure_prefix([3] * 40)
    x = cell.explain_context()
    c = x.capabilities
    assert (c.remove_tail, c.remove_middle, c.position_shift, c.recompute_range) == (False, False, False, True)
    assert x.tokens == 40 and x.cache_key == cell.manifest.digest and any("reused" in n for n in x.notes)


def test_snapshot_is_text_and_restore_warms_it(fake_trt, hf_dir, tmp_path):
    with trtllm_cell.TrtLlmCell.open(str(hf_dir), slots=2) as c:
        c.ensure_prefix([6] * 70, salt="s1", retention=Retention(80))
        c.prefill_suffix([8] * 5)
        snap = c.snapshot()
        assert snap.kind == "text" and snap.engine == "trtllm" and snap.manifest_digest == c.manifest.digest
        assert snap.tokens == tuple([6] * 70 + [8] * 5) and snap.cache_key == c.manifest.cache_key("s1")
        status = c.restore(snap, slot=1)
        call = _calls(_llm(fake_trt), "generate_async")[-1]
        assert call["inputs"] == [6] * 70 and call["cache_salt"] == c.manifest.cache_key("s1")
        assert call["kv_cache_retention_config"].token_range_retention_configs[0].priority == 80
        assert status.reused_tokens == 64 and status.deferred_tokens == 5 and status.prompt_tokens == 75
        assert c.explain_context(slot=1).pending_tokens == 5
    other = model_dir(tmp_path, "other-model", hidden_size=128)
    with trtllm_cell.TrtLlmCell.open(str(other)) as c2:
        with pytest.raises(ManifestMismatch):
            c2.restore(snap)


def test_embed_is_unsupported(cell):
    with pytest.raises(UnsupportedFeature, match="embed"):
        cell.embed(["x"])


def _adapter(root: Path, name: str = "adapter-a", rank: int = 8) -> str:
    d = root / name
    d.mkdir()
    (d / "adapter_config.json").write_text(json.dumps({"r": rank, "target_modules": ["q_proj"]}))
    (d / "adapter_model.safetensors").write_bytes(name.encode() * 8)
    return str(d)


def test_lora_config_request_and_salt(fake_trt, hf_dir, tmp_path):
    a = _adapter(tmp_path)
    with trtllm_cell.TrtLlmCell.open(str(hf_dir)) as plain:
        plain_key = plain.manifest.digest
    with trtllm_cell.TrtLlmCell.open(str(hf_dir), adapters=a) as c:  # one path is one adapter
        init = _calls(_llm(fake_trt), "__init__")[0]
        lc = init["lora_config"]
        assert isinstance(lc, fake_trt.lora_helper.LoraConfig)
        assert (lc.lora_dir, lc.max_lora_rank, lc.max_loras, lc.max_cpu_loras) == ([a], 8, 1, 1)
        assert len(c.manifest.adapters) == 1 and c.manifest.digest != plain_key
        c.ensure_prefix([3] * 10)
        c.decode(max_tokens=1)
        for call in _calls(_llm(fake_trt), "generate_async"):  # the open request too
            lr = call["lora_request"]
            assert (lr.lora_name, lr.lora_int_id, lr.lora_path) == ("adapter-a", 1, a)
        assert {call["cache_salt"] for call in _requests(_llm(fake_trt))} == {c.manifest.digest}
    with pytest.raises(UnsupportedFeature, match="stacked"):
        trtllm_cell.TrtLlmCell.open(str(hf_dir), adapters=[a, _adapter(tmp_path, "adapter-b")])


def test_switch_recreates_the_llm(fake_trt, cell, tmp_path):
    first = _llm(fake_trt)
    cell.ensure_prefix([3] * 40)
    old = cell.manifest
    manifest = cell.switch(adapters=[_adapter(tmp_path)])
    second = _llm(fake_trt)
    assert second is not first and _calls(first, "shutdown") == [{}]
    assert manifest == cell.manifest != old and cell.explain_context().tokens == 0
    assert _calls(second, "__init__")[0]["lora_config"] is not None
    status = cell.ensure_prefix([3] * 40)
    assert _calls(second, "generate_async")[-1]["cache_salt"] == manifest.digest and status.reused_tokens == 0


def test_close_is_idempotent_and_final(fake_trt, hf_dir):
    c = trtllm_cell.TrtLlmCell.open(str(hf_dir))
    llm = _llm(fake_trt)
    with c:
        pass
    c.close()
    assert _calls(llm, "shutdown") == [{}]
    with pytest.raises(WorkbenchError, match="closed"):
        c.ensure_prefix([1, 2, 3])


# --------------------------------------------------------------------------- observers


def test_observers_are_announced_and_drain(fake_trt, cell):
    d = cell.describe()
    assert d.observers == ("request_counters", "kv_events", "iteration_stats")  # only what is on
    assert set(d.observers) <= set(OBSERVERS) and d.extra["connector"].startswith("off")
    assert "connector=True" in d.switchable["connector"] and d.offers("connector")  # it can be turned on
    assert observer_mismatches(cell, d.observers) == []  # each announced observer matches its Protocol
    assert d.extra["open_request"]["created_events"] == 1
    cell.ensure_prefix([3] * 70)
    events = cell.drain_kv_events(timeout_s=0.01)
    assert [e.kind for e in events] == ["created", "stored"] and all(isinstance(e, KvEvent) for e in events)
    assert events[0].num_blocks == (cell.kv_budget_tokens // 32, 0)
    assert len(events[1].block_hashes) == 2 and events[1].block_tokens[0] == (3,) * 32 and events[1].priority == 100
    # the open request's events, kept out of the drain, are named by id (a consumer must not read them as lost);
    # its one token stores no block (len - 1 = 0 tokens), so the stream a consumer sees has no hole
    kept = d.extra["open_request"]["kv_event_ids_kept_out"]
    s = Sequencer(0, frozenset(kept))
    assert kept == [] and [s.see(e.event_id) for e in events] == [None, None] and not s.gaps
    assert cell.drain_kv_events() == []
    assert _calls(_llm(fake_trt), "get_kv_cache_events")[-1] == {"timeout": trtllm_cell.MIN_DRAIN_TIMEOUT_S}
    stats = cell.drain_iteration_stats(timeout_s=0.01)
    assert stats and stats[-1]["kvCacheStats"]["tokensPerBlock"] == 32
    assert cell.drain_iteration_stats() == []
    with pytest.raises(UnsupportedFeature, match="connector=True"):
        cell.connector_log()


def test_events_off_means_no_kv_events_observer(fake_trt, hf_dir):
    with trtllm_cell.TrtLlmCell.open(str(hf_dir), event_buffer_max_size=0) as c:
        assert "kv_events" not in c.describe().observers
        assert c.drain_kv_events() == []
        assert _calls(_llm(fake_trt), "get_kv_cache_events") == []


def test_recording_connector_logs_every_call(fake_trt, hf_dir):
    with trtllm_cell.TrtLlmCell.open(str(hf_dir), connector="record") as c:  # how the connector probe asks
        cfg = _calls(_llm(fake_trt), "__init__")[0]["kv_connector_config"]
        assert (cfg.connector_module, cfg.connector_scheduler_class, cfg.connector_worker_class) == (
            "workbench.cells.trtllm.connector", "RecordingConnectorScheduler", "RecordingConnectorWorker")
        assert "connector" in c.describe().observers and c.describe().extra["connector"] == "recording"
        assert "connector" not in c.describe().switchable
        log_path = os.environ[trtllm_connector.LOG_ENV]
        assert c.describe().extra["open_request"]["connector_calls_kept_out"] > 0
        c.ensure_prefix([3] * 70)
        c.ensure_prefix([3] * 70)
        log = c.connector_log()  # engine init, then the two requests (ids 1 and 2; 0 was the open request)
        assert log[0]["method"] == "register_kv_caches" and log[0]["args"]["shape"][1:] == [2, 2, 2 * 16 * 32]  # layers, K/V, kv_heads·head_dim·block
        assert {e["args"].get("request_id") for e in log} == {None, 1, 2}
        calls = [e["method"] for e in log]
        matched = [e["args"] for e in log if e["method"] == "get_num_new_matched_tokens"]
        assert [a["num_computed_tokens"] for a in matched] == [0, 64] and matched[0]["tokens"] == 70
        alloc = [e["args"] for e in log if e["method"] == "update_state_after_alloc"]
        assert alloc[1]["block_ids"] == [2000, 2001, 2002] and alloc[1]["request_id"] == 2
        meta = [e["args"] for e in log if e["method"] == "build_connector_meta"][1]
        assert (meta["computed_position"], meta["new_tokens"], meta["new_block_ids"], meta["new"]) == (
            64, 70, [2000, 2001, 2002], True)
        assert [e["args"]["layer_idx"] for e in log if e["method"] == "save_kv_layer"] == [0, 1, 0, 1]
        assert calls.count("wait_for_layer_load") == 4 and {e["side"] for e in log} == {"scheduler", "worker"}
        assert {"start_load_kv", "wait_for_save", "get_finished", "request_finished"} <= set(calls)
    assert trtllm_connector.LOG_ENV not in os.environ and not Path(log_path).exists()


# --------------------------------------------------------------------------- what a real 1.2 install does


def test_open_with_default_options_reads_nothing_before_a_request(fake_trt, hf_dir, tmp_path):
    """1.2's ``get_kv_cache_events`` asserts before the first ``generate_async`` (executor/executor.py)."""
    with trtllm_cell.TrtLlmCell.open(str(hf_dir)) as c:
        names = [n for n, _ in _llm(fake_trt).calls]
        assert names.index("generate_async") < names.index("get_kv_cache_events")
        c.switch(adapters=[_adapter(tmp_path)])
        names = [n for n, _ in _llm(fake_trt).calls]
        assert names.index("generate_async") < names.index("get_kv_cache_events")
        assert c.drain_kv_events()  # created, forwarded from the open request's read


def test_capacity_is_the_engines_after_its_first_request(fake_trt, hf_dir, monkeypatch):
    """``created`` waits in the engine until the first submit starts the dispatch (executor/proxy.py)."""
    from workbench.probes import capacity

    monkeypatch.setattr(fake_trt.llmapi.llm.LLM, "memory_tokens", 200)  # memory leaves 7 blocks, not 16
    with trtllm_cell.TrtLlmCell.open(str(hf_dir), kv_budget_tokens=512) as c:
        d = c.describe()
        assert (d.kv_capacity_tokens, d.extra["kv_capacity_source"]) == (7 * 32, "created KV event")
        measured, how = capacity._capacity(c, d)  # the capacity probe drains at once
        assert measured == 7 * 32 and "created" in how


def test_without_events_the_source_says_so(fake_trt, hf_dir, monkeypatch):
    monkeypatch.setattr(fake_trt.llmapi.llm.LLM, "memory_tokens", 200)
    with trtllm_cell.TrtLlmCell.open(str(hf_dir), event_buffer_max_size=0) as c:
        assert c.describe().extra["kv_capacity_source"] == "iteration stats kvCacheStats"
        assert c.describe().kv_capacity_tokens == 7 * 32


def test_an_engine_that_reports_nothing_is_named_not_hidden(fake_trt, hf_dir, monkeypatch):
    monkeypatch.setattr(fake_trt.llmapi.llm.LLM, "_take_stats", lambda self: [])
    with trtllm_cell.TrtLlmCell.open(str(hf_dir), event_buffer_max_size=0) as c:
        d = c.describe()
        assert d.kv_capacity_tokens == c.kv_budget_tokens
        assert d.extra["kv_capacity_source"].startswith("configured KvCacheConfig.max_tokens: the engine reported "
                                                         "neither")


def test_a_short_drain_still_waits_for_the_dispatch(fake_trt, cell):
    """``IterationResult.get_results`` latches after one dry read until the next submit (executor/result.py)."""
    cell.ensure_prefix([3] * 70)
    kinds = [e.kind for e in cell.drain_kv_events(timeout_s=0)]
    assert "stored" in kinds
    assert cell.drain_iteration_stats(timeout_s=0)


def test_an_empty_event_does_not_abort_the_drain(fake_trt, cell):
    """``KVCacheEventSerializer.to_json_str(None)`` is ``{}`` (tensorrt_llm/_utils.py)."""
    cell.ensure_prefix([3] * 70)
    _llm(fake_trt).engine_events.append(None)
    assert "stored" in [e.kind for e in cell.drain_kv_events()]


def test_the_connector_log_path_has_a_launcher_forwarded_name():
    assert trtllm_connector.LOG_ENV.startswith(("TLLM_", "TRTLLM_"))


def test_a_silent_connector_is_not_run_not_inconclusive(fake_trt, tmp_path, monkeypatch):
    from workbench.probes import NotRunnable, ProbeContext, connector

    hf_dir = model_dir(tmp_path, vocab_size=1000)
    monkeypatch.setattr(trtllm_connector, "record", lambda *a, **kw: None)  # workers that never see the path
    probe = connector.ExportGranularity()
    with pytest.raises(NotRunnable, match="did not record"):
        probe._connector(ProbeContext("trtllm", str(hf_dir)), probe.Params(prefix_tokens=64, shift=5))
