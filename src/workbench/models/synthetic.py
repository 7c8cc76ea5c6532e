"""The synthetic GGUF: a llama-architecture model with random weights, deterministic from its seed, written with
the ``gguf`` package and cached on disk. :func:`synthetic_tensors` is the one draw of its weights, which the
Hugging Face twin (:mod:`workbench.models.hf`) writes too."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .specs import BASE_PIECES, ModelSpecError, SyntheticSpec, cache_dir, check_fits, short

SYNTHETIC_CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def vocab(n: int) -> tuple[list[str], list[float], list[str]]:
    """An SPM vocabulary: control tokens, 256 byte fallbacks, then pieces of growing length.

    Kinds are ``unknown``, ``control``, ``byte``, ``normal`` or ``user`` (unreachable fillers).
    """
    tokens = ["<unk>", "<s>", "</s>"]
    kinds = ["unknown", "control", "control"]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    kinds += ["byte"] * 256
    pieces = list(dict.fromkeys(BASE_PIECES))
    letters = "etaoinshrdlucmfwyp"
    pieces += ["▁" + a for a in letters] + [a + b for a in letters for b in letters]
    pieces = [p for p in dict.fromkeys(pieces) if p not in tokens][: n - len(tokens)]
    tokens += pieces
    kinds += ["normal"] * len(pieces)
    # Longer pieces score higher so the SPM merger prefers them.
    scores = [0.0] * 259 + [float(len(p)) - i * 1e-4 for i, p in enumerate(pieces)]
    while len(tokens) < n:  # fill with unreachable user-defined tokens
        tokens.append(f"<extra_{len(tokens)}>")
        kinds.append("user")
        scores.append(-1e4)
    return tokens, scores, kinds


def synthetic_tensors(syn: SyntheticSpec):
    """The random weights of ``syn`` as (GGUF tensor name, float32 array), in one fixed draw order.

    Both writers take their weights from here, so the GGUF and the Hugging Face directory hold the
    same model. Arrays are (out, in), the layout of both formats.
    """
    import numpy as np

    rng = np.random.default_rng(syn.seed)

    def mat(rows: int, cols: int) -> "np.ndarray":
        return (rng.standard_normal((rows, cols), dtype=np.float32) * (1.0 / np.sqrt(cols))).astype(np.float32)

    kv_dim = syn.kv_heads * syn.head_dim
    yield "token_embd.weight", mat(syn.vocab, syn.embd)
    for i in range(syn.layers):
        yield f"blk.{i}.attn_norm.weight", np.ones(syn.embd, dtype=np.float32)
        yield f"blk.{i}.attn_q.weight", mat(syn.embd, syn.embd)
        yield f"blk.{i}.attn_k.weight", mat(kv_dim, syn.embd)
        yield f"blk.{i}.attn_v.weight", mat(kv_dim, syn.embd)
        yield f"blk.{i}.attn_output.weight", mat(syn.embd, syn.embd)
        yield f"blk.{i}.ffn_norm.weight", np.ones(syn.embd, dtype=np.float32)
        yield f"blk.{i}.ffn_gate.weight", mat(syn.ffn, syn.embd)
        yield f"blk.{i}.ffn_up.weight", mat(syn.ffn, syn.embd)
        yield f"blk.{i}.ffn_down.weight", mat(syn.embd, syn.ffn)
    yield "output_norm.weight", np.ones(syn.embd, dtype=np.float32)
    yield "output.weight", mat(syn.vocab, syn.embd)


WEIGHT_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_1", "Q4_0")
"""What a synthetic GGUF's matrices may be stored as (norms stay F32, as llama.cpp's converter keeps them): F32 is the
model itself; the others are the precisions a subject or a scorer runs (F16/BF16) and the quantized files users bring."""


def write_synthetic(syn: SyntheticSpec, directory: Path | None = None, weights: str = "F32") -> Path:
    """Write (or reuse) the GGUF file for ``syn`` with its matrices stored as ``weights`` (:data:`WEIGHT_TYPES`);
    atomic, so concurrent writers never see half a file."""
    if weights not in WEIGHT_TYPES:
        raise ModelSpecError(f"synthetic weights {weights!r} are not one of {', '.join(WEIGHT_TYPES)}")
    directory = directory or cache_dir()
    path = directory / f"synthetic-{short(syn.spec)}{'' if weights == 'F32' else '-' + weights.lower()}.gguf"
    if path.is_file():
        return path
    check_fits(syn)
    gguf = _gguf()
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".gguf.tmp")
    os.close(fd)
    try:
        w = gguf.GGUFWriter(tmp, "llama")
        w.add_name(f"workbench synthetic {syn.spec}")
        w.add_context_length(syn.ctx)
        w.add_embedding_length(syn.embd)
        w.add_block_count(syn.layers)
        w.add_feed_forward_length(syn.ffn)
        w.add_head_count(syn.heads)
        w.add_head_count_kv(syn.kv_heads)
        w.add_rope_dimension_count(syn.head_dim)
        w.add_rope_freq_base(10000.0)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_file_type(gguf.LlamaFileType.ALL_F32 if weights == "F32" else gguf.LlamaFileType[f"MOSTLY_{weights}"])
        w.add_vocab_size(syn.vocab)
        tokens, scores, kinds = vocab(syn.vocab)
        types = {"unknown": gguf.TokenType.UNKNOWN, "control": gguf.TokenType.CONTROL, "byte": gguf.TokenType.BYTE,
                 "normal": gguf.TokenType.NORMAL, "user": gguf.TokenType.USER_DEFINED}
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types([int(types[k]) for k in kinds])
        w.add_unk_token_id(0)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_add_bos_token(True)
        w.add_add_eos_token(False)
        w.add_chat_template(SYNTHETIC_CHAT_TEMPLATE)
        w.add_string("workbench.synthetic.spec", syn.spec)
        _add_tensors(w, syn, weights)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _gguf():
    """The ``gguf`` package, or a :class:`ModelSpecError` naming the extra that installs it."""
    try:
        import gguf
    except ImportError as e:  # pragma: no cover - depends on extras
        raise ModelSpecError(f"synthetic models need the 'gguf' package ({e}); install the 'llamacpp' extra") from e
    return gguf


def _add_tensors(w, syn: SyntheticSpec, weights: str) -> None:
    """The weights of ``syn`` into GGUF writer ``w``: matrices as ``weights``, norms (vectors) as F32."""
    import gguf

    qtype = gguf.GGMLQuantizationType[weights]
    for name, array in synthetic_tensors(syn):
        if array.ndim == 2 and weights != "F32":
            w.add_tensor(name, gguf.quants.quantize(array, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, array)
