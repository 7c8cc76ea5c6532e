"""Every probe on the served engines (llama-server and ``vllm serve`` on loopback), with small parameters.

Each probe runs for real over HTTP: its finding records the transport, the endpoint and the server's own
version, and each gives a verdict read from the server (``timings.cache_n``, vLLM's
``usage.prompt_tokens_details.cached_tokens`` and KV events) or says why it cannot (``not-run`` with the reason).
One probe per server is driven to a non-happy verdict through the server's own API: llama-server's slot erase
(``POST /slots/{id}?action=erase``) and vLLM's ``--no-enable-prefix-caching``.
"""

from __future__ import annotations

import pytest

from conftest import TINY, require_engine
from workbench import cells, models, probes
from workbench.cells import served

pytestmark = pytest.mark.slow

VLLM_MODEL = "synthetic:cpu"


def run(name: str, engine: str, tmp_path, cell_options=None, **params):
    """In this process, so a fault patched onto the served cell reaches the server."""
    require_engine(engine)
    static = not probes.get(name).needs_engine
    model = models.DEFAULT_MODEL if static else (TINY if engine == "llamacpp-server" else VLLM_MODEL)
    return probes.run(name, engine=engine, model=model, params=params, out=tmp_path, isolated=False,
                      cell_options=cell_options)


def served_by(f, engine: str) -> None:
    """The finding says the probe went over HTTP to a server this run started, and which build answered."""
    extra = f.environment["cell"]["extra"]
    assert extra["transport"] == "http" and extra["endpoint"].startswith("http://127.0.0.1:")
    assert extra["server_version"].split()[0] == {"llamacpp-server": "llama-server", "vllm-server": "vllm"}[engine]


# --------------------------------------------------------------------------- llama-server


def test_llama_server_reuse_is_read_from_the_servers_timings(tmp_path):
    f = run("reuse.per_request_metrics", "llamacpp-server", tmp_path, repeats=1)
    served_by(f, "llamacpp-server")
    rows = {r["case"]: r for r in f.evidence["rows"]}
    assert "cache_n" in rows["exact repeat"]["engine_counters"]
    assert rows["other salt"]["reported_reused"] == 0  # a new key: the cell sent cache_prompt false
    assert f.verdict in ("confirmed", "partial")  # per token, but the server always evaluates the last token again


def test_llama_server_warmup_is_whole_prefix(tmp_path):
    f = run("prefix.warmup_materialization", "llamacpp-server", tmp_path, blocks="2", pressure="0")
    served_by(f, "llamacpp-server")
    assert f.verdict == "refuted"  # the risk did not occur: every follow-up reused its whole warmed prefix
    assert all(r["from_engine"] and r["followup_reused"] == r["prefix_tokens"] for r in f.evidence["rows"])


def test_llama_server_warmup_erased_by_the_server_is_seen(tmp_path, monkeypatch):
    """Fault through the server's own API: each warm-up's slot erased right after it (``POST /slots/{id}?action=erase``,
    which llama-server accepts when started with ``--slot-save-path``), so the follow-up finds nothing."""
    warm = served.LlamaServerCell._warm

    def warm_then_erase(self, tokens, key, retention, *, slot=0):
        out = warm(self, tokens, key, retention, slot=slot)
        self._post(f"/slots/{slot}?action=erase", {})
        return out

    monkeypatch.setattr(served.LlamaServerCell, "_warm", warm_then_erase)
    f = run("prefix.warmup_materialization", "llamacpp-server", tmp_path,
            cell_options={"server_args": ["--slot-save-path", str(tmp_path)]}, blocks="2", pressure="0")
    assert f.verdict == "confirmed", f.summary
    assert all(r["from_engine"] and r["followup_reused"] == 0 for r in f.evidence["rows"])


def test_llama_server_isolation_rests_on_the_servers_counts(tmp_path):
    f = run("isolation.cache_salt", "llamacpp-server", tmp_path, trials=8, prompt_tokens=96)
    served_by(f, "llamacpp-server")
    assert f.metrics["cross_manifest_reused_tokens"]["value"] == 0
    assert f.metrics["reused_tokens"]["source"] == "engine" and f.metrics["reused_tokens"]["value"] > 0
    assert f.verdict in ("confirmed", "inconclusive", "not-applicable")


@pytest.mark.parametrize("name, why", [
    ("capacity.budget_policy", "neither a capacity measurement nor KV events"),
    ("connector.export_granularity", "neither per-sequence state export nor a KV connector"),
])
def test_llama_server_lacks_what_some_probes_read_and_says_so(tmp_path, name, why):
    f = run(name, "llamacpp-server", tmp_path)
    assert f.verdict == "not-run" and why in f.reason


def test_llama_server_retention_is_a_verdict_with_its_reason(tmp_path):
    f = run("retention.pinning_under_pressure", "llamacpp-server", tmp_path)
    assert f.verdict in ("not-applicable", "inconclusive") and "never evicts" in f.summary


@pytest.mark.parametrize("engine", ["llamacpp-server", "vllm-server"])
def test_static_surveys_read_the_package_the_server_runs(tmp_path, engine):
    for name in ("surface.contract_mapping", "surface.cpp_entrypoint"):
        f = run(name, engine, tmp_path)
        inproc = run(name, cells.runs(engine), tmp_path)  # the same package, read for the in-process engine
        assert (f.verdict, f.metrics) == (inproc.verdict, inproc.metrics) and f.verdict != "not-run"


# --------------------------------------------------------------------------- vllm serve


@pytest.mark.vllm
def test_vllm_server_warmup_materializes_whole_blocks_read_from_cached_tokens(tmp_path):
    f = run("prefix.warmup_materialization", "vllm-server", tmp_path, blocks="2", pressure="0")
    served_by(f, "vllm-server")
    by_len = {r["prefix_tokens"]: r["followup_reused"] for r in f.evidence["rows"]}
    assert by_len == {63: 32, 64: 64, 65: 64} and f.verdict == "refuted"  # ⌊n/B⌋ blocks of 32


@pytest.mark.vllm
def test_vllm_server_without_prefix_caching_is_seen_by_the_warmup_probe(tmp_path):
    """Fault through the server's own command line: prefix caching off, so no warm-up leaves anything to reuse."""
    f = run("prefix.warmup_materialization", "vllm-server", tmp_path,
            cell_options={"server_args": ["--no-enable-prefix-caching"]}, blocks="2", pressure="0")
    assert f.verdict == "confirmed", f.summary
    assert all(r["from_engine"] and r["followup_reused"] == 0 for r in f.evidence["rows"])


@pytest.mark.vllm
def test_vllm_server_isolation_is_the_servers_cache_salt(tmp_path):
    f = run("isolation.cache_salt", "vllm-server", tmp_path, trials=8, prompt_tokens=128)
    served_by(f, "vllm-server")
    assert f.metrics["cross_manifest_reused_tokens"] == {"value": 0, "unit": "tokens", "source": "engine"}
    assert f.metrics["reused_tokens"]["value"] == 96  # cached_tokens under the same salt: 3 whole blocks of 32
    arm = next(r for r in f.evidence["rows"] if r.get("arm") == "adapter requests")
    assert arm["refused"] is None and "not mapped onto served engines" in arm["error"]  # the cell's, not the engine's
