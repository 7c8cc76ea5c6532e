"""vLLM's block hashes recomputed from token ids, as its events report them (hash parity).

Written from the engine's documented behaviour, not copied:

- **vLLM 0.32** (``vllm/v1/core/kv_cache_utils.py``: ``hash_block_tokens``, ``get_request_block_hasher``,
  ``generate_block_hash_extra_keys``, ``init_none_hash``; ``vllm/utils/hashing.py``): only *full* blocks are
  hashed; block *i*'s digest is ``H((parent digest or NONE_HASH, tuple(block tokens), extra_keys))`` where ``H``
  is ``sha256`` (pickle, highest protocol, then SHA-256; the ``CacheConfig`` default) or ``sha256_cbor``
  (canonical CBOR, then SHA-256). ``NONE_HASH = H(seed)`` with the seed ``PYTHONHASHSEED``, or, when that is
  unset, the fixed ``"vllm-none-hash"`` for these cryptographic hashes (0.32; older releases used random
  bytes). ``extra_keys`` is ``None`` or a tuple of ``("lora", name, path)`` (every block of a LoRA request) and
  ``("cache_salt", salt)`` (the first block only). Events carry ``int.from_bytes(digest, "big") & (2**64−1)``
  (the last 8 bytes) while ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1``, the default. A request reuses at most
  ``len(tokens) − 1`` tokens (``KVCacheManager.get_computed_blocks``), in whole blocks.
"""

from __future__ import annotations

import hashlib
import pickle
from dataclasses import dataclass
from typing import Any, Callable, Sequence

VLLM_ALGOS = ("sha256", "sha256_cbor")
VLLM_DEFAULT_SEED = "vllm-none-hash"  # 0.32: the seed for cryptographic hashes when PYTHONHASHSEED is unset
_M64 = (1 << 64) - 1  # an event carries a digest's last 8 bytes


def _sha256_pickle(obj: Any) -> bytes:
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def _sha256_cbor(obj: Any) -> bytes:
    import cbor2

    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


_VLLM_FN: dict[str, Callable[[Any], bytes]] = {"sha256": _sha256_pickle, "sha256_cbor": _sha256_cbor}


@dataclass(frozen=True)
class Lora:
    """A LoRA adapter as vLLM keys its blocks: the request's ``lora_name`` and ``lora_path``."""

    name: str
    path: str


@dataclass(frozen=True)
class VllmHasher:
    """vLLM's prefix-cache block hash for one engine configuration (``block_size``, ``prefix_caching_hash_algo``,
    the engine's ``PYTHONHASHSEED``; ``seed=None``: the variable was unset)."""

    block_size: int
    algo: str = "sha256"
    seed: str | None = None

    def __post_init__(self) -> None:
        if self.algo not in _VLLM_FN:
            raise ValueError(f"vLLM hash algo {self.algo!r} is not reproduced here; known: {', '.join(VLLM_ALGOS)}")
        if self.block_size < 1:
            raise ValueError(f"block_size must be positive, got {self.block_size}")

    @property
    def none_hash(self) -> bytes:
        return _VLLM_FN[self.algo](VLLM_DEFAULT_SEED if self.seed is None else self.seed)

    def digests(self, tokens: Sequence[int], salt: str | None = None, lora: Lora | None = None) -> list[bytes]:
        """The full digest of every full block of ``tokens``, chained from ``NONE_HASH``."""
        B, parent = self.block_size, None
        out = []
        for i in range(len(tokens) // B):
            keys: list[tuple] = [("lora", lora.name, lora.path)] if lora else []
            if salt and i == 0:
                keys.append(("cache_salt", salt))
            parent = self.block_digest(parent, tokens[i * B:(i + 1) * B], tuple(keys) or None)
            out.append(parent)
        return out

    def block_digest(self, parent: bytes | None, tokens: Sequence[int], extra: tuple | None = None) -> bytes:
        """One block's digest from its parent's (None: the first block) and its tokens."""
        return _VLLM_FN[self.algo]((parent or self.none_hash, tuple(int(t) for t in tokens), extra))

    def rekey(self, parent: bytes | None, tokens: Sequence[int]) -> tuple[bytes, int]:
        """A gateway's own key for a stored block, from its tokens alone: (chain state, key)."""
        d = self.block_digest(parent, tokens)
        return d, int.from_bytes(d, "big") & _M64

    def chain(self, tokens: Sequence[int], salt: str | None = None, lora: Lora | None = None) -> list[int]:
        """Block hashes as vLLM's events carry them (the int form: the digest's last 8 bytes)."""
        return [int.from_bytes(d, "big") & _M64 for d in self.digests(tokens, salt, lora)]

    def reusable_blocks(self, n_tokens: int) -> int:
        """How many leading blocks a request of ``n_tokens`` can hit at most: never its last token."""
        return max(n_tokens - 1, 0) // self.block_size

    @property
    def scheme(self) -> str:
        return self.algo

    def variants(self) -> tuple:
        """No other vLLM scheme is checked for: a different seed is parity's own failing case, not a change."""
        return ()
