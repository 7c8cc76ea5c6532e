"""What a model spec names: the synthetic geometries, the resolved model, and where synthetic models are cached.
A leaf: the writers and :func:`workbench.models.resolve` build on it."""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from ..engine import WorkbenchError

DEFAULT_MODEL = "smollm2-135m"
TOKEN_LO = 260  # lowest id for made-up prompts: above control and byte-fallback tokens of every vocabulary we use

# The alphabet every synthetic vocabulary starts with (after control and byte tokens).
BASE_PIECES = ["▁"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + list(" .,:;!?'\"-_()[]{}<>|/\\=+*#0123456789")


class ModelSpecError(WorkbenchError, ValueError):
    """A model spec that cannot be resolved; the message says what to fix."""


MAX_LAYERS = 512  # llama.cpp's LLAMA_MAX_LAYERS: a model with more fails to load after it was written
MAX_DIM = 2**32 - 1  # GGUF stores a context, a width or a count as a uint32


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
            v, low = getattr(self, f.name), 0 if f.name == "seed" else 1
            if not low <= v <= MAX_DIM:
                raise ModelSpecError(f"synthetic model: {f.name} must be in {low} … {MAX_DIM}, got {v}")
        if self.layers > MAX_LAYERS:
            raise ModelSpecError(f"synthetic model: layers must be at most {MAX_LAYERS} (llama.cpp's limit), "
                                 f"got {self.layers}")
        if self.embd % self.heads:
            raise ModelSpecError(f"synthetic model: embd ({self.embd}) must be divisible by heads ({self.heads})")
        if self.heads % self.kv_heads:
            raise ModelSpecError(f"synthetic model: heads ({self.heads}) must be divisible by kv_heads ({self.kv_heads})")
        if (self.embd // self.heads) % 2:
            raise ModelSpecError("synthetic model: head dim (embd/heads) must be even for RoPE")
        if self.vocab < len(BASE_PIECES) + 3 + 256:
            raise ModelSpecError(f"synthetic model: vocab must be at least {len(BASE_PIECES) + 259}, got {self.vocab}")

    @property
    def spec(self) -> str:
        return "synthetic:" + ",".join(f"{k}={v}" for k, v in asdict(self).items())

    @property
    def head_dim(self) -> int:
        return self.embd // self.heads

    @property
    def weight_bytes(self) -> int:
        """The float32 weights' size: what a writer holds in memory and writes (:func:`check_fits`)."""
        kv_dim = self.kv_heads * self.head_dim
        per_layer = 2 * self.embd * self.embd + 2 * kv_dim * self.embd + 3 * self.ffn * self.embd + 2 * self.embd
        return 4 * (2 * self.vocab * self.embd + self.layers * per_layer + self.embd)


def check_fits(syn: SyntheticSpec) -> None:
    """Refuse, before anything is written, a synthetic model whose weights this machine's memory cannot hold
    (the writers build every tensor in memory)."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):  # no such sysconf here: nothing to compare with
        return
    if syn.weight_bytes > memory:
        raise ModelSpecError(f"synthetic model {syn.spec}: its weights need {syn.weight_bytes / 2**30:.1f} GiB, more "
                             f"than this machine's {memory / 2**30:.1f} GiB of memory; make it smaller")


PRESETS: dict[str, SyntheticSpec] = {
    "tiny": SyntheticSpec(),
    "small": SyntheticSpec(layers=4, embd=128, heads=8, kv_heads=4, ffn=256, vocab=512, ctx=8192),
    "wide": SyntheticSpec(layers=2, embd=256, heads=8, kv_heads=8, ffn=512, vocab=512, ctx=4096),
    # vLLM's CPU attention refuses head dim 16 ("Unsupported CPU attention configuration"): head dim 64;
    # a context that holds the loop's τ-bench turns (≈6–8 k tokens in this vocabulary) on every engine.
    "cpu": SyntheticSpec(layers=2, embd=256, heads=4, kv_heads=2, ffn=512, vocab=512, ctx=16384),
    # the step-function gates' long context (workbench.certify): one layer, one head of dim 64 (vLLM's CPU attention
    # takes 64), so a 32k prefill takes seconds on one core; `synthetic:long,ctx=65536` for the 64k tier
    "long": SyntheticSpec(layers=1, embd=64, heads=1, kv_heads=1, ffn=128, vocab=512, ctx=32768),
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
    """Where synthetic models are cached (``WORKBENCH_CACHE`` or ``~/.cache/workbench``); a :class:`ModelSpecError`
    where that, or a folder above it, is a file, which no model could be written under."""
    given = os.environ.get("WORKBENCH_CACHE")
    root = Path(given or os.path.join(os.path.expanduser("~"), ".cache", "workbench"))
    for p in (root, *root.parents):
        if p.exists():
            if not p.is_dir():
                where = f"WORKBENCH_CACHE={given}" if given else f"the cache folder {root}"
                raise ModelSpecError(f"{where}: {p} is a file, not a folder; point WORKBENCH_CACHE at a folder")
            break
    return root / "models"


def parse_synthetic(spec: str) -> SyntheticSpec:
    body = spec.partition(":")[2].strip()
    if not body:
        return PRESETS["tiny"]
    base, preset, overrides = PRESETS["tiny"], None, {}
    names = {f.name for f in fields(SyntheticSpec)}
    for part in filter(None, (p.strip() for p in body.split(","))):
        if "=" not in part:
            if part not in PRESETS:
                raise ModelSpecError(f"unknown synthetic preset {part!r}; presets: {', '.join(PRESETS)}")
            if preset is not None:
                raise ModelSpecError(f"synthetic model {spec!r} names two presets ({preset}, {part}): name one")
            base, preset = PRESETS[part], part
            continue
        key, _, val = part.partition("=")
        key = key.strip()
        if key not in names:
            raise ModelSpecError(f"unknown synthetic key {key!r}; keys: {', '.join(sorted(names))}")
        if key in overrides:
            raise ModelSpecError(f"synthetic model {spec!r} gives {key} twice: give each key once")
        try:
            overrides[key] = int(val)
        except ValueError:
            raise ModelSpecError(f"synthetic key {key!r} needs an integer, got {val!r}") from None
    return replace(base, **overrides)


def short(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()[:12]
