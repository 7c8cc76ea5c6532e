"""gateway.routing with no room to differ, on the real ``vllm serve`` pools the probe starts (issue 48): one endpoint,
and a pool whose servers run with prefix caching off, each give a finding that settles nothing, never a refutation
(before: ``endpoints=1`` refuted ``shapes.kv_routing`` at +0.0 %, and caching off raised instead of writing one)."""

from __future__ import annotations

import pytest

from conftest import require_engine
from workbench import probes, settle

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
SMALL = {"sessions": 2, "turns": 2, "repeats": 1, "concurrency": 2}


def routed(tmp_path, engine="vllm", **given):
    require_engine("vllm-server")
    options = given.pop("cell_options", None)
    f = probes.run("gateway.routing", engine=engine, model="synthetic:cpu", params=SMALL | given, out=tmp_path,
                   cell_options=options, isolated=False)
    (v,) = settle.read([tmp_path]).verified
    return f, v


def test_one_endpoint_has_no_room_to_differ(tmp_path):
    f, v = routed(tmp_path, endpoints=1)
    assert f.verdict == "inconclusive" and f.summary.startswith("No room to differ: with one endpoint"), f.summary
    assert {r["endpoint"] for r in f.evidence["rows"] if r.get("kind") == "request"} == {"ep0"}
    assert not v.settles("shapes.kv_routing") and v.reasons["shapes.kv_routing"] == ()  # measured: bound, re-derived


def test_a_pool_with_caching_off_writes_a_finding_that_settles_nothing(tmp_path):
    """One endpoint is enough (one vLLM start, not two): admission's warm-up prompt comes before any routing and the
    one-endpoint rung, and a server with caching off stores no block for it, so the finding says caching, not the
    endpoint count. ``server_args`` is the served engine's option (the in-process ``vllm`` takes none: refused
    before anything ran), so this pool is asked for by ``vllm-server``, the engine it runs."""
    f, v = routed(tmp_path, "vllm-server", endpoints=1, cell_options={"server_args": ["--no-enable-prefix-caching"]})
    assert f.verdict in ("inconclusive", "not-run"), f.summary
    assert "caching" in f.summary or "caching" in (f.reason or ""), f.summary
    assert "one endpoint" not in f.summary, f.summary
    assert not v.settles("shapes.kv_routing")
