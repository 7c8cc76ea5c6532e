"""Every probe on the served engines (llama-server and ``vllm serve`` on loopback), with small parameters.

Each probe runs for real over HTTP: its finding records the transport, the endpoint and the server's own
version, and each gives a verdict read from the server (``timings.cache_n``, vLLM's
``usage.prompt_tokens_details.cached_tokens`` and KV events) or says why it cannot (``not-run`` with the reason).
One probe per server is driven to a non-happy verdict through the server's own API: llama-server's slot erase
(``POST /slots/{id}?action=erase``) and ``-np``, and vLLM's prefix-cache reset (``POST /reset_prefix_cache``).

A ``vllm serve`` start costs 20-45 s here, so the vLLM warm-up and isolation probes (and the warm-up's fault) attach
(``endpoint=``, the cell's own attach path) to the one server tests/cells/test_served_vllm.py starts for its module,
and live there; the capacity probe, whose budgets are the servers' own launch options, starts its servers itself.
"""

from __future__ import annotations

import pytest

from conftest import TINY, require_engine
from workbench import cells, models, probes
from workbench.cells.llamacpp import served

pytestmark = pytest.mark.slow

VLLM_MODEL = "synthetic:cpu"


def run(name: str, engine: str, tmp_path, cell_options=None, **params):
    """In this process, so a fault patched onto the served cell reaches the server."""
    require_engine(engine)
    static = not probes.get(name).needs_engine
    model = models.DEFAULT_MODEL if static else (TINY if engine == "llamacpp-server" else VLLM_MODEL)
    return probes.run(name, engine=engine, model=model, params=params, out=tmp_path, isolated=False,
                      cell_options=cell_options)


def served_by(f, engine: str, at: str | None = None) -> None:
    """The finding says the probe went over HTTP to a server this run started (or, ``at`` given, to the server at
    that URL, attached), and which build answered."""
    extra = f.environment["cell"]["extra"]
    assert extra["transport"] == "http" and extra["endpoint"].startswith("http://127.0.0.1:")
    assert extra["server"] == ("started by the cell" if at is None else "attached (started elsewhere)")
    assert at is None or extra["endpoint"] == at
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
    assert f.verdict == "inconclusive" and "the cell's doing" in f.summary  # its 0 across keys: cache_prompt false


def test_llama_server_lacks_what_the_connector_probe_reads_and_says_so(tmp_path):
    f = run("connector.export_granularity", "llamacpp-server", tmp_path)
    assert f.verdict == "not-run" and "neither per-sequence state export nor a KV connector" in f.reason


def test_llama_server_capacity_is_filled_until_the_server_refuses_and_graded_in_its_saved_slot_bytes(tmp_path):
    """The real server, non-happy: llama.cpp pads -c to 256 cells, so 300 tokens' worth of bytes gets a slot that
    takes 511 prompt tokens (the server refuses n_ctx and more), +70 %; the bytes per token are the K/V rows of the
    slot file the server saved."""
    f = run("capacity.budget_policy", "llamacpp-server", tmp_path)
    served_by(f, "llamacpp-server")
    rows = {r["budget_tokens"]: r for r in f.evidence["rows"]}
    assert rows[256]["measured_capacity_tokens"] == 255 and rows[256]["reported_capacity_tokens"] == 256
    assert rows[300]["measured_capacity_tokens"] == 511 and rows[300]["reported_capacity_tokens"] == 512
    assert rows[300]["engine_kv_bytes"] == 511 * rows[300]["engine_kv_bytes_per_token"]
    assert "state file llama-server wrote" in rows[300]["engine_kv_bytes_how"] and "refused" in rows[300]["measured_by"]
    assert f.verdict == "confirmed" and f.claim_verdicts == {"contract.describe": "refuted"}
    assert f.metrics["measured_capacity_tokens"]["source"] == f.metrics["engine_kv_bytes"]["source"] == "engine"


def test_llama_server_capacity_follows_the_servers_own_slot_split(tmp_path):
    """Fault through the server's command line: ``-np 2`` after the cell's own (the last one counts), so each slot
    gets half of -c; the measured slot is half the budget, read from the server's refusal, and /props agrees."""
    f = run("capacity.budget_policy", "llamacpp-server", tmp_path, cell_options={"server_args": ["-np", "2"]})
    rows = {r["budget_tokens"]: r for r in f.evidence["rows"]}
    assert rows[1536]["measured_capacity_tokens"] == 767 and rows[1536]["reported_capacity_tokens"] == 2 * 768
    assert f.verdict == "confirmed" and f.metric("capacity_error") < -0.45


def test_llama_server_kv_bytes_of_an_attached_server_are_not_read_and_it_says_why(tmp_path):
    from workbench.probes.capacity import _memory

    require_engine("llamacpp-server")
    with cells.open_cell("llamacpp-server", TINY) as owner, \
            cells.open_cell("llamacpp-server", TINY, endpoint=owner.url) as attached:
        memory, why = _memory(attached, attached.describe())
        assert memory is None and "--slot-save-path" in why
        assert attached.measure_capacity() == owner.describe().context_tokens - 1  # the refusal reads over HTTP


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
def test_vllm_server_capacity_is_filled_until_it_evicts_but_its_kv_bytes_are_not_over_http(tmp_path, monkeypatch):
    """The pool measured from the server's own KV events (stored blocks before the first removed one), graded
    nowhere: vllm serve states no KV bytes over HTTP, so the verdict is inconclusive and says what it could not read.
    One of the probe's five budgets (a server of its own, after the one the probe opens to read the KV bytes: two
    fresh vLLM starts here): the non-aligned ones are graded on the in-process engine (tests/probes/test_on_vllm.py)."""
    from workbench.probes import capacity

    monkeypatch.setattr(capacity, "BUDGETS", capacity.BUDGETS[:1])
    f = run("capacity.budget_policy", "vllm-server", tmp_path)
    assert [r["budget_tokens"] for r in f.evidence["rows"]] == [256]
    served_by(f, "vllm-server")
    (row,) = f.evidence["rows"]
    assert row["measured_capacity_tokens"] == row["reported_capacity_tokens"] == 256 - 32  # the null block
    assert row["engine_kv_bytes"] is None
    assert f.verdict == "inconclusive" and any("never a block's bytes" in n for n in f.evidence["notes"])
