"""Client-side block hashes: vLLM's (checked against real events in test_on_vllm.py) and TensorRT-LLM's v1
block key (written from kvCacheManager.cpp ``BlockKeyHasher::hash``; no engine here, so these tests pin its
stated properties)."""

import hashlib
import pickle

import pytest

from workbench.cells.trtllm.hashing import (TRTLLM_SALT_SCHEMES, TrtllmHasher, _mix32, _mix64, std_string_hash,
                                           trtllm_salt_id, trtllm_v1_block_key)
from workbench.cells.vllm.hashing import VllmHasher


def test_vllm_chain_hashes_full_blocks_only_and_chains_on_the_full_digest():
    h = VllmHasher(4, "sha256", "0")
    toks = list(range(10, 20))  # 2 full blocks + 2 tokens
    digests = h.digests(toks)
    assert len(digests) == 2
    none = hashlib.sha256(pickle.dumps("0", protocol=pickle.HIGHEST_PROTOCOL)).digest()
    first = hashlib.sha256(pickle.dumps((none, (10, 11, 12, 13), None), protocol=pickle.HIGHEST_PROTOCOL)).digest()
    assert digests[0] == first
    assert h.chain(toks)[0] == int.from_bytes(first[-8:], "big")  # the int form: the last 8 bytes


def test_vllm_seed_salt_and_lora_change_the_chain():
    toks = list(range(8))
    base = VllmHasher(4, "sha256", "0").chain(toks)
    assert VllmHasher(4, "sha256", "1").chain(toks) != base
    assert VllmHasher(4, "sha256", None).chain(toks) != base
    salted = VllmHasher(4, "sha256", "0").chain(toks, salt="s")
    assert salted[0] != base[0] and salted[1] != base[1]  # the salt keys block 0; block 1 chains on it
    assert VllmHasher(4, "sha256_cbor", "0").chain(toks) != base


def test_vllm_reuse_never_covers_the_last_token():
    h = VllmHasher(32)
    assert [h.reusable_blocks(n) for n in (31, 32, 33, 64, 65)] == [0, 0, 1, 1, 2]


def test_vllm_unknown_algo_is_refused():
    with pytest.raises(ValueError, match="xxhash"):
        VllmHasher(32, "xxhash")


def test_trtllm_mix32_wraps_its_add_at_32_bits():
    # v = 0 gives mix(v) = 0; 0 + 0x9e3779b9 fits; with s = 0 the result is the constant itself
    assert _mix32(0, 0) == 0x9E3779B9
    # an s whose shifts overflow 64 bits stays within 64 bits
    assert _mix32(1, (1 << 64) - 1) < 1 << 64
    assert _mix64(0, 0) == 0x9E3779B9


def test_trtllm_v1_key_depends_on_length_parent_salt_and_lora():
    toks = [5, 6, 7, 8]
    k = trtllm_v1_block_key(toks)
    assert trtllm_v1_block_key(toks[:3]) != k  # a partial block hashes differently
    assert trtllm_v1_block_key(toks, 7) != k
    assert trtllm_v1_block_key(toks, salt_id=1) != k
    assert trtllm_v1_block_key(toks, 7, salt_id=1) == trtllm_v1_block_key(toks, 7)  # salt on the root only
    assert trtllm_v1_block_key(toks, lora_task_id=3) != k
    assert trtllm_v1_block_key(toks, extra_ids=[0, 0, 0, 0]) != k  # extra ids are mixed even when 0


def test_trtllm_chain_stores_len_minus_one_tokens():
    h = TrtllmHasher(4)
    assert len(h.chain(list(range(8)))) == 1  # 7 tokens stored: one full block
    assert len(h.chain(list(range(9)))) == 2
    c = h.chain(list(range(9)))
    assert c[1] == trtllm_v1_block_key([4, 5, 6, 7], c[0])


def test_trtllm_salt_id_is_blake3_little_endian():
    import blake3

    assert trtllm_salt_id("a") == int.from_bytes(blake3.blake3(b"a").digest()[:8], "little")


@pytest.mark.parametrize("salt,value", [  # printed by std::hash<std::string> from g++ 12 (libstdc++), x86-64
    ("", 6142509188972423790),
    ("a", 4993892634952068459),
    ("abcdefgh", 8664279048047335611),  # one whole 8-byte word
    ("abcdefghi", 13036955925923793583),  # a word and a 1-byte tail
    ("parity-0", 14145662363228740128),
    ("tenant-A:123456789abcdef", 14398242338990897357),
])
def test_std_string_hash_is_libstdcxx(salt, value):
    assert std_string_hash(salt) == value


@pytest.mark.parametrize("scheme,salt_id", [
    ("1.2", trtllm_salt_id("s")),
    ("std_hash", std_string_hash("s")),
    ("unsalted", None),
])
def test_trtllm_salt_schemes_differ_only_in_the_first_blocks_salt_value(scheme, salt_id):
    s = next(x for x in TRTLLM_SALT_SCHEMES if x.name == scheme)
    toks = list(range(9))
    first = trtllm_v1_block_key(toks[:4], salt_id=salt_id)
    assert TrtllmHasher(4, s).chain(toks, salt="s") == [first, trtllm_v1_block_key(toks[4:8], first)]
    assert TrtllmHasher(4, s).chain(toks) == TrtllmHasher(4).chain(toks)  # an unsalted request: one scheme
    assert s in {v for v, _ in TrtllmHasher(4).variants()} or s == TrtllmHasher(4).salt_scheme
