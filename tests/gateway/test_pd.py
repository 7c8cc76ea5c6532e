"""The P/D relay, engine-neutral: its legs, its early exit, its faults, and the rule that decides the verdicts.

The relay is driven here through TensorRT-LLM's double (tests/doubles/fake_trtllm_disagg.py); the same relay runs
on the real vLLM in test_pd_vllm.py. The rule is fed metric values as a run records them."""

from __future__ import annotations

import httpx
import pytest
from doubles.fake_trtllm_disagg import Workers

from workbench import probes
from workbench.cells.trtllm import disagg
from workbench.cells.vllm import pd as vllm_pd
from workbench.gateway import pd
from workbench.probes import gateway_pd


def test_each_engine_has_its_wire():
    assert isinstance(pd.wire_for("vllm"), vllm_pd.VllmWire) and isinstance(pd.wire_for("trtllm"), disagg.TrtllmWire)
    with pytest.raises(ValueError, match="llamacpp"):
        pd.wire_for("llamacpp")


def test_vllm_wire_sends_a_one_token_context_leg_and_relays_its_params_as_they_came():
    wire = vllm_pd.VllmWire()
    body = wire.request("m", [5, 6, 7], 8, "s")
    ctx = wire.context_body(body)
    assert ctx["max_tokens"] == 1 and ctx["stream"] is False and ctx["kv_transfer_params"] == {"do_remote_decode": True}
    assert body["max_tokens"] == 8 and "kv_transfer_params" not in body  # the client's request is left alone
    assert wire.state({"kv_transfer_params": None}) is None and wire.generation_body(body, None) == body
    assert wire.generation_body(body, {"x": 1})["kv_transfer_params"] == {"x": 1}
    assert wire.cell_options("context", "/s")["kv_transfer_config"]["kv_role"] == "kv_producer"
    assert wire.cell_options("generation", "/s")["kv_transfer_config"] == {
        "kv_connector": "ExampleConnector", "kv_role": "kv_consumer",
        "kv_connector_extra_config": {"shared_storage_path": "/s"}}
    with pytest.raises(ValueError, match="kv_role"):
        vllm_pd.transfer_config("kv_leader", "/s")


@pytest.mark.parametrize("prompt, block, moved", [(200, 32, 192), (194, 32, 192), (193, 32, 160), (2, 32, 0), (1, 32, 0)])
def test_the_example_connector_moves_whole_blocks_of_all_but_the_last_token(prompt, block, moved):
    assert vllm_pd.aligned_prefix(prompt, block) == moved


def test_rewrite_prompt_changes_the_first_token_or_character():
    assert pd.rewrite_prompt({"prompt": [300, 2]})["prompt"] == [299, 2]
    assert pd.rewrite_prompt({"prompt": [1, 2]})["prompt"] == [2, 2]
    assert pd.rewrite_prompt({"prompt": "abc"})["prompt"] == "Xbc"


def test_a_relay_without_early_exit_sends_the_finished_request_on():
    w = Workers()
    wire = disagg.TrtllmWire()
    from doubles.fake_trtllm_disagg import next_token

    with httpx.Client(transport=httpx.MockTransport(w.handler)) as client:
        counters = pd.Counters()
        body = wire.request("m", [300, 301], 3, None, stop_token_ids=[next_token([300, 301], 0)])
        ex = pd.relay(client, wire, body, context_url="http://c", generation_url="http://g", counters=counters,
                      early_exit=False, between=lambda e: w.seen.append(("between", {})))
    assert not ex.early_exit and [h for h, _ in w.seen] == ["c", "between", "g"]
    assert (counters.requests, counters.early_exits, counters.generation_legs) == (1, 0, 1)


GOOD = {"pd_external_tokens": 192.0, "pd_expected_external_tokens": 192, "pd_external_exact": True,
        "pd_output_matches_single": True, "pd_zeroed_output_changed": True, "pd_early_exit_generation_requests": 0.0}


