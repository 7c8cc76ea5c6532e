"""``ContextManifest`` as ``runtime/contextasm/manifest.go`` (contenox/runtime 7d0a257f) defines it.

The vectors below were worked out by reading the Go code, not by running this module: the JSON is what
``json.Marshal`` writes for the struct at manifest.go lines 55-96 (fields in declaration order, each under its tag,
``omitempty`` fields absent when zero, ``segments`` absent when nil), and ``Digest()`` is the sha256 hex of those bytes
(lines 445-457, ``HashBytes`` at 462). The hex digests were computed from the literal JSON strings, so a change in
field order, a tag, ``omitempty`` or Go's escaping breaks them.
"""

from __future__ import annotations

import hashlib

import pytest

from workbench.transport import gojson
from workbench.transport.manifest import (AdapterSpec, ContextManifest, ManifestIdentity, ManifestMismatchError,
                                          ManifestSegment, Variant, build_split_manifest, cache_salt, chat_turn,
                                          hash_token_ids, runtime_digest, stable_messages, volatile_messages)

# manifest.go 79-96: profile_id omitempty, backend, backend_version omitempty, model_digest omitempty, prompt_format,
# prompt_template_digest, runtime_digest, add_bos, stable_bytes, total_bytes, stable_byte_hash, the two token hashes
# omitempty, segments omitempty.
MINIMAL = ContextManifest(backend="llamacpp", prompt_format="chatml", prompt_template_digest="t", runtime_digest="r",
                          add_bos=True, stable_bytes=5, total_bytes=9, stable_byte_hash="h")
MINIMAL_JSON = ('{"backend":"llamacpp","prompt_format":"chatml","prompt_template_digest":"t","runtime_digest":"r",'
                '"add_bos":true,"stable_bytes":5,"total_bytes":9,"stable_byte_hash":"h"}')
MINIMAL_DIGEST = "ade390e9bade8f1b9a1d88753822d54adf8d1ff573ae6cef460099cb84606063"

# Every field set, one segment with every field (manifest.go 55-77: kind, stable, cache_class omitempty, invalidation
# omitempty, byte_start, byte_end, byte_hash, token_start/end/hash omitempty, tool_calls_json, tool_call_id omitempty),
# and a string Go escapes: <, > and & as \u003c \u003e \u0026 (encoding/json's HTML escaping, on by default).
FULL = ContextManifest(profile_id="p", backend="b", backend_version="v", model_digest="m", prompt_format="f",
                       prompt_template_digest="t", runtime_digest="r", add_bos=False, stable_bytes=3, total_bytes=4,
                       stable_byte_hash="s", stable_token_hash="st", volatile_token_hash="vt",
                       segments=[ManifestSegment(kind="system", stable=True, cache_class="task_pinned",
                                                 invalidation="on_edit", byte_start=0, byte_end=3, byte_hash="x",
                                                 token_start=1, token_end=2, token_hash="y",
                                                 tool_calls_json='[{"a":"<&>"}]', tool_call_id="c")])
FULL_JSON = ('{"profile_id":"p","backend":"b","backend_version":"v","model_digest":"m","prompt_format":"f",'
             '"prompt_template_digest":"t","runtime_digest":"r","add_bos":false,"stable_bytes":3,"total_bytes":4,'
             '"stable_byte_hash":"s","stable_token_hash":"st","volatile_token_hash":"vt","segments":[{"kind":"system",'
             '"stable":true,"cache_class":"task_pinned","invalidation":"on_edit","byte_start":0,"byte_end":3,'
             '"byte_hash":"x","token_start":1,"token_end":2,"token_hash":"y","tool_calls_json":'
             '"[{\\"a\\":\\"\\u003c\\u0026\\u003e\\"}]","tool_call_id":"c"}]}')


@pytest.mark.parametrize("manifest, want_json", [(MINIMAL, MINIMAL_JSON), (FULL, FULL_JSON)], ids=["minimal", "full"])
def test_the_manifest_marshals_to_gos_bytes_and_digests_them(manifest, want_json):
    assert gojson.marshal(manifest) == want_json.encode()
    assert manifest.digest() == hashlib.sha256(want_json.encode()).hexdigest()


def test_the_minimal_vector_s_digest_is_pinned():
    assert MINIMAL.digest() == MINIMAL_DIGEST


def test_a_zero_manifest_digests_to_the_empty_string():
    """manifest.go ``digest``: ``if m.isZero() { return "" }`` (isZero, lines 189-197, ignores the byte counts)."""
    assert ContextManifest().digest() == "" and ContextManifest(stable_bytes=9).digest() == ""


def test_token_ids_hash_as_little_endian_uint64():
    """manifest.go 469-478 ``HashTokenIDs``: each id as 8 little-endian bytes of uint64(tok)."""
    want = hashlib.sha256((1).to_bytes(8, "little") + (258).to_bytes(8, "little")
                          + (2**64 - 1).to_bytes(8, "little")).hexdigest()
    assert hash_token_ids([1, 258, -1]) == want
    assert hash_token_ids([]) == hashlib.sha256(b"").hexdigest()


BASE = dict(profile_id="p", backend="b", backend_version="v", model_digest="m", prompt_format="f",
            prompt_template_digest="t", runtime_digest="r", add_bos=True, stable_byte_hash="s1")


