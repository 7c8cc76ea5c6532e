"""``capacity.Policy``: the operator's memory policy modeld applies before opening a resident session
(``modeld/capacity/capacity.go`` line 335, contenox/runtime 7d0a257f; ``modeld serve --mem-max --mem-reserve
--mem-cold --min-hot-context`` set it).

A session adapter reads it in ``Describe`` and ``OpenSession``: the KV budget it may hold is what the policy leaves
of the device, in bytes, read in the engine's own bytes per token (``ModelInfo.kv_bytes_per_token``); the engine is
then opened with that many tokens (TensorRT-LLM: ``KvCacheConfig.max_tokens``, never ``free_gpu_memory_fraction``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .gojson import go

DEFAULT_HEADROOM_FRAC = 0.0


@dataclass
class Policy:
    """``MaxResidentBytes`` is a hard ceiling on the resident footprint; ``MinFreeBytes`` is kept free for other
    work; ``HostColdBudgetBytes`` bounds the host cold store; ``MinHotContextTokens`` (0: backend default, <0:
    disabled); ``HeadroomFrac`` a fraction kept back."""

    max_resident_bytes: int = go("max_resident_bytes", 0, omitempty=True)
    min_free_bytes: int = go("min_free_bytes", 0, omitempty=True)
    host_cold_budget_bytes: int = go("host_cold_budget_bytes", 0, omitempty=True)
    min_hot_context_tokens: int = go("min_hot_context_tokens", 0, omitempty=True)
    headroom_frac: float = go("headroom_frac", 0.0, omitempty=True)

    def usable_bytes(self, free_bytes: int, weights_bytes: int = 0) -> int:
        """Bytes a session may hold for KV: the free bytes less the reserve and the headroom, capped by the
        resident ceiling less the weights; never below 0. (A reading of capacity.go's resolution, reduced to
        the figures a cell has: the Describe answer's ``usable_bytes``.)"""
        usable = max(0, free_bytes - max(0, self.min_free_bytes))
        usable -= int(usable * max(0.0, self.headroom_frac))
        if self.max_resident_bytes > 0:
            usable = min(usable, max(0, self.max_resident_bytes - weights_bytes))
        return max(0, usable)

    def kv_tokens(self, free_bytes: int, kv_bytes_per_token: int, weights_bytes: int = 0) -> int:
        """Tokens of KV the policy allows at ``kv_bytes_per_token`` (0 where the bytes per token are unknown)."""
        if kv_bytes_per_token <= 0:
            return 0
        return self.usable_bytes(free_bytes, weights_bytes) // kv_bytes_per_token


__all__ = ["Policy"]