@pytest.mark.parametrize("change, life, kv", [
    ({}, "confirmed", "confirmed"),
    ({"pd_external_tokens": 0.0, "pd_external_exact": False, "pd_zeroed_output_changed": False}, "refuted", "refuted"),
    ({"pd_output_matches_single": False}, "refuted", "confirmed"),  # the state altered on its way
    ({"pd_early_exit_generation_requests": 1.0}, "refuted", "confirmed"),
    ({"pd_zeroed_output_changed": False}, "confirmed", "refuted"),
    ({"pd_zeroed_output_changed": None}, "confirmed", "inconclusive"),
])
def test_the_rule_decides_each_claim_on_engine_readings(change, life, kv):
    o = gateway_pd.decide(GOOD | change, [], [])
    o = probes.at_most_inconclusive_without_engine(o)
    assert o.claim_verdicts == {"shapes.pd_lifecycle": life, "shapes.pd_transferred_kv": kv}
    probes.check_rests(probes.get("gateway.pd"), o, subject=False)


def test_the_probe_is_declared_with_its_claims_and_figures():
    probe = probes.get("gateway.pd")
    assert probe.claims == ("shapes.pd_lifecycle", "shapes.pd_transferred_kv")
    assert probe.outcome_defaults() == {"fault": "none"}
    with pytest.raises(probes.ParamError, match="fault must be one of"):
        probes.parse_params(probe, {"fault": "gremlins"})
    assert gateway_pd.served_twin("vllm") == "vllm-server" and gateway_pd.served_twin("trtllm-serve") == "trtllm-serve"


def test_llamacpp_has_no_pd_transfer_so_the_probe_is_not_applicable():
    f = probes.run("gateway.pd", engine="llamacpp", model="synthetic:tiny", isolated=False)
    assert f.verdict == "not-applicable" and "No P/D transfer on llamacpp" in f.summary


def test_the_shape_claims_land_in_the_guide_unresolved_on_trtllm_serve_with_their_command(tmp_path):
    from pathlib import Path

    from workbench import claims
    from workbench.events import guide

    found = tmp_path / "findings"
    f = probes.run("gateway.pd", engine="trtllm-serve", model="synthetic:tiny", out=found, isolated=False)
    assert f.verdict == "not-run"
    out = tmp_path / "guide.md"
    source = Path(__file__).resolve().parents[2] / "data" / guide.GUIDE
    assert guide.run_writeback(source, [found], "write", out) == 0
    text = out.read_text()
    for c in (claims.get("shapes.pd_lifecycle"), claims.get("shapes.pd_transferred_kv")):
        block = text[text.index(f"<!-- workbench:begin {c.id} -->"):text.index(f"<!-- workbench:end {c.id} -->")]
        assert "**TensorRT-LLM: unresolved" in block and "gateway.pd --engine trtllm-serve" in block, c.id


def test_vllm_serve_gets_the_kv_transfer_config_on_its_command_line(tmp_path):
    import json

    from workbench.cells.vllm.served import launch
    from workbench.serve import ServerRequest

    config = vllm_pd.transfer_config("kv_consumer", "/store")
    argv = launch(ServerRequest("vllm-server", "/m", options={"kv_transfer_config": config}), 8000, tmp_path).argv
    assert json.loads(argv[argv.index("--kv-transfer-config") + 1]) == config
    assert "--kv-transfer-config" not in launch(ServerRequest("vllm-server", "/m"), 8000, tmp_path).argv


def test_the_figures_draw_the_ttft_split_and_the_cached_tokens():
    from workbench.gateway import pd_figures

    rows = [{"run": "single", "ttft_s": 0.2, "prompt_tokens": 200, "cached_tokens": 0},
            {"run": "P/D", "ttft_s": 0.15, "context_s": 0.05, "prompt_tokens": 200, "cached_tokens": 192},
            {"run": "early exit", "finish_reason": "stop"}]
    split = pd_figures.ttft_split(rows)
    assert [(t.name, list(t.x), list(t.y)) for t in split.data] == [  # p50s: one pair, no p90 or p95 to spread
        ("time to first token", ["single", "P/D"], [0.2, 0.15]), ("context leg (prefill, store)", ["P/D"], [0.05])]
    assert [t.meta["runs"] for t in split.data] == [[1, 1], [1]]
    assert [list(t.y) for t in pd_figures.cached_tokens(rows).data] == [[200, 200], [0, 192]]
    assert pd_figures.ttft_split([]).layout.annotations[0].text == "no timed runs"


def test_a_model_the_server_cannot_run_is_not_run_not_not_applicable():
    from conftest import require_engine

    require_engine("vllm-server")
    f = probes.run("gateway.pd", engine="vllm", model="smollm2-135m", isolated=False)
    assert f.verdict == "not-run" and "vllm-server" in f.reason
