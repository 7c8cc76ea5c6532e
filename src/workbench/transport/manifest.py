"""``ContextManifest``: modeld's cache identity, as ``runtime/contextasm/manifest.go`` (contenox/runtime 7d0a257f) defines it.

A warm hit is valid only when the runtime identity is compatible and the token prefix still matches. Its digest is the
sha256 of Go's ``json.Marshal(m)`` (manifest.go ``digest``, lines 445-452), so the struct's field order, tags and
``omitempty`` below are the digest's definition, not a style choice; :mod:`workbench.transport.gojson` writes Go's bytes.
``compatible_runtime`` compares profile, backend, backend version, model digest, prompt format, template digest,
runtime digest and the BOS policy, and "deliberately excludes" the stable hash (lines 204-240): token LCP reuse stays
correct when stable text changes under one runtime identity.

Two derivations from the modeld era live here as well, each with its source:

* :func:`runtime_digest`: the llama client's ``runtimeDigest(cfg, adapters)`` (``runtime/modelrepo/llama/manifest.go``
  lines 22-60): the session's runtime knobs and its LoRA adapters **in list order, each digest with its scale**, so a
  variant is a different manifest from its base, and base+A+B from base+B+A.
* :func:`cache_salt`: the TensorRT-LLM mapping row "``cache_salt`` = manifest digest ⊕ adapter digests" (the seed,
  ``docs/development/blueprints/modeld/tensorrt-llm-backend.md`` at 2bfdc1f5), made exact here: the digest of the
  manifest's *runtime identity* (the fields ``CompatibleRuntime`` compares; stable/volatile hashes, byte counts and
  segments left zero, so an edited stable segment keeps the shared head reusable, as LCP reuse does) joined with the
  adapters in order with scale. Derived, never chosen by a caller.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Callable, Sequence

from . import gojson
from .gojson import go


class ManifestMismatchError(Exception):
    """``contextasm.ManifestMismatchError``: the exact reason a suffix/prefix could not be paired with resident KV.
    Its text is ``contextasm: context manifest mismatch[: reason]`` (manifest.go lines 15-30). The transport's
    error of the same meaning is :class:`workbench.transport.errors.ErrManifestMismatch`, which subclasses this."""

    SENTINEL = "contextasm: context manifest mismatch"

    def __init__(self, reason: str = "") -> None:
        self.reason = trim_reason(reason)
        super().__init__(f"{self.SENTINEL}: {self.reason}" if self.reason else self.SENTINEL)


def trim_reason(reason: str) -> str:
    """``trimManifestMismatchPrefix``: a reason that repeats the sentinel's text (after crossing the wire) loses it."""
    reason = reason.strip()
    prefix = ManifestMismatchError.SENTINEL
    while True:
        if reason == prefix:
            return ""
        if not reason.startswith(prefix + ": "):
            return reason
        reason = reason[len(prefix) + 2:].strip()


@dataclass
class ManifestSegment:
    """One rendered prompt segment (manifest.go lines 55-77)."""

    kind: str = go("kind", "")
    stable: bool = go("stable", False)
    cache_class: str = go("cache_class", "", omitempty=True)
    invalidation: str = go("invalidation", "", omitempty=True)
    byte_start: int = go("byte_start", 0)
    byte_end: int = go("byte_end", 0)
    byte_hash: str = go("byte_hash", "")
    token_start: int = go("token_start", 0, omitempty=True)
    token_end: int = go("token_end", 0, omitempty=True)
    token_hash: str = go("token_hash", "", omitempty=True)
    tool_calls_json: str = go("tool_calls_json", "", omitempty=True)
    tool_call_id: str = go("tool_call_id", "", omitempty=True)