@pytest.mark.parametrize("change, ok, reason", [
    ({}, True, ""),
    ({"stable_byte_hash": "s2"}, True, ""),  # "deliberately excludes" the stable hash (lines 242-246)
    ({"segments": [ManifestSegment(kind="user")]}, True, ""),
    ({"profile_id": "q"}, False, "profile_id changed"),
    ({"backend": "c"}, False, "backend changed"),
    ({"backend_version": "w"}, False, "backend_version changed"),
    ({"model_digest": "n"}, False, "model_digest changed"),
    ({"prompt_format": "g"}, False, "prompt_format changed"),
    ({"prompt_template_digest": "u"}, False, "prompt_template_digest changed"),
    ({"runtime_digest": "z"}, False, "runtime_digest changed"),
    ({"add_bos": False}, False, "bos policy changed"),
])
def test_compatible_runtime_compares_identity_and_bos_only(change, ok, reason):
    """manifest.go 204-240 ``compatibleRuntime``: seven identity strings in order, then the BOS policy."""
    a, b = ContextManifest(**BASE), ContextManifest(**(BASE | change))
    assert a.compatible_runtime(b) == (ok, reason)


def test_a_zero_manifest_is_compatible_with_anything():
    assert ContextManifest().compatible_runtime(ContextManifest(**BASE)) == (True, "")


def test_runtime_digest_keeps_adapters_in_order_with_scale():
    """runtime/modelrepo/llama/manifest.go 22-60 ``runtimeDigest``: the identity struct marshalled, num_batch 512 by
    ``normalizeConfig``, adapters as {digest, scale} in list order."""
    want = ('{"num_ctx":4096,"num_batch":512,"num_threads":0,"num_gpu_layers":0,"flash_attention":false,'
            '"adapters":[{"digest":"a","scale":1},{"digest":"b","scale":0.5}]}')
    a, b = AdapterSpec(digest="a", scale=1.0), AdapterSpec(digest="b", scale=0.5)
    assert runtime_digest(4096, adapters=[a, b]) == hashlib.sha256(want.encode()).hexdigest()
    assert runtime_digest(4096, adapters=[b, a]) != runtime_digest(4096, adapters=[a, b])


def test_cache_salt_folds_adapters_in_order_with_scale_and_only_the_runtime_identity():
    """The mapping row's ``cache_salt`` = manifest digest ⊕ adapter digests: order and scale are identity (session.go
    AdapterSpec: "digest + scale, in order"); the stable text is not (CompatibleRuntime excludes it)."""
    m = ContextManifest(**BASE)
    a, b = AdapterSpec(digest="a", scale=1.0), AdapterSpec(digest="b", scale=1.0)
    salts = {cache_salt(m), cache_salt(m, [a]), cache_salt(m, [a, b]), cache_salt(m, [b, a]),
             cache_salt(m, [AdapterSpec(digest="a", scale=0.5)])}
    assert len(salts) == 5
    assert cache_salt(m, [a]) == cache_salt(ContextManifest(**(BASE | {"stable_byte_hash": "other"})), [a])
    assert cache_salt(m) != cache_salt(ContextManifest(**(BASE | {"runtime_digest": "z"})))
    identity = ContextManifest(**{k: v for k, v in BASE.items() if k != "stable_byte_hash"}).digest()
    want = ('{"manifest_digest":"' + identity + '","adapters":[{"digest":"a","scale":1}]}')
    assert cache_salt(m, [a]) == hashlib.sha256(want.encode()).hexdigest()


def test_a_variant_keys_on_its_adapters_in_order():
    a, b = AdapterSpec(digest="a", scale=1.0), AdapterSpec(digest="b", scale=1.0)
    assert Variant("m", (a, b)).digest != Variant("m", (b, a)).digest != Variant("m").digest
    assert Variant("m").cache_key("derived") == "derived" and Variant("m").cache_key() == Variant("m").digest


def test_split_manifest_fills_hashes_and_classes_and_refuses_gaps():
    """manifest.go 98-187 ``BuildSplitManifest``/``normalizeSplitSegments``."""
    segs = [ManifestSegment(kind="system", stable=True, byte_start=0, byte_end=3),
            ManifestSegment(kind="user", stable=False, byte_start=3, byte_end=5)]
    m = build_split_manifest("abc", "de", segs, ManifestIdentity(backend="x"))
    assert (m.stable_bytes, m.total_bytes) == (3, 5)
    assert [s.cache_class for s in m.segments] == ["task_pinned", "volatile"]
    assert m.segments[0].byte_hash == hashlib.sha256(b"abc").hexdigest()
    with pytest.raises(ManifestMismatchError, match="stable segments do not cover stable text"):
        build_split_manifest("abc", "de", [segs[0].__class__(kind="system", stable=True, byte_start=0, byte_end=2),
                                           segs[1]], ManifestIdentity())
    with pytest.raises(ManifestMismatchError, match="stable segment appears after volatile segment"):
        build_split_manifest("abc", "de", [segs[1], segs[0]], ManifestIdentity())


def test_messages_are_rebuilt_from_segments_as_modelds_llama_cell_does():
    """llama.go 929-972: stable segments by byte range of the stable text, volatile relative to stable_bytes, a kind
    that is no chat role skipped (sessionkit.ChatRole)."""
    stable, volatile, m = chat_turn([("system", "sys é"), ("user", "hi"), ("assistant", "yo")], 1,
                                    ManifestIdentity(backend="x"))
    m.segments.insert(1, ManifestSegment(kind="bos", stable=True, byte_start=0, byte_end=0))
    assert [(x.role, x.content) for x in stable_messages(stable, m)] == [("system", "sys é")]
    assert [(x.role, x.content) for x in volatile_messages(volatile, m)] == [("user", "hi"), ("assistant", "yo")]
