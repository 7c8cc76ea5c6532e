"""The event-plane probes on served engines: ``vllm serve`` admission with and without its ``/server_info``
(vLLM's dev router, ``VLLM_SERVER_DEV_MODE=1``), and llama-server, which has no event stream."""

from __future__ import annotations

import pytest

from conftest import require_engine
from workbench import probes

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def test_vllm_serve_without_server_info_is_admitted_blind(tmp_path, monkeypatch):
    require_engine("vllm-server")
    monkeypatch.delenv("VLLM_SERVER_DEV_MODE", raising=False)
    f = probes.run("events.admission", engine="vllm-server", model="synthetic:cpu", out=tmp_path, isolated=False)
    assert f.verdict == "refuted", f.summary
    assert {r["decision"] for r in f.evidence["rows"]} == {"admitted (legacy: nothing reported)"}
    assert f.evidence["rows"][0]["status"] == 404 and f.evidence["rows"][0]["engine_block"] == 32


def test_vllm_serve_server_info_names_the_block_size_so_a_wrong_rule_is_refused(tmp_path, monkeypatch):
    require_engine("vllm-server")
    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "1")  # the server inherits it
    f = probes.run("events.admission", engine="vllm-server", model="synthetic:cpu", out=tmp_path, isolated=False)
    assert f.verdict == "confirmed", f.summary
    assert [r["decision"] for r in f.evidence["rows"]] == ["admitted", "refused"]


def test_llama_server_has_no_event_stream(tmp_path):
    require_engine("llamacpp-server")
    f = probes.run("events.admission", engine="llamacpp-server", model="synthetic:tiny", out=tmp_path, isolated=False)
    assert f.verdict == "not-applicable" and "no KV event stream" in f.summary


def test_vllm_serve_fans_out_to_a_second_consumer_it_publishes_to(tmp_path):
    # the server's publisher binds ipc:// (kv_events_config), so the second consumer is the engine's own
    # subscriber, not a share of the cell's: before, the two split the cell's one subscriber and read "confirmed"
    require_engine("vllm-server")
    f = probes.run("events.one_consumer", engine="vllm-server", model="synthetic:cpu", params={"requests": 3},
                   out=tmp_path, isolated=False)
    assert f.verdict == "refuted", f.summary
    assert f.metrics["consumer_seen_fraction_min"]["value"] == 1.0


def test_vllm_serve_closes_its_ledger_and_announces_the_clear_only_with_the_next_step(tmp_path, monkeypatch):
    """events.ledger_closure on ``vllm serve`` at the smallest size that still evicts (a pool of 3 blocks beside the
    null one, a 96-token context, one-block prefixes, 6 ramp requests, 2 read-backs; the server's start is most of
    its time): its dev route ``POST /reset_prefix_cache`` clears (without it the probe restarts the server), and the
    server's stream announces the clear only with the engine's next step, as in-process. The served engine cannot
    say what it holds, so the pool alone bounds the ledger."""
    require_engine("vllm-server")
    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "1")
    f = probes.run("events.ledger_closure", engine="vllm-server", model="synthetic:cpu",
                   params={"requests": 6, "readback": 2, "prefixes": 2, "prefix_tokens": 32, "budget_blocks": 4,
                           "context_tokens": 96},
                   out=tmp_path, isolated=False)
    m = {k: v["value"] for k, v in f.metrics.items()}
    assert f.verdict == "partial", f.summary
    assert m["engine_evicted_min_blocks"] > 0 and m["ledger_removed_blocks"] > 0 and m["engine_reused_tokens"] > 0
    assert m["ledger_exact_fraction"] == 1.0 and m["ledger_resident_blocks"] <= m["engine_capacity_blocks"]
    assert "engine_held_blocks" not in m
    assert m["reset_engine_clear_signals_early"] == 0 and m["reset_engine_clear_signals"] == 1
    assert m["reset_engine_reused_tokens"] == 0
