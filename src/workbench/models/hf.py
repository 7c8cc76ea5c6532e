"""Hugging Face directories: the synthetic model's twin (config, safetensors and a tokenizer over the GGUF's
vocabulary, the same weights), so vLLM and TensorRT-LLM run the very model llama.cpp runs; and the readers of a
``config.json`` (dtype, KV geometry) those cells take their geometry from."""

from __future__ import annotations

import functools

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping

from ..engine import KvGeometry
from .specs import ModelSpecError, ResolvedModel, SyntheticSpec, cache_dir, check_fits, parse_synthetic, short
from .synthetic import SYNTHETIC_CHAT_TEMPLATE, synthetic_tensors, vocab, write_synthetic

HF_DTYPE = "float32"  # the GGUF holds F32 weights; the directory keeps them bit for bit


def _hf_name(gguf_name: str) -> str:
    """The Hugging Face llama name of a GGUF tensor (``blk.3.attn_q.weight`` → ``model.layers.3.self_attn.q_proj.weight``)."""
    fixed = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
    if gguf_name in fixed:
        return fixed[gguf_name]
    _, layer, part, _ = gguf_name.split(".")
    proj = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
            "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
            "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
            "ffn_down": "mlp.down_proj"}[part]
    return f"model.layers.{layer}.{proj}.weight"


def _unpermute(w, heads: int):
    """Undo the rotary row order llama.cpp's converter gives Q and K (convert_hf_to_gguf.py ``permute``):
    GGUF interleaves each head's two rotary halves, Hugging Face keeps them as two blocks."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_config_for(syn: SyntheticSpec) -> dict:
    """``config.json`` of the synthetic model: the GGUF's geometry as a LlamaForCausalLM."""
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": syn.embd,
        "intermediate_size": syn.ffn, "num_hidden_layers": syn.layers, "num_attention_heads": syn.heads,
        "num_key_value_heads": syn.kv_heads, "head_dim": syn.head_dim, "vocab_size": syn.vocab,
        "max_position_embeddings": syn.ctx, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
        "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False, "torch_dtype": HF_DTYPE,
        "bos_token_id": 1, "eos_token_id": 2, "workbench_synthetic_spec": syn.spec,
    }


def _write_tokenizer(syn: SyntheticSpec, directory: Path) -> None:
    """A deterministic Unigram tokenizer over the GGUF's vocabulary (ids agree; segmentation prefers
    the longest pieces, as the GGUF's scores do), with the same chat template."""
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers, processors
    from tokenizers import models as tok_models

    tokens, _, kinds = vocab(syn.vocab)
    # Unigram maximizes the summed score: one cost per piece makes the fewest (longest) pieces win.
    score = {"normal": -1.0, "byte": -100.0}
    tok = Tokenizer(tok_models.Unigram([(t, score.get(k, -1e4)) for t, k in zip(tokens, kinds)], unk_id=0,
                                       byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", 1)])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in tokens[:3]])
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "add_bos_token": True, "add_eos_token": False, "model_max_length": syn.ctx,
        "chat_template": SYNTHETIC_CHAT_TEMPLATE}, indent=1))


def write_synthetic_hf(syn: SyntheticSpec, directory: Path | None = None) -> Path:
    """Write (or reuse) the Hugging Face directory of ``syn``: config, safetensors, tokenizer.

    The weights are :func:`synthetic_tensors`, the ones the GGUF holds (Q and K rows back in Hugging
    Face rotary order), so every engine runs the same model. Written to a temporary directory and
    renamed, so concurrent writers never see half a directory.
    """
    directory = directory or cache_dir()
    path = directory / f"synthetic-{short(syn.spec)}-hf"
    if (path / "config.json").is_file():
        return path
    try:
        from safetensors.numpy import save_file
    except ImportError as e:  # pragma: no cover - depends on extras
        raise ModelSpecError(f"a Hugging Face copy of a synthetic model needs 'safetensors' and 'tokenizers' ({e}); "
                             "install the 'vllm' extra") from e
    check_fits(syn)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=directory, suffix=".hf.tmp"))
    try:
        tensors = {}
        for name, array in synthetic_tensors(syn):
            if ".attn_q." in name:
                array = _unpermute(array, syn.heads)
            elif ".attn_k." in name:
                array = _unpermute(array, syn.kv_heads)
            tensors[_hf_name(name)] = array
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(hf_config_for(syn), indent=1))
        _write_tokenizer(syn, tmp)
        try:
            os.rename(tmp, path)
        except OSError:  # another writer won the race: its directory is the same model
            if not (path / "config.json").is_file():
                raise
    finally:
        if tmp.exists():
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return path


