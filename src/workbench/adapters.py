"""A tiny LoRA adapter written for a model from its own geometry, so an adapter request can reach the engine.

The isolation probe needs an adapter that changes the model's output (else "the engine applied it" cannot be
told from "the engine ignored it") and that any llama-architecture Hugging Face directory can load: a PEFT
directory (``adapter_config.json`` + ``adapter_model.safetensors``) with rank-``rank`` updates of every
layer's ``q_proj`` and ``v_proj``, shaped from the model's ``config.json``. PEFT initializes ``lora_B`` to
zero, a no-op; here both factors are random (seeded), so the adapter moves the values the KV cache holds.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from . import models

TARGETS = ("q_proj", "v_proj")
LLAMA_LIKE = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")  # q/k/v/o_proj named alike


def write_lora(model_dir: str | Path, out: str | Path, *, rank: int = 8, seed: int = 0, b_std: float = 1.0) -> Path:
    """Write a LoRA adapter for the Hugging Face model in ``model_dir`` into ``out``; returns ``out``. ``b_std``
    scales ``lora_B``; 0 is PEFT's own initialization, an adapter that changes nothing."""
    config = models.hf_config(Path(model_dir))
    cfg = config.get("text_config") or config
    arch = (config.get("architectures") or ["?"])[0]
    if arch not in LLAMA_LIKE:
        raise models.ModelSpecError(f"cannot write a LoRA adapter for a {arch} model ({model_dir}): the projections "
                                    f"are named as in {', '.join(LLAMA_LIKE)} only; pass an adapter directory")
    geometry, _ = models.hf_geometry(config)
    hidden, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    shapes = {"q_proj": heads * geometry.head_dim, "v_proj": geometry.kv_heads * geometry.head_dim}
    rng = np.random.default_rng(seed)
    tensors = {}
    for layer in range(geometry.layers):
        for name in TARGETS:
            stem = f"base_model.model.model.layers.{layer}.self_attn.{name}"
            tensors[f"{stem}.lora_A.weight"] = rng.normal(0, hidden ** -0.5, (rank, hidden)).astype(np.float32)
            tensors[f"{stem}.lora_B.weight"] = rng.normal(0, b_std, (shapes[name], rank)).astype(np.float32)
    from safetensors.numpy import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "adapter_model.safetensors"))
    (out / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": str(model_dir), "r": rank,
        "lora_alpha": rank, "lora_dropout": 0.0, "target_modules": list(TARGETS), "bias": "none",
        "fan_in_fan_out": False, "inference_mode": True, "modules_to_save": None}, indent=1))
    return out


GGUF_PROJECTIONS = ("attn_q", "attn_k", "attn_v", "attn_output")


def gguf_projection_shapes(n_embd: int, n_head: int, n_head_kv: int, head_dim: int) -> dict[str, tuple[int, int]]:
    """Each adapted projection's (n_in, n_out), as llama.cpp lays out a llama-architecture layer's weights."""
    q, kv = n_head * head_dim, n_head_kv * head_dim
    return {"attn_q": (n_embd, q), "attn_k": (n_embd, kv), "attn_v": (n_embd, kv), "attn_output": (q, n_embd)}


def write_gguf_lora(out: str | Path, *, arch: str, layers: int, shapes: dict[str, tuple[int, int]], rank: int = 8,
                    seed: int = 0, std: float = 0.15) -> Path:
    """Write a LoRA adapter GGUF for a llama.cpp model into the file ``out``; returns ``out``.

    ``shapes`` gives each projection's (n_in, n_out) (:func:`gguf_projection_shapes`, from the model as llama.cpp
    reports it), as llama.cpp's adapter loader checks them (``src/llama-adapter.cpp``: base ``ne[0]`` is
    ``lora_a``'s ``ne[0]``, base ``ne[1]`` is ``lora_b``'s ``ne[1]``, ``lora_a.ne[1] == lora_b.ne[0]`` is the rank;
    gguf-py writes a numpy shape reversed, so ``lora_a`` is ``(rank, n_in)`` and ``lora_b`` ``(n_out, rank)``, PEFT's
    A and B). The file is ``general.type = adapter``, ``adapter.type = lora``, ``adapter.lora.alpha = rank`` (alpha /
    rank = 1), every layer's attention projections adapted with seeded random factors, so the adapter changes what
    the model computes. (contenox ships a generator of the same format for its LoRA tests,
    ``modeld/llama/llamasession/testdata/make_lora_gguf.py``.)"""
    import gguf

    rng = np.random.default_rng(seed)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(out), arch)
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(rank))
    for layer in range(layers):
        for proj, (n_in, n_out) in shapes.items():
            name = f"blk.{layer}.{proj}.weight"
            writer.add_tensor(f"{name}.lora_a", (rng.standard_normal((rank, n_in)) * std).astype(np.float32))
            writer.add_tensor(f"{name}.lora_b", (rng.standard_normal((n_out, rank)) * std).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out
