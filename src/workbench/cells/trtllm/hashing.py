"""TensorRT-LLM's block keys recomputed from token ids, as its events report them (hash parity).

Written from the engine's documented behaviour, not copied:

- **TensorRT-LLM 1.2, v1 block key** (``cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp``,
  ``BlockKeyHasher::hash``): 64-bit arithmetic; ``seed = n ^ (parent · 0xbf58476d1ce4e5b9)`` with ``n`` the
  block's token count; on the first block a salt id is mixed in with ``mix64``; each token id goes through
  ``mix32`` (and its extra id through ``mix64`` when extra ids are used); a LoRA task id through ``mix64``;
  each multimodal key as eight little-endian 32-bit words through ``mix32`` and its offset through ``mix64``.
  The root's parent hash is 0. The salt id is the first 8 bytes of BLAKE3 of the UTF-8 salt, little-endian
  (``tensorrt_llm/inputs/utils.py``, ``get_cache_salt_id``). Only ``len − 1`` prompt tokens are stored in
  blocks of ``tokens_per_block`` (context blocks are full; the last token never enters a key).
- **TensorRT-LLM after 1.2** (``cpp/tensorrt_llm/batch_manager/blockKey.cpp``, ``BlockKeyHasher::hash``): the
  same key, but the request carries the salt string and the first block mixes ``std::hash<std::string>`` of it
  (libstdc++'s ``_Hash_bytes``: 64-bit MurmurHash2 with seed ``0xc70f6907``) instead of the BLAKE3 salt id.
  :data:`TRTLLM_SALT_SCHEMES` lists the salt schemes known, so hash parity can name a release that changed it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

_M64 = (1 << 64) - 1
_M32 = (1 << 32) - 1


def _mix32(v: int, s: int) -> int:
    v &= _M32
    v = (((v >> 16) ^ v) * 0x45D9F3B) & _M32
    v = (((v >> 16) ^ v) * 0x45D9F3B) & _M32
    v = (v >> 16) ^ v
    return (s ^ ((((v + 0x9E3779B9) & _M32) + (s << 6) + (s >> 2)) & _M64)) & _M64


def _mix64(v: int, s: int) -> int:
    v &= _M64
    v = ((v ^ (v >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    v = ((v ^ (v >> 27)) * 0x94D049BB133111EB) & _M64
    v ^= v >> 31
    return (s ^ ((v + 0x9E3779B9 + (s << 6) + (s >> 2)) & _M64)) & _M64


def trtllm_salt_id(salt: str) -> int:
    """TensorRT-LLM 1.2's ``cache_salt`` id: BLAKE3 of the UTF-8 salt, first 8 bytes little-endian."""
    import blake3

    return int.from_bytes(blake3.blake3(salt.encode("utf-8")).digest(length=8), "little")


def std_string_hash(salt: str) -> int:
    """libstdc++'s ``std::hash<std::string>`` on a 64-bit ``size_t`` (``_Hash_bytes(data, len, 0xc70f6907)``,
    ``libstdc++-v3/libsupc++/hash_bytes.cc``): what post-1.2 ``blockKey.cpp`` mixes for a salt."""
    mul = 0xC6A4A7935BD1E995
    data = salt.encode("utf-8")
    tail = len(data) & ~7
    h = (0xC70F6907 ^ (len(data) * mul)) & _M64
    for i in range(0, tail, 8):
        k = (int.from_bytes(data[i:i + 8], "little") * mul) & _M64
        h = ((h ^ (((k ^ (k >> 47)) * mul) & _M64)) * mul) & _M64
    if len(data) & 7:
        h = ((h ^ int.from_bytes(data[tail:], "little")) * mul) & _M64
    h = ((h ^ (h >> 47)) * mul) & _M64
    return h ^ (h >> 47)


@dataclass(frozen=True)
class SaltScheme:
    """How a TensorRT-LLM release turns a request's cache salt into the 64-bit value its first block key mixes
    (``salt_id``; None: the salt never enters the key), and how that differs from 1.2's, in the verdict's words."""

    name: str
    salt_id: Callable[[str], int] | None
    difference: str
    source: str


TRTLLM_SALT_SCHEMES: tuple[SaltScheme, ...] = (
    SaltScheme("1.2", trtllm_salt_id, "", "tensorrt_llm/inputs/utils.py get_cache_salt_id (BLAKE3)"),
    SaltScheme("std_hash", std_string_hash, "the first block mixes std::hash<std::string> of the salt, not "
               "1.2's BLAKE3 salt id", "cpp/tensorrt_llm/batch_manager/blockKey.cpp after 1.2 (cacheSalt)"),
    SaltScheme("unsalted", None, "the salt does not enter the block key (salted requests share blocks)",
               "no release known: what an engine ignoring the salt would store"),
)
"""The first row is the scheme the workbench declares for 1.2; the others are variants parity checks for."""


def trtllm_v1_block_key(tokens: Sequence[int], parent: int = 0, *, lora_task_id: int | None = None,
                        salt_id: int | None = None, extra_ids: Sequence[int] | None = None,
                        mm_keys: Sequence[tuple[bytes, int]] = ()) -> int:
    """One block's v1 key (``BlockKeyHasher::hash``) from its token ids and its parent block's hash."""
    s = (len(tokens) ^ ((parent * 0xBF58476D1CE4E5B9) & _M64)) & _M64
    if parent == 0 and salt_id is not None:
        s = _mix64(salt_id, s)
    for i, t in enumerate(tokens):
        s = _mix32(int(t), s)
        if extra_ids is not None:
            s = _mix64(int(extra_ids[i]), s)
    if lora_task_id is not None:
        s = _mix64(lora_task_id, s)
    for digest, offset in mm_keys:
        for w in range(8):
            s = _mix32(int.from_bytes(digest[4 * w:4 * w + 4], "little"), s)
        s = _mix64(offset, s)
    return s


@dataclass(frozen=True)
class TrtllmHasher:
    """TensorRT-LLM's v1 block keys for a request, as ``stored`` events report them for its context blocks."""

    block_size: int  # tokens_per_block
    salt_scheme: SaltScheme = TRTLLM_SALT_SCHEMES[0]

    @property
    def scheme(self) -> str:
        return self.salt_scheme.name

    def chain(self, tokens: Sequence[int], salt: str | None = None, lora: int | None = None) -> list[int]:
        """Keys of the full blocks of ``tokens[:-1]`` (the last token never enters a key)."""
        B, parent, out = self.block_size, 0, []
        to_id = self.salt_scheme.salt_id
        salt_id = to_id(salt) if salt and to_id else None
        for i in range((max(len(tokens) - 1, 0)) // B):
            parent = trtllm_v1_block_key(tokens[i * B:(i + 1) * B], parent, lora_task_id=lora, salt_id=salt_id)
            out.append(parent)
        return out

    def reusable_blocks(self, n_tokens: int) -> int:
        return max(n_tokens - 1, 0) // self.block_size

    def rekey(self, parent: int | None, tokens: Sequence[int]) -> tuple[int, int]:
        key = trtllm_v1_block_key(tokens, parent or 0)
        return key, key

    def variants(self) -> tuple[tuple[SaltScheme, TrtllmHasher], ...]:
        """This hasher under each other known salt scheme (:data:`TRTLLM_SALT_SCHEMES`)."""
        return tuple((s, TrtllmHasher(self.block_size, s)) for s in TRTLLM_SALT_SCHEMES if s != self.salt_scheme)
