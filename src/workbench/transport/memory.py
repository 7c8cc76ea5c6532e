"""``MemoryService``: the contract's own in-memory Service (``runtime/transport/memory.go``, contenox/runtime 7d0a257f).

It does no inference: it models the warm-reuse contract (reuse keyed on the stable byte hash under a compatible
runtime identity, one "token" per character) so the wire and the report driven through the contract can be tested
without an engine, as contenox tests its runtime wrapper and ``runtime/benchreport`` against it. It is contenox's,
ported; nothing the workbench measures comes from it.
"""

from __future__ import annotations

import threading
from typing import Iterator

from .contract import (ContextReport, DecodeConfig, EmbedRequest, EmbedResult, ModelInfo, OpenSessionRequest,
                       PrefixInput, PrefixStatus, SessionSnapshot, StreamChunk, SuffixInput, SuffixStatus)
from .errors import ErrCanceled, ErrContextOverflow, ErrManifestMismatch, ErrSessionClosed, ErrStaleFence, \
    ErrUnsupportedFeature
from .manifest import ContextManifest


def token_proxy(text: str) -> int:
    """``tokenProxy``: one token per rune."""
    return len(text)


class MemorySession:
    def __init__(self, num_ctx: int) -> None:
        self.num_ctx = num_ctx
        self.closed = False
        self.stable_hash = ""
        self.manifest = ContextManifest()
        self.prefix_tokens = self.suffix_tokens = 0
        self._lock = threading.Lock()

    def _resident(self) -> int:
        return self.prefix_tokens + self.suffix_tokens

    def _available(self) -> int:
        return 0 if self.num_ctx <= 0 else self.num_ctx - self._resident()

    def ensure_prefix(self, prefix: PrefixInput) -> PrefixStatus:
        with self._lock:
            if self.closed:
                raise ErrSessionClosed()
            want = token_proxy(prefix.text)
            old = self._resident()
            if self.num_ctx > 0 and want > self.num_ctx:
                raise ErrContextOverflow()
            compatible, _ = self.manifest.compatible_runtime(prefix.manifest)
            warm = (self.prefix_tokens > 0 and compatible and self.stable_hash == prefix.manifest.stable_byte_hash
                    and want > 0)
            reused, prefilled, dropped = (want, 0, old - want) if warm else (0, want, old)
            self.suffix_tokens, self.prefix_tokens = 0, want
            self.stable_hash, self.manifest = prefix.manifest.stable_byte_hash, prefix.manifest
            return PrefixStatus(reused, prefilled, dropped, self.prefix_tokens, self._resident(), self._available(),
                                prefix.manifest.stable_byte_hash, prefix.manifest.stable_token_hash,
                                prefix.manifest.digest())

    def prefill_suffix(self, suffix: SuffixInput) -> SuffixStatus:
        with self._lock:
            if self.closed:
                raise ErrSessionClosed()
            ok, reason = self.manifest.compatible_runtime(suffix.manifest)
            if not ok:
                raise ErrManifestMismatch(reason)
            if (not self.manifest.is_zero() and not suffix.manifest.is_zero()
                    and self.manifest.stable_byte_hash != suffix.manifest.stable_byte_hash):
                raise ErrManifestMismatch("stable prefix changed between EnsurePrefix and PrefillSuffix")
            add = token_proxy(suffix.text)
            if self.num_ctx > 0 and self._resident() + add > self.num_ctx:
                raise ErrContextOverflow()
            self.suffix_tokens += add
            return SuffixStatus(self.suffix_tokens, self.prefix_tokens, self._resident(), self._available(),
                                suffix.manifest.digest())

    def decode(self, cfg: DecodeConfig, cancelled: threading.Event | None = None) -> Iterator[StreamChunk]:
        if self.closed:
            yield StreamChunk(error=ErrSessionClosed())
            return
        for _ in range(cfg.max_tokens):
            if cancelled is not None and cancelled.is_set():
                yield StreamChunk(error=ErrCanceled())
                return
            yield StreamChunk(text="x")

    def explain_context(self) -> ContextReport:
        with self._lock:
            return ContextReport(resident_tokens=self._resident(), prefix_tokens=self.prefix_tokens,
                                 num_ctx=self.num_ctx, hot_context_tokens=self.num_ctx,
                                 planner_effective_context=self.num_ctx, available_tokens=self._available(),
                                 stable_byte_hash=self.stable_hash, manifest_digest=self.manifest.digest(),
                                 manifest=self.manifest, closed=self.closed)

    def snapshot(self) -> SessionSnapshot:
        with self._lock:
            if self.closed:
                raise ErrSessionClosed()
            return SessionSnapshot(resident_tokens=self._resident(), prefix_tokens=self.prefix_tokens,
                                   num_ctx=self.num_ctx, manifest=self.manifest)

    def restore(self, snap: SessionSnapshot) -> None:
        with self._lock:
            if self.closed:
                raise ErrSessionClosed()
            if (snap.num_ctx > 0 and self.num_ctx > 0 and snap.num_ctx != self.num_ctx) or snap.resident_tokens < 0 \
                    or snap.prefix_tokens < 0 or snap.prefix_tokens > snap.resident_tokens \
                    or (self.num_ctx > 0 and snap.resident_tokens > self.num_ctx):
                raise ErrContextOverflow()
            self.prefix_tokens = snap.prefix_tokens
            self.suffix_tokens = max(snap.resident_tokens - snap.prefix_tokens, 0)
            self.manifest, self.stable_hash = snap.manifest, snap.manifest.stable_byte_hash

    def close(self) -> None:
        self.closed = True

    def evidence(self) -> dict:
        return {"stages": [], "closed": self.closed}


class MemoryService:
    """``NewMemoryService(WithOwnerFence(owner))``: OpenSession refuses another owner's fence when one is set."""

    backend = "none"

    def __init__(self, owner: str = "", *, instance_id: str = "") -> None:
        self.owner = owner
        self.instance_id = instance_id or owner
        self.states: dict[str, bytes] = {}

    def _fence(self, owner: str) -> None:
        if self.owner and owner != self.owner:
            raise ErrStaleFence()

    def open_session(self, req: OpenSessionRequest) -> MemorySession:
        self._fence(req.owner_instance_id)
        return MemorySession(req.config.num_ctx)

    def describe(self, req: OpenSessionRequest) -> ModelInfo:
        self._fence(req.owner_instance_id)
        n = req.config.num_ctx
        return ModelInfo(model_max_context=n, effective_context=n, hot_context_tokens=n, planner_effective_context=n)

    def embed(self, req: EmbedRequest) -> EmbedResult:
        self._fence(req.owner_instance_id)
        raise ErrUnsupportedFeature()

    def _no_controller(self, *_: object) -> None:
        raise ErrUnsupportedFeature()  # server.go controller(): a Service that is no ModelController

    status = load_model = unload_model = list_models = _no_controller

    def evidence(self) -> dict:
        return {"backend": self.backend}

    def inject_fault(self, sess: object) -> str:
        raise ErrUnsupportedFeature("the memory service has no engine to break")


__all__ = ["MemoryService", "MemorySession", "token_proxy"]