@dataclass
class ContextManifest:
    """The cache identity (manifest.go lines 79-96)."""

    profile_id: str = go("profile_id", "", omitempty=True)
    backend: str = go("backend", "")
    backend_version: str = go("backend_version", "", omitempty=True)
    model_digest: str = go("model_digest", "", omitempty=True)
    prompt_format: str = go("prompt_format", "")
    prompt_template_digest: str = go("prompt_template_digest", "")
    runtime_digest: str = go("runtime_digest", "")
    add_bos: bool = go("add_bos", False)
    stable_bytes: int = go("stable_bytes", 0)
    total_bytes: int = go("total_bytes", 0)
    stable_byte_hash: str = go("stable_byte_hash", "")
    stable_token_hash: str = go("stable_token_hash", "", omitempty=True)
    volatile_token_hash: str = go("volatile_token_hash", "", omitempty=True)
    segments: list[ManifestSegment] | None = go("segments", None, omitempty=True)

    def is_zero(self) -> bool:
        """``isZero`` (lines 189-197): the caller supplied no manifest."""
        return not (self.backend or self.profile_id or self.model_digest or self.prompt_format
                    or self.prompt_template_digest or self.runtime_digest or self.stable_byte_hash)

    def digest(self) -> str:
        """``Digest()``: sha256 hex of ``json.Marshal(m)``; "" for a zero manifest (lines 445-457)."""
        return "" if self.is_zero() else hash_bytes(gojson.marshal(self))

    def compatible_runtime(self, nxt: "ContextManifest") -> tuple[bool, str]:
        """``CompatibleRuntime`` (lines 204-240): may KV made under ``self`` be reused by ``nxt``, and if not why."""
        if self.is_zero() or nxt.is_zero():
            return True, ""
        for name in RUNTIME_IDENTITY:
            if getattr(self, name) != getattr(nxt, name):
                return False, f"{name} changed"
        if self.add_bos != nxt.add_bos:
            return False, "bos policy changed"
        return True, ""

    def runtime_identity(self) -> "ContextManifest":
        """The manifest with only what :meth:`compatible_runtime` compares (the salt's input, :func:`cache_salt`)."""
        return ContextManifest(**{n: getattr(self, n) for n in RUNTIME_IDENTITY}, add_bos=self.add_bos)

    def with_stable_token_hash(self, token_hash: str) -> "ContextManifest":
        return dataclasses.replace(self, stable_token_hash=token_hash)

    def copy(self) -> "ContextManifest":
        return dataclasses.replace(self, segments=[dataclasses.replace(s) for s in self.segments]
                                   if self.segments is not None else None)


RUNTIME_IDENTITY = ("profile_id", "backend", "backend_version", "model_digest", "prompt_format",
                    "prompt_template_digest", "runtime_digest")
"""The string fields ``compatibleRuntime`` compares, in its order (the BOS policy is compared after them)."""


def hash_bytes(b: bytes) -> str:
    """``HashBytes``: sha256, lowercase hex."""
    return hashlib.sha256(b).hexdigest()


def hash_string(s: str) -> str:
    """``HashString``: sha256 of the UTF-8 bytes."""
    return hash_bytes(s.encode("utf-8"))


