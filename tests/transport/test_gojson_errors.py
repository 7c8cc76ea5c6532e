"""Go's ``encoding/json`` bytes for the contract's types, and the wire's error table (``transport/grpc/errors.go``)."""

from __future__ import annotations

import pytest

from workbench.transport import contract as c
from workbench.transport import errors as e
from workbench.transport import gojson
from workbench.transport.manifest import AdapterSpec


@pytest.mark.parametrize("value, want", [
    ('a"b\\c', '"a\\"b\\\\c"'),
    ("\b\f\n\r\t\x01", '"\\b\\f\\n\\r\\t\\u0001"'),  # Go 1.22+: \b and \f short forms; others \u00xx lowercase
    ("<a&b>", '"\\u003ca\\u0026b\\u003e"'),  # HTML escaping is on in json.Marshal
    ("\u2028é", '"\\u2028é"'),  # line separator escaped; other non-ASCII as UTF-8
    (1.5, "1.5"), (1e-7, "1e-7"), (1e21, "1e+21"), (100.0, "100"), (-0.0, "-0"),  # floatEncoder: %f unless tiny/huge
    (True, "true"), (None, "null"), (7, "7"),
])
def test_values_marshal_as_go_writes_them(value, want):
    assert gojson.marshal(value).decode() == want


def test_untagged_structs_use_go_field_names_and_nil_pointers_write_null():
    """session.go: PrefixStatus and DecodeConfig have no tags; Temperature *float64 and TensorSplit []float32 marshal
    null when nil; AdapterSpec's scale is a float32 (0.1 → 0.1, not 0.10000000149011612)."""
    assert gojson.marshal(c.SuffixStatus()) == (b'{"SuffixTokens":0,"PrefixTokens":0,"ResidentTokens":0,'
                                                b'"AvailableTokens":0,"ManifestDigest":""}')
    assert b'"Temperature":null' in gojson.marshal(c.DecodeConfig()) and b'"TensorSplit":null' in gojson.marshal(c.Config())
    assert gojson.marshal(AdapterSpec(digest="d", scale=0.1)) == b'{"digest":"d","scale":0.1}'
    assert gojson.marshal(c.ColdKVBlock(kv=b"\x00\xff")) == b'{"kv":"AP8="}'  # []byte is base64


def test_unmarshal_matches_keys_case_insensitively_and_refuses_wrong_types():
    """decode.go: an exact key first, else a case-insensitive one; unknown keys ignored; a null leaves the zero."""
    got = gojson.unmarshal(c.PrefixStatus, b'{"reusedtokens":3,"PrefixTokens":4,"Other":1,"ResidentTokens":null}')
    assert (got.reused_tokens, got.prefix_tokens, got.resident_tokens) == (3, 4, 0)
    with pytest.raises(gojson.GoJSONError, match="ReusedTokens"):
        gojson.unmarshal(c.PrefixStatus, b'{"ReusedTokens":"3"}')
    assert gojson.unmarshal(c.ColdKVBlock, b'{"kv":"AP8="}').kv == b"\x00\xff"


SENTINEL_TABLE = [  # errors.go ``sentinels``: token, gRPC code
    ("ErrStaleFence", "stale_fence", e.FAILED_PRECONDITION), ("ErrNotOwner", "not_owner", e.FAILED_PRECONDITION),
    ("ErrSessionClosed", "session_closed", e.FAILED_PRECONDITION),
    ("ErrContextOverflow", "context_overflow", e.RESOURCE_EXHAUSTED), ("ErrSessionFatal", "session_fatal", e.ABORTED),
    ("ErrModelBusy", "model_busy", e.FAILED_PRECONDITION), ("ErrModelNotActive", "model_not_active", e.FAILED_PRECONDITION),
    ("ErrModelSwitchRequired", "model_switch_required", e.FAILED_PRECONDITION),
    ("ErrDeviceBusy", "device_busy", e.RESOURCE_EXHAUSTED), ("ErrModelLoadFailed", "model_load_failed", e.INTERNAL),
    ("ErrInsufficientMemory", "insufficient_memory", e.RESOURCE_EXHAUSTED),
    ("ErrSlotGenerationStale", "slot_generation_stale", e.FAILED_PRECONDITION),
    ("ErrBackendMismatch", "backend_mismatch", e.FAILED_PRECONDITION),
    ("ErrUnsupportedFeature", "unsupported_feature", e.UNIMPLEMENTED),
    ("ErrManifestMismatch", "manifest_mismatch", e.FAILED_PRECONDITION),
    ("ErrModelNotFound", "model_not_found", e.NOT_FOUND), ("ErrDigestMismatch", "digest_mismatch", e.FAILED_PRECONDITION),
    ("ErrUnsupportedModelType", "unsupported_model_type", e.INVALID_ARGUMENT),
]


@pytest.mark.parametrize("name, token, code", SENTINEL_TABLE)
def test_each_contract_error_has_errors_go_token_and_code_and_round_trips(name, token, code):
    cls = getattr(e, name)
    assert (cls.token, cls.code) == (token, code)
    ws = e.encode(cls("why"))
    assert ws.code == code and ws.message.startswith(f"{token}: ")
    back = e.decode(ws.code, ws.message)
    assert isinstance(back, cls)


def test_the_contract_has_seventeen_errors_and_the_manifest_mismatch():
    assert len(e.CONTRACT_ERRORS) == 18 and e.ErrManifestMismatch in e.CONTRACT_ERRORS


def test_an_overflow_carries_its_detail_as_error_info_and_comes_back_typed():
    """errors.go ``errorInfoForOverflow``: ErrorInfo metadata stage, resident_tokens, additional_tokens, num_ctx."""
    ws = e.encode(e.ContextOverflowError("suffix", 10, 5, 12))
    assert ws.reason == "context_overflow" and dict(ws.metadata) == {
        "stage": "suffix", "resident_tokens": "10", "additional_tokens": "5", "num_ctx": "12"}
    assert ws.message == ("context_overflow: exceeded the session context window during suffix: resident_tokens=10 "
                          "additional_tokens=5 num_ctx=12")
    back = e.decode(ws.code, ws.message, dict(ws.metadata))
    assert isinstance(back, e.ContextOverflowError) and back.overflow == c.ContextOverflowDetail("suffix", 10, 5, 12)


def test_anything_else_is_internal_and_a_manifest_mismatch_keeps_its_reason():
    assert e.encode(RuntimeError("boom")) == e.WireStatus(e.INTERNAL, "internal: boom")
    back = e.decode(e.FAILED_PRECONDITION, "manifest_mismatch: contextasm: context manifest mismatch: bos policy changed")
    assert isinstance(back, e.ErrManifestMismatch) and back.reason == "bos policy changed"
    assert isinstance(e.decode(e.UNAVAILABLE, "connection refused"), e.RemoteError)
