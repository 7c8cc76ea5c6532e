"""Every probe runs on the real llama.cpp cell (synthetic model); verdicts match llama.cpp's semantics."""

from __future__ import annotations

import json

import pytest

from conftest import TINY
from workbench import findings, probes


def run(name, tmp_path, **params):
    """In this process (not isolated), so that monkeypatched faults reach the engine."""
    f = probes.run(name, engine="llamacpp", model=TINY, params=params, out=tmp_path, isolated=False)
    doc = json.loads((tmp_path / f"{f.id}.json").read_text())
    findings.validate(doc)  # what was written is schema-valid
    assert doc["environment"]["engine_version"]
    if probes.get(name).needs_engine:  # static probes read the package, not a model
        assert doc["environment"]["model"]["sha256"]
    return f


def test_retention_llamacpp_pins_and_refuses_overflow(tmp_path):
    f = run("retention.pinning_under_pressure", tmp_path, prefix_tokens=64, capacity_tokens=256,
            pressure="0.5,2,4", filler_slots=6, expiry_ms=20)
    assert f.verdict == "confirmed"
    assert f.metric("survival_at_max_pressure") == 1.0
    assert f.metric("silent_evictions") == 0
    assert f.metric("overflow_errors") > 0  # beyond capacity the newcomer gets an explicit error
    assert f.claim_verdicts["risk.retention_bias"] == "refuted"
    arms = {r["arm"] for r in f.evidence["rows"]}
    assert arms == {"p35", "p60", "p100", "p100+20ms"}


def test_retention_without_sustained_pressure_is_inconclusive(tmp_path):
    f = run("retention.pinning_under_pressure", tmp_path, prefix_tokens=32, capacity_tokens=256,
            pressure="0.25,0.5", priorities="100", expiry_ms=0)
    assert f.verdict == "inconclusive"


def test_reuse_metrics_are_exact_per_token_on_llamacpp(tmp_path):
    f = run("reuse.per_request_metrics", tmp_path, repeats=1)
    rows = f.evidence["rows"]
    assert f.verdict == "confirmed" and f.metric("granularity_tokens") == 1
    assert all(r["reported_reused"] == r["truth_reused"] for r in rows)
    by_case = {r["case"]: r for r in rows}
    assert by_case["exact repeat"]["reported_reused"] == by_case["exact repeat"]["prompt_tokens"]
    assert by_case["other salt"]["reported_reused"] == 0
    assert by_case["shared 3·B+1"]["truth_reused"] == 3 * 32 + 1


def test_reuse_classifies_block_and_last_token_disagreements():
    from workbench.probes.reuse import classify

    assert classify(100, 100, 120, 1) == "exact"
    assert classify(120, 119, 120, 1) == "last-token rule"
    assert classify(97, 96, 120, 32) == "block rounding"
    assert classify(97, 40, 120, 32) == "mismatch"


def test_connector_llamacpp_exports_sequences_and_shifts(tmp_path):
    f = run("connector.export_granularity", tmp_path, prefix_tokens=48, shift=11, continuation=4)
    assert f.verdict == "partial"
    assert f.metric("restored_identical") is True and f.metric("shifted_import_exact") is True
    assert f.metric("export_unit_tokens") == 48


def test_warmup_materializes_whole_prefix_on_llamacpp(tmp_path):
    f = run("prefix.warmup_materialization", tmp_path, blocks="1,2", nominal_block=16, pressure="0,2",
            capacity_tokens=256, filler_slots=3)
    assert f.verdict == "refuted"  # the risk did not occur
    assert {r["prefix_tokens"] for r in f.evidence["rows"]} == {15, 16, 17, 31, 32, 33}
    assert all(r["fraction"] == 1.0 for r in f.evidence["rows"])
    assert f.claim_verdicts["contract.ensure_prefix"] == "confirmed"


def test_isolation_keeps_kv_within_one_key(tmp_path):
    f = run("isolation.cache_salt", tmp_path, prompt_tokens=128, trials=8)
    assert f.verdict == "confirmed"
    assert f.metric("cross_manifest_reused_tokens") == 0
    assert f.metric("ks_p_same_manifest") < 0.01
    assert any("refused" in n for n in f.evidence["notes"])