def hf_directory(model: ResolvedModel) -> Path:
    """The Hugging Face directory for ``model``: itself, or the synthetic model's twin."""
    if model.kind == "hf":
        return model.path
    if model.kind == "synthetic":
        return write_synthetic_hf(parse_synthetic(model.spec))
    raise ModelSpecError(f"{model.spec!r} is a GGUF file; this engine needs a Hugging Face directory "
                         "(config.json + safetensors): use a 'synthetic:…' spec or pass a model directory")


GGUF_WEIGHTS = {"float32": "F32", "float": "F32", "float16": "F16", "half": "F16", "bfloat16": "BF16"}
"""The GGUF weight type that keeps a Hugging Face checkpoint's precision (its ``config.json`` dtype)."""


def gguf_of(model: ResolvedModel) -> Path:
    """``model`` (a Hugging Face directory) as a GGUF at its own precision, for llama.cpp: the loop's scorer
    must read the logits the subject computes, and a quantized file's bar fair arms (an F16 arm against a Q4_0
    scorer: 9 turns of 10 barred). A synthetic model's twin is written from the same draw of weights; another
    checkpoint needs llama.cpp's converter (convert_hf_to_gguf.py, with torch and transformers), which the
    workbench does not run: the error says what to supply."""
    config = hf_config(model.path)
    dtype = hf_dtype(config) or "float32"  # transformers' default where config.json names none
    weights = GGUF_WEIGHTS.get(dtype)
    if weights is None:
        raise ModelSpecError(f"{model.path} holds {dtype} weights, which no GGUF keeps as they are; convert it to a "
                             "GGUF at the precision the subject runs and pass it as --scorer-model")
    if spec := config.get("workbench_synthetic_spec"):
        return write_synthetic(parse_synthetic(spec), weights=weights)
    raise ModelSpecError(
        f"the scorer must run the subject's model at its precision ({dtype}), and {model.path} is a Hugging Face "
        f"checkpoint this workbench cannot convert: convert it with llama.cpp's convert_hf_to_gguf.py "
        f"(in the llama-cpp-python sdist: vendor/llama.cpp; needs torch and transformers) "
        f"'python convert_hf_to_gguf.py {model.path} --outtype {weights.lower()} --outfile scorer.gguf' "
        "and pass the file as --scorer-model")


def hf_config(path: Path) -> dict:
    """The model's Hugging Face ``config.json`` (KV geometry for TensorRT-LLM and vLLM)."""
    try:
        return json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise ModelSpecError(f"cannot read {path / 'config.json'}: {e}") from e


