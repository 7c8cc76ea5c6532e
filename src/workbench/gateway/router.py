"""The router a cache-aware gateway runs over a pool: fullproxy (round robin, least load) and KV-exact.

The reference design is NVIDIA's ``KvCacheAwareRouter`` (TensorRT-LLM, ``tensorrt_llm/serve/router.py``): per
server a set of block hashes fed by its ``/kv_cache_events``, the request's blocks hashed client-side, and the
server chosen by (matched tokens / the request's block tokens) − (active requests / max batch size), ties broken
round robin. Its own source leaves two things as TODOs ("1) parent hash verification, 2) partial matching": a
block counts whenever its hash is anywhere in the set) and tokenizes with a Hub download. Here:

- the request's blocks are hashed by the engine's own rule (the registry's event plane: block size, algorithm,
  seed and salt as admission checked them), from token ids the gateway already has (no tokenizer, no Hub);
- the match walks the chain from the root: block *i* counts only if the endpoint's inventory holds it *and*
  records as its parent block *i−1* (the root's parent: none), and it stops at the first block that fails, so a
  hash held under another parent, or a later block held after a missing one, never counts;
- a partial match is the longest such prefix in whole blocks, capped at the blocks the engine can reuse (never
  the last prompt token), scored against every endpoint, not only a full hit.

Each endpoint's inventory is its own (:class:`workbench.events.inventory.Inventory`, fed by its sole consumer).
A dropped endpoint (dead) is never chosen again; a request it failed is retried on the next choice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..events.hashing import Hasher
from ..events.inventory import Inventory

POLICIES = ("round-robin", "least-load", "kv-exact")
FULLPROXY = ("round-robin", "least-load")


@dataclass(frozen=True)
class Choice:
    """Where one request went and why: ``matched_tokens`` the router's inventory match per endpoint (a
    prediction, workbench-computed), ``scores`` the KV-exact score per endpoint (empty for fullproxy)."""

    endpoint: str
    policy: str
    matched_tokens: Mapping[str, int]
    scores: Mapping[str, float] = field(default_factory=dict)


def matched_blocks(inventory: Inventory, chain: Sequence[int]) -> int:
    """Leading blocks of ``chain`` (root first) the inventory holds, each chained onto the one before it."""
    parent, n = None, 0
    for h in chain:
        block = inventory.blocks.get(h)
        if block is None or block.parent != parent:
            break
        parent, n = h, n + 1
    return n


@dataclass
class Router:
    """``policy`` over the endpoints' ``inventories``; ``hasher``: the rule (block size and hash) the gateway
    admitted; ``max_batch``: the load that costs a whole prefix match in the KV-exact score."""

    policy: str
    inventories: dict[str, Inventory]
    hasher: Hasher
    max_batch: int = 8
    active: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)  # endpoint -> why
    _rr: int = 0

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"routing policy must be one of {', '.join(POLICIES)}, got {self.policy!r}")
        if not self.inventories:
            raise ValueError("a router needs at least one endpoint")
        for name in self.inventories:
            self.active.setdefault(name, 0)

    def live(self) -> list[str]:
        return [n for n in self.inventories if n not in self.dropped]

    def chain(self, tokens: Sequence[int], salt: str | None = None) -> list[int]:
        """The request's reusable block hashes under the rule, root first."""
        return self.hasher.chain(tokens, salt)[:self.hasher.reusable_blocks(len(tokens))]

    def matches(self, tokens: Sequence[int], salt: str | None = None) -> dict[str, int]:
        """Tokens of ``tokens`` each live endpoint's inventory holds as a chained prefix."""
        chain = self.chain(tokens, salt)
        return {n: matched_blocks(self.inventories[n], chain) * self.hasher.block_size for n in self.live()}

    def route(self, tokens: Sequence[int], salt: str | None = None) -> Choice:
        """Choose an endpoint for one request (and count it active there until :meth:`finish`)."""
        live = self.live()
        if not live:
            raise RuntimeError(f"every endpoint was dropped: {self.dropped}")
        matched = self.matches(tokens, salt)
        scores: dict[str, float] = {}
        if self.policy == "round-robin":
            best = live
        elif self.policy == "least-load":
            low = min(self.active[n] for n in live)
            best = [n for n in live if self.active[n] == low]
        else:
            padded = max(len(self.chain(tokens, salt)) * self.hasher.block_size, 1)
            scores = {n: matched[n] / padded - self.active[n] / self.max_batch for n in live}
            top = max(scores.values())
            best = [n for n in live if scores[n] == top]
        chosen = best[self._rr % len(best)]
        self._rr += 1
        self.active[chosen] += 1
        return Choice(chosen, self.policy, matched, scores)

    def finish(self, endpoint: str) -> None:
        self.active[endpoint] = max(self.active[endpoint] - 1, 0)

    def drop(self, endpoint: str, why: str) -> None:
        """Never route to ``endpoint`` again (it died); its inventory is no longer trusted."""
        self.dropped[endpoint] = why
        self.active[endpoint] = 0
