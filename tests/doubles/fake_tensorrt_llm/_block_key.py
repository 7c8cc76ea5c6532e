"""``BlockKeyHasher::hash`` (``cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp``, 1.2 line) and the cache salt's id
(``tensorrt_llm/inputs/utils.py``, ``get_cache_salt_id``): the V1 block key a 1.2 engine's events carry, so a
client that recomputes hashes meets the double as it would meet the engine.

Read from the C++: a 64-bit seed ``numTokens ^ (parentHash * 0xbf58476d1ce4e5b9)``; the salt id folded in with the
64-bit mixer on the first block only (parent 0); every token id through the 32-bit mixer; a LoRA task id, when set,
through the 64-bit mixer. The salt id is the first 8 bytes of the BLAKE3 digest of the salt's UTF-8, little-endian.
"""

U64, U32 = (1 << 64) - 1, (1 << 32) - 1
GOLDEN = 0x9E3779B9


def _fold(seed: int, h: int, width: int = U64) -> int:
    """``seed ^= h + 0x9e3779b9 + (seed << 6) + (seed >> 2)``, ``h + 0x9e3779b9`` taken in ``h``'s own width."""
    return seed ^ ((((h + GOLDEN) & width) + (seed << 6) + (seed >> 2)) & U64)


def _mix32(x: int) -> int:
    x &= U32
    for _ in range(2):
        x = (((x >> 16) ^ x) * 0x45D9F3B) & U32
    return (x >> 16) ^ x


def _mix64(x: int) -> int:
    x &= U64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & U64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & U64
    return x ^ (x >> 31)


def salt_id(salt: str) -> int:
    import blake3

    return int.from_bytes(blake3.blake3(salt.encode("utf-8")).digest(length=8), "little")


def block_key(tokens, parent: int, salt, lora_id) -> int:
    """One block's key; ``parent`` is the previous block's key, 0 for the root."""
    seed = len(tokens) ^ ((parent * 0xBF58476D1CE4E5B9) & U64)
    if parent == 0 and salt:
        seed = _fold(seed, _mix64(salt_id(salt)))
    for t in tokens:
        seed = _fold(seed, _mix32(int(t)), U32)
    if lora_id is not None:
        seed = _fold(seed, _mix64(int(lora_id)))
    return seed & U64