DTYPE_BYTES = {"float32": 4.0, "float": 4.0, "float16": 2.0, "half": 2.0, "bfloat16": 2.0, "float8": 1.0,
               "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0}
"""Bytes per element of the dtypes a ``config.json`` or an engine's KV cache names (torch and vLLM spellings)."""


def hf_dtype(config: Mapping[str, Any]) -> str | None:
    """The dtype a ``config.json`` declares (``torch_dtype``, or the newer ``dtype``), its text model's first."""
    for cfg in (config.get("text_config") or {}, config):
        name = cfg.get("torch_dtype") or cfg.get("dtype")
        if name:
            return str(name).removeprefix("torch.")
    return None


def hf_vocab_size(config: Mapping[str, Any]) -> int:
    """The vocabulary size a ``config.json`` declares (its ``text_config``'s where it has one)."""
    cfg = config.get("text_config") or config
    try:
        return int(cfg["vocab_size"])
    except (KeyError, TypeError, ValueError):
        raise ModelSpecError("config.json has no integer vocab_size; add the model's vocabulary size (the rows of "
                             "its token embedding) to config.json") from None


def hf_geometry(config: Mapping[str, Any], dtype: str | None = None) -> tuple[KvGeometry, int | None]:
    """KV geometry and context ceiling from a ``config.json`` (its ``text_config`` where it has one); the KV
    dtype is ``dtype``, else the model's own."""
    cfg = config.get("text_config") or config
    try:
        heads = int(cfg["num_attention_heads"])
        geometry = KvGeometry(
            layers=int(cfg["num_hidden_layers"]),
            kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads),
            dtype_bytes=DTYPE_BYTES.get(dtype or hf_dtype(config) or "float16", 2.0),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ModelSpecError(f"config.json lacks the attention geometry a cell needs ({e})") from e
    ceiling = cfg.get("max_position_embeddings")
    return geometry, None if ceiling is None else int(ceiling)


def gguf_geometry(path: Path, dtype_bytes: float = 2.0) -> tuple[KvGeometry, int | None, int | None]:
    """KV geometry, context ceiling and vocabulary size from a GGUF file's metadata (``{arch}.block_count``,
    ``.attention.head_count[_kv]``, ``.attention.key_length`` or ``.embedding_length`` / heads): for an engine
    that serves the file but does not report its geometry (llama-server). The KV dtype is llama.cpp's f16.
    Read once per file version (the loop describes its served arms every turn)."""
    st = Path(path).stat()
    return _gguf_geometry(str(Path(path).resolve()), st.st_mtime_ns, st.st_size, dtype_bytes)


def architecture(path: Path) -> str:
    """A model's shape as its own metadata states it, in one comparable line: layers, attention heads, KV heads,
    head size, hidden size and vocabulary, from a Hugging Face folder's ``config.json`` (its ``text_config`` where
    it has one) or a GGUF file's metadata. The same-model rule compares it across formats: two files of one
    checkpoint have one shape; a smaller model, or one with fewer KV heads, does not."""
    path = Path(path)
    if path.is_dir():
        config = hf_config(path)
        cfg = config.get("text_config") or config
        try:
            heads, hidden = int(cfg["num_attention_heads"]), int(cfg["hidden_size"])
            shape = (int(cfg["num_hidden_layers"]), heads, int(cfg.get("num_key_value_heads") or heads),
                     int(cfg.get("head_dim") or hidden // heads), hidden, hf_vocab_size(config))
        except (KeyError, TypeError, ValueError) as e:
            raise ModelSpecError(f"{path / 'config.json'} lacks the model's shape ({e})") from e
    else:
        st = path.stat()
        shape = _gguf_shape(str(path.resolve()), st.st_mtime_ns, st.st_size)
    return "layers={} heads={} kv_heads={} head_dim={} hidden={} vocab={}".format(*shape)


@functools.lru_cache(maxsize=32)
def _gguf_shape(path: str, _mtime_ns: int, _size: int) -> tuple[int, ...]:
    meta, vocab_size = _gguf_metadata(path)
    arch = meta.get("general.architecture")
    try:
        heads, hidden = int(meta[f"{arch}.attention.head_count"]), int(meta[f"{arch}.embedding_length"])
        kv = meta.get(f"{arch}.attention.head_count_kv")
        return (int(meta[f"{arch}.block_count"]), heads, int(kv if kv is not None else heads),
                int(meta.get(f"{arch}.attention.key_length") or hidden // heads), hidden, int(vocab_size or 0))
    except (KeyError, TypeError, ValueError) as e:
        raise ModelSpecError(f"{path} lacks the model's shape in its GGUF metadata ({e})") from e


def context_ceiling(model: ResolvedModel) -> int | None:
    """The most tokens one sequence of ``model`` may hold, by its own metadata (a GGUF's ``context_length``,
    ``config.json``'s ``max_position_embeddings``), read without loading it; None where it states none."""
    if model.kind == "hf":
        return hf_geometry(hf_config(model.path))[1]
    return gguf_geometry(model.path)[1]


@functools.lru_cache(maxsize=32)
def _gguf_geometry(path: str, _mtime_ns: int, _size: int, dtype_bytes: float) -> tuple[KvGeometry, int | None, int | None]:
    meta, vocab_size = _gguf_metadata(path)
    arch = meta.get("general.architecture")
    try:
        heads = int(meta[f"{arch}.attention.head_count"])
        kv = meta.get(f"{arch}.attention.head_count_kv")
        head_dim = meta.get(f"{arch}.attention.key_length") or int(meta[f"{arch}.embedding_length"]) // heads
        geometry = KvGeometry(layers=int(meta[f"{arch}.block_count"]), kv_heads=int(kv if kv is not None else heads),
                              head_dim=int(head_dim), dtype_bytes=dtype_bytes)
    except (KeyError, TypeError, ValueError) as e:
        raise ModelSpecError(f"{path} lacks the attention geometry a cell needs in its GGUF metadata ({e})") from e
    ctx = meta.get(f"{arch}.context_length")
    return geometry, None if ctx is None else int(ctx), vocab_size


def _gguf_metadata(path: str) -> tuple[Mapping[str, Any], int | None]:
    """A GGUF file's scalar metadata and its vocabulary size, read by llama.cpp's own loader with the vocabulary
    only (0.2 s for SmolLM2), or, where llama-cpp-python is not installed, by gguf's Python reader (13 s on 2
    cores: it builds every field, the 49k-token vocabulary included)."""
    try:
        import llama_cpp
        from llama_cpp._internals import LlamaModel
    except ImportError:
        from gguf import GGUFReader

        fields = GGUFReader(path).fields
        values = {k: f.contents() for k, f in fields.items()}
        tokens = values.pop("tokenizer.ggml.tokens", None)
        return {k: v for k, v in values.items() if not isinstance(v, list)}, None if tokens is None else len(tokens)
    # the model alone, no context: Llama() makes one even with vocab_only, and llama.cpp then warns on the console
    # that a synthetic model's n_ctx exceeds its n_ctx_train of 0 (a warning llama-cpp-python's logger, reading
    # ggml's old log levels, takes for an error and prints)
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = LlamaModel(path_model=path, params=params, verbose=False)
    try:
        return dict(model.metadata()), int(model.n_vocab())
    finally:
        model.close()