def test_capacity_follows_byte_budget_rounded_to_llamacpp_padding(tmp_path):
    f = run("capacity.budget_policy", tmp_path, budget_tokens="256,1000")
    rows = {r["budget_tokens"]: r for r in f.evidence["rows"]}
    assert rows[256]["measured_capacity_tokens"] == 256
    assert rows[1000]["measured_capacity_tokens"] == 1024  # llama.cpp pads n_ctx to 256
    assert f.verdict == "partial" and f.claim_verdicts["contract.describe"] == "partial"


def test_capacity_exact_budgets_refute_the_risk(tmp_path):
    f = run("capacity.budget_policy", tmp_path, budget_tokens="256,512")
    assert f.verdict == "refuted"


def test_trtllm_is_not_run_here_with_the_reason(tmp_path):
    f = probes.run("reuse.per_request_metrics", engine="trtllm", model=TINY, out=tmp_path)
    assert f.verdict == "not-run" and "tensorrt_llm" in f.reason
    assert f.metrics == {} and f.environment["engine_version"] is None


@pytest.mark.parametrize("params, message", [
    ({"bogus": 1}, "unknown parameter.*bogus.*valid: prefix_tokens"),
    ({"prefix_tokens": "many"}, "prefix_tokens must be int"),
    ({"priorities": "35,200"}, r"priorities must be in \[0, 100\]"),
])
def test_bad_parameters_name_what_to_fix(params, message):
    with pytest.raises(probes.ParamError, match=message):
        probes.run("retention.pinning_under_pressure", engine="llamacpp", model=TINY, params=params)


def test_unknown_probe_lists_the_valid_ones():
    with pytest.raises(probes.ParamError, match="valid probes: .*retention.pinning_under_pressure"):
        probes.get("nope")


def test_every_probe_declares_params_and_known_claims():
    from workbench import claims

    for name in probes.names():
        p = probes.get(name)
        assert p.name == name and p.claim and p.claims
        assert all(c in claims.CLAIMS for c in p.claims)
        assert all(prm["help"] for prm in probes.describe_params(name))


def test_cpp_entrypoint_llamacpp_finds_the_c_api(tmp_path):
    f = run("surface.cpp_entrypoint", tmp_path)
    assert f.verdict == "confirmed" and f.metric("symbols_missing") == 0


def test_cpp_entrypoint_trtllm_not_installed_is_not_run(tmp_path):
    f = probes.run("surface.cpp_entrypoint", engine="trtllm", model=TINY, out=tmp_path)
    assert f.verdict == "not-run" and "tensorrt_llm is not installed" in f.reason


def test_contract_mapping_llamacpp_verifies_every_row(tmp_path):
    f = run("surface.contract_mapping", tmp_path)
    assert f.verdict == "confirmed" and f.metric("rows_verified") == f.metric("rows_total") == 11
    assert set(f.claim_verdicts) >= {"contract.ensure_prefix", "contract.snapshot"}
    assert f.claim_verdicts["risk.version_churn"] == "refuted"


def test_contract_mapping_names_a_missing_mechanism(tmp_path, monkeypatch):
    import llama_cpp

    monkeypatch.delattr(llama_cpp, "llama_state_seq_get_data")
    f = run("surface.contract_mapping", tmp_path)
    assert f.verdict == "partial" and f.claim_verdicts["contract.snapshot"] == "refuted"
    assert f.claim_verdicts["risk.version_churn"] == "confirmed"
    assert any("llama_state_seq_get_data" in n for n in f.evidence["notes"])


def test_cell_options_reach_the_cell_and_unknown_ones_are_named(tmp_path):
    f = probes.run("reuse.per_request_metrics", engine="llamacpp", model=TINY, params={"repeats": 1},
                   cell_options={"n_batch": 64}, out=tmp_path)
    assert f.environment["cell"]["extra"]["n_batch"] == 64 and f.params["n_batch"] == 64
    with pytest.raises(probes.ParamError, match="rejected a cell option.*tokens_per_blok"):
        probes.run("reuse.per_request_metrics", engine="llamacpp", model=TINY, cell_options={"tokens_per_blok": 8})