def hash_token_ids(tokens: Sequence[int]) -> str:
    """``HashTokenIDs`` (lines 469-478): each id as 8 little-endian bytes of ``uint64(tok)``, hashed in order."""
    h = hashlib.sha256()
    for t in tokens:
        h.update((int(t) & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little"))
    return h.hexdigest()


# --------------------------------------------------------------------------- building manifests (the caller's side)


def default_cache_class(kind: str, stable: bool) -> str:
    """``defaultCacheClass`` (manifest.go): the cache class a segment kind gets when none is given."""
    k = kind.strip().lower()
    if k in ("system", "tools", "repo_rules"):
        return "task_pinned"
    if k in ("repo_map", "pinned"):
        return "repo_map"
    if k in ("diff", "terminal", "user", "assistant", "tool", "assistant_prompt"):
        return "volatile"
    return "task_pinned" if stable else "volatile"


@dataclass(frozen=True)
class ManifestIdentity:
    """``contextasm.ManifestIdentity`` (segments.go line 83): the runtime identity a caller puts in a manifest."""

    profile_id: str = ""
    backend: str = ""
    backend_version: str = ""
    model_digest: str = ""
    prompt_format: str = ""
    prompt_template_digest: str = ""
    runtime_digest: str = ""
    add_bos: bool = False


def _text_bytes(text: str) -> bytes:
    return text.encode("utf-8")


def build_split_manifest(stable_text: str, volatile_text: str, segments: Sequence[ManifestSegment],
                         ident: ManifestIdentity) -> ContextManifest:
    """``BuildSplitManifest`` (manifest.go lines 98-125): byte ranges, byte hashes and cache classes checked and
    filled; it renders nothing and tokenizes nothing. Raises :class:`ManifestMismatchError` as Go does."""
    stable_b, volatile_b = _text_bytes(stable_text), _text_bytes(volatile_text)
    stable_n, total_n = len(stable_b), len(stable_b) + len(volatile_b)
    out = [dataclasses.replace(s) for s in segments]
    if out:
        _normalize_split(stable_b + volatile_b, stable_n, total_n, out)
    return ContextManifest(profile_id=ident.profile_id, backend=ident.backend, backend_version=ident.backend_version,
                           model_digest=ident.model_digest, prompt_format=ident.prompt_format,
                           prompt_template_digest=ident.prompt_template_digest, runtime_digest=ident.runtime_digest,
                           add_bos=ident.add_bos, stable_bytes=stable_n, total_bytes=total_n,
                           stable_byte_hash=hash_bytes(stable_b), segments=out or None)


def _check_segment(seg: ManifestSegment, cursors: list, stable_n: int, total_n: int) -> None:
    """One segment's range against the cursors ``[stable, volatile, seen_volatile]`` (advanced in place)."""
    if seg.byte_start < 0 or seg.byte_end < seg.byte_start or seg.byte_end > total_n:
        raise ManifestMismatchError(f'segment "{seg.kind}" byte range is outside manifest text')
    if seg.stable:
        if cursors[2]:
            raise ManifestMismatchError("stable segment appears after volatile segment")
        if seg.byte_start != cursors[0] or seg.byte_end > stable_n:
            raise ManifestMismatchError("stable segment byte ranges are not contiguous")
        cursors[0] = seg.byte_end
    else:
        cursors[2] = True
        if seg.byte_start != cursors[1] or seg.byte_end < stable_n:
            raise ManifestMismatchError("volatile segment byte ranges are not contiguous")
        cursors[1] = seg.byte_end


def _normalize_split(full: bytes, stable_n: int, total_n: int, segs: list[ManifestSegment]) -> None:
    """``normalizeSplitSegments``: contiguous stable then volatile ranges covering the text, hashes filled."""
    cursors = [0, stable_n, False]
    for seg in segs:
        _check_segment(seg, cursors, stable_n, total_n)
        want = hash_bytes(full[seg.byte_start:seg.byte_end])
        if seg.byte_hash and seg.byte_hash != want:
            raise ManifestMismatchError(f'segment "{seg.kind}" byte hash does not match text')
        seg.byte_hash = want
        if not seg.cache_class:
            seg.cache_class = default_cache_class(seg.kind, seg.stable)
    if cursors[0] != stable_n:
        raise ManifestMismatchError("stable segments do not cover stable text")
    if cursors[1] != total_n:
        raise ManifestMismatchError("volatile segments do not cover volatile text")


def chat_turn(messages: Sequence[tuple[str, str]], stable_count: int, ident: ManifestIdentity
              ) -> tuple[str, str, ContextManifest]:
    """A caller's turn as the modeld-era llama client plans it (``runtime/modelrepo/llama/prompt.go``
    ``buildPromptPlan``): raw message contents keyed by role, the first ``stable_count`` in the stable text and the
    rest in the volatile text, one segment each; the daemon renders the model's own template. Returns
    (stable text, volatile text, manifest)."""
    stable, volatile, segs = "", "", []
    for i, (role, content) in enumerate(messages):
        is_stable = i < stable_count
        base = len(_text_bytes(stable)) + (0 if is_stable else len(_text_bytes(volatile)))
        if is_stable:
            stable += content
        else:
            volatile += content
        segs.append(ManifestSegment(kind=role, stable=is_stable, byte_start=base,
                                    byte_end=base + len(_text_bytes(content))))
    return stable, volatile, build_split_manifest(stable, volatile, segs, ident)


# --------------------------------------------------------------------------- messages (the daemon's side)


CHAT_ROLES = ("system", "user", "assistant", "tool")
"""``sessionkit.ChatRole``: a segment kind that is a chat role; any other kind is a control segment (BOS, the
assistant cue) the model's own template renders itself (``modeld/internal/sessionkit/sessionkit.go``)."""


@dataclass(frozen=True)
class ChatMessage:
    """``chatTemplateMessage`` (``modeld/llama/llamasession/messages.go``)."""

    role: str
    content: str
    tool_calls: str = ""
    tool_call_id: str = ""

    def as_dict(self) -> dict:
        d = {"role": self.role, "content": self.content}
        if self.tool_call_id:
            d["tool_call_id"] = self.tool_call_id
        return d


def _slice(text: str, lo: int, hi: int) -> str:
    return _text_bytes(text)[lo:hi].decode("utf-8", errors="replace")


def stable_messages(text: str, m: ContextManifest) -> list[ChatMessage]:
    """``stableMessages`` (``modeld/llama/llamasession/llama.go`` lines 929-947): one message per stable segment whose
    kind is a chat role, its content the segment's byte range of the stable text; a range outside it is skipped."""
    n = len(_text_bytes(text))
    return [ChatMessage(s.kind, _slice(text, s.byte_start, s.byte_end), s.tool_calls_json, s.tool_call_id)
            for s in (m.segments or []) if s.stable and s.kind in CHAT_ROLES
            and 0 <= s.byte_start <= s.byte_end <= n]


def volatile_messages(text: str, m: ContextManifest) -> list[ChatMessage]:
    """``volatileMessages`` (llama.go lines 949-972): volatile segments, byte offsets relative to ``stable_bytes``."""
    n, base, out = len(_text_bytes(text)), m.stable_bytes, []
    for s in m.segments or []:
        if s.stable or s.kind not in CHAT_ROLES:
            continue
        lo, hi = s.byte_start - base, s.byte_end - base
        if 0 <= lo <= hi <= n:
            out.append(ChatMessage(s.kind, _slice(text, lo, hi), s.tool_calls_json, s.tool_call_id))
    return out


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """``sessionkit.CommonPrefixLen``."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


# --------------------------------------------------------------------------- adapter identity


@dataclass(frozen=True)
class AdapterSpec:
    """``transport.AdapterSpec`` (``runtime/transport/session.go``): one LoRA adapter applied at ``scale``; Name and
    Digest carried for cache identity. ``scale`` is a Go ``float32``."""

    name: str = go("name", "", omitempty=True)
    path: str = go("path", "", omitempty=True)
    digest: str = go("digest", "", omitempty=True)
    scale: float = go("scale", 0.0, omitempty=True, kind="float32")


@dataclass
class _AdapterIdentity:
    digest: str = go("digest", "", omitempty=True)
    scale: float = go("scale", 0.0, omitempty=True, kind="float32")


@dataclass
class _RuntimeIdentity:
    """``runtimeIdentity`` inside ``runtimeDigest`` (runtime/modelrepo/llama/manifest.go lines 27-38)."""

    num_ctx: int = go("num_ctx", 0)
    planner_effective_context: int = go("planner_effective_context", 0, omitempty=True)
    num_batch: int = go("num_batch", 0)
    num_threads: int = go("num_threads", 0)
    num_gpu_layers: int = go("num_gpu_layers", 0)
    tensor_split: list[float] | None = go("tensor_split", None, omitempty=True, kind="float32")
    flash_attn: bool = go("flash_attention", False)
    kv_cache_type: str = go("kv_cache_type", "", omitempty=True)
    reasoning: str = go("reasoning", "", omitempty=True)
    adapters: list[_AdapterIdentity] | None = go("adapters", None, omitempty=True)


def _adapter_ids(adapters: Sequence[AdapterSpec]) -> list[_AdapterIdentity] | None:
    return [_AdapterIdentity(a.digest, a.scale) for a in adapters] or None


def runtime_digest(num_ctx: int = 0, *, planner_effective_context: int = 0, num_batch: int = 0, num_threads: int = 0,
                   num_gpu_layers: int = 0, tensor_split: Sequence[float] | None = None, flash_attn: bool = False,
                   kv_cache_type: str = "", reasoning_format: str = "",
                   adapters: Sequence[AdapterSpec] = ()) -> str:
    """``runtimeDigest(cfg, adapters)`` of the modeld-era llama client, after its ``normalizeConfig`` (a batch of 0
    is 512): the hash of the runtime knobs and the adapters in list order, each digest with its scale."""
    ident = _RuntimeIdentity(num_ctx=num_ctx, planner_effective_context=planner_effective_context,
                             num_batch=num_batch if num_batch > 0 else 512, num_threads=num_threads,
                             num_gpu_layers=num_gpu_layers, tensor_split=list(tensor_split) if tensor_split else None,
                             flash_attn=flash_attn, kv_cache_type=kv_cache_type, reasoning=reasoning_format,
                             adapters=_adapter_ids(adapters))
    return hash_bytes(gojson.marshal(ident))


@dataclass
class _Salt:
    manifest_digest: str = go("manifest_digest", "")
    adapters: list[_AdapterIdentity] | None = go("adapters", None, omitempty=True)


def cache_salt(manifest: ContextManifest, adapters: Sequence[AdapterSpec] = ()) -> str:
    """The engine-level ``cache_salt`` of a request (the mapping row): the digest of ``manifest``'s runtime identity
    (``Digest()`` of :meth:`ContextManifest.runtime_identity`) joined, as Go would marshal
    ``{"manifest_digest":…,"adapters":[{"digest":…,"scale":…},…]}``, with the adapters in order, with scale; the
    sha256 of that. Two manifests :meth:`~ContextManifest.compatible_runtime` accepts under the same adapters give
    one salt; any change of identity, adapter, adapter order or scale gives another."""
    return hash_bytes(gojson.marshal(_Salt(manifest.runtime_identity().digest(), _adapter_ids(adapters))))


@dataclass(frozen=True)
class Variant:
    """What an engine cell's KV is valid for: the model's content digest and its LoRA adapters in order, each with
    its scale. Its :attr:`digest` is the ``cache_salt`` a request carries when the caller derived none (a cell opened
    by a probe at the engine layer); a session adapter derives the salt from the caller's manifest
    (:func:`cache_salt`) and passes it down, and the cell sends it as it is (:meth:`cache_key`)."""

    model_digest: str
    adapters: tuple[AdapterSpec, ...] = field(default=())

    @property
    def digest(self) -> str:
        return cache_salt(ContextManifest(model_digest=self.model_digest), self.adapters)

    def cache_key(self, salt: str | None = None) -> str:
        """The key one request carries: ``salt`` as derived by the caller, else :attr:`digest`."""
        return self.digest if salt is None else salt


def adapter_content_digest(path: str) -> str:
    """An adapter's content digest (``AdapterSpec.Digest`` as this workbench computes it): the sha256 of a file (a GGUF
    LoRA), or of a directory's every file by relative name and sha256, sorted (a PEFT adapter)."""
    from pathlib import Path

    def file_sha(f: Path) -> str:
        h = hashlib.sha256()
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()

    p = Path(path)
    if not p.is_dir():
        return file_sha(p)
    h = hashlib.sha256()
    for f in sorted(x for x in p.rglob("*") if x.is_file()):
        h.update(f"{f.relative_to(p).as_posix()}:{file_sha(f)}\n".encode())
    return h.hexdigest()


TokenizeFunc = Callable[[str, bool], list[int]]


__all__ = ["AdapterSpec", "adapter_content_digest", "CHAT_ROLES", "ChatMessage", "ContextManifest", "ManifestIdentity", "ManifestMismatchError",
           "ManifestSegment", "RUNTIME_IDENTITY", "TokenizeFunc", "Variant", "build_split_manifest", "cache_salt",
           "chat_turn", "common_prefix_len", "default_cache_class", "hash_bytes", "hash_string", "hash_token_ids",
           "runtime_digest", "stable_messages", "trim_reason", "volatile_messages"]
