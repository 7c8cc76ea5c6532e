"""What a model spec names: the synthetic geometries, the resolved model, and where synthetic models are cached.
A leaf: the writers and :func:`workbench.models.resolve` build on it."""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from ..contract import WorkbenchError

DEFAULT_MODEL = "smollm2-135m"
TOKEN_LO = 260  # lowest id for made-up prompts: above control and byte-fallback tokens of every vocabulary we use

# The alphabet every synthetic vocabulary starts with (after control and byte tokens).
BASE_PIECES = ["▁"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + list(" .,:;!?'\"-_()[]{}<>|/\\=+*#0123456789")


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
        if self.vocab < len(BASE_PIECES) + 3 + 256:
            raise ModelSpecError(f"synthetic model: vocab must be at least {len(BASE_PIECES) + 259}, got {self.vocab}")

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


def short(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()[:12]
