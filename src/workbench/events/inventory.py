"""The per-endpoint inventory of cached blocks, built only from the engine's events, and its prediction.

Each ``stored`` block is indexed by the engine's own hash (hash → parent, tokens, medium): a consumer that
keys on the engine's hashes keeps salted and LoRA chains apart exactly as the engine does, since the engine
mixed them into the hash. ``removed`` drops blocks; ``cleared`` (vLLM ``AllBlocksCleared``) and ``created``
(TensorRT-LLM: a new pool) empty it. :meth:`Inventory.predict` recomputes the request's block hashes
(:mod:`workbench.events.hashing`) and counts the leading ones the inventory holds: the cached tokens the
engine should report for that request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable, Iterable, Sequence

from ..engine import KvEvent
from .hashing import Hasher

RESYNC = ("clear", "replay")
"""Declared resync policies on a gap: ``clear`` empties the inventory and rebuilds it from later events;
``replay`` asks the source for the missed events (vLLM's replay socket) and clears only where the replay does
not reach back far enough."""


@dataclass
class Block:
    parent: int | None
    tokens: tuple[int, ...]
    medium: str | None
    copies: int = 1  # vLLM may cache one hash in two blocks; each is removed on its own


@dataclass
class Inventory:
    """``rekey=True`` keys blocks by the client's own hash of their tokens (a gateway that uses the engine's hash
    only as a handle for parents and removals, e.g. LoxiLB's ``blockhash_trtllm``): it cannot see salts or LoRA."""

    hasher: Hasher
    rekey: bool = False
    blocks: dict[int, Block] = field(default_factory=dict)
    _alias: dict[int, tuple] = field(default_factory=dict)  # rekey: engine hash → (chain state, our key)
    applied: int = 0
    unknown_removals: int = 0  # a removed hash we never saw stored (events were lost)
    resets: int = 0

    def apply(self, event: KvEvent) -> None:
        self.applied += 1
        if event.kind == "stored":
            parent = event.parent_hash
            medium = event.raw.get("medium")
            for h, toks in zip(event.block_hashes, event.block_tokens or ((),) * len(event.block_hashes)):
                key = h
                if self.rekey:
                    state = self._alias[parent][0] if parent in self._alias else None
                    self._alias[h] = self.hasher.rekey(state, toks)
                    key = self._alias[h][1]
                self._add(key, parent, toks, medium)
                parent = h  # within one event, block i+1's parent is block i
        elif event.kind == "removed":
            for h in event.block_hashes:
                if self.rekey:
                    h = self._alias.pop(h, (None, None))[1]
                b = self.blocks.get(h)
                if b is None:
                    self.unknown_removals += 1
                elif b.copies > 1:
                    b.copies -= 1
                else:
                    del self.blocks[h]
        elif event.kind in ("cleared", "created"):
            self.clear()

    def _add(self, h: int, parent: int | None, toks: tuple, medium: str | None) -> None:
        if h in self.blocks:
            self.blocks[h].copies += 1
        else:
            self.blocks[h] = Block(parent, tuple(toks), medium)

    def apply_all(self, events: Iterable[KvEvent]) -> None:
        for e in events:
            self.apply(e)

    def clear(self) -> None:
        self.blocks.clear()
        self._alias.clear()
        self.resets += 1

    def predict(self, tokens: Sequence[int], salt: str | None = None, lora: Hashable | None = None) -> int:
        """Cached tokens the engine should report for a request of ``tokens``: the leading blocks whose hashes
        the inventory holds, up to the most the engine reuses (never the last token)."""
        if self.rekey:  # its own keys carry no salt or LoRA
            salt = lora = None
        chain = self.hasher.chain(tokens, salt, lora)[:self.hasher.reusable_blocks(len(tokens))]
        n = 0
        for h in chain:
            if h not in self.blocks:
                break
            n += 1
        return n * self.hasher.block_size

    def __len__(self) -> int:
        return len(self.blocks)
