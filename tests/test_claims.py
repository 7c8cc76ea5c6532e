"""Claims: declared once, each with the engine it is about."""

from __future__ import annotations

import pytest

from workbench import claims, probes


def test_every_blueprint_claim_is_about_tensorrt_llm():
    assert {c.subject for c in claims.CLAIMS.values()} == {"trtllm"}
    assert claims.get("risk.warmup").about.needs == "tensorrt_llm on an NVIDIA GPU"


def test_unknown_claim_lists_the_known_ones():
    with pytest.raises(KeyError, match="known: unknown.cpp_entrypoint"):
        claims.get("nope")


def test_probes_cite_claim_ids_and_hold_no_claim_text():
    texts = {c.text for c in claims.CLAIMS.values()}
    for name in probes.names():
        probe = probes.get(name)
        assert all(cid in claims.CLAIMS for cid in probe.claims)
        assert not any(isinstance(v, str) and v in texts for v in vars(type(probe)).values())
