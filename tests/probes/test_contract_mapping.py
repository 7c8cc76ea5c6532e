"""surface.contract_mapping: parameter names checked against a versioned table; only TensorRT-LLM speaks to its rows."""

from __future__ import annotations

from workbench import probes
from workbench.cells.llamacpp import SURFACE as LLAMACPP_ROWS
from workbench.probes.contract_mapping import mapping_verdict

TINY = "synthetic:tiny"


def test_contract_mapping_on_llamacpp_is_a_reference_not_an_answer(run_probe):
    f = run_probe("surface.contract_mapping")
    assert f.verdict == "not-applicable" and f.metric("rows_verified") == f.metric("rows_total") == 11
    assert f.claim_verdicts["entry.contract_table"] == "not-applicable"
    assert f.claim_verdicts["contract.embed"] == "not-applicable"  # never "confirmed" on "ErrUnsupportedFeature"
    assert f.claim_verdicts["risk.version_churn"] == "not-applicable"  # churn is about TensorRT-LLM releases


def test_contract_mapping_names_a_missing_mechanism(run_probe, llama_api, monkeypatch):
    monkeypatch.delattr(llama_api, "llama_state_seq_get_data")
    f = run_probe("surface.contract_mapping")
    assert f.verdict == "partial"
    assert any("llama_state_seq_get_data (absent)" in n for n in f.evidence["notes"])


def test_contract_mapping_checks_parameter_names_not_just_presence(run_probe, llama_api, monkeypatch):
    monkeypatch.setattr(llama_api, "llama_memory_seq_rm", lambda mem, seq, start, end: None)  # renamed p0/p1
    f = run_probe("surface.contract_mapping")
    assert f.verdict == "partial"
    assert any("llama_memory_seq_rm (parameters ('mem', 'seq', 'start', 'end')" in n for n in f.evidence["notes"])


def _rows(ok=True, empty_embed=True):
    return [{"claim": c, "mechanism": "m", "mechanism_count": 0 if c == "contract.embed" and empty_embed else 1,
             "ok": ok or c != "contract.decode", "missing": [] if ok or c != "contract.decode" else ["x"]}
            for c in LLAMACPP_ROWS]


def test_trtllm_rule_returns_each_of_its_verdicts():
    good = mapping_verdict(_rows(), "trtllm")
    assert good.verdict == "partial" and good.claim_verdicts["contract.embed"] == "inconclusive"
    assert good.claim_verdicts["risk.version_churn"] == "inconclusive"
    broken = mapping_verdict(_rows(ok=False), "trtllm")
    assert broken.verdict == "partial" and broken.claim_verdicts["contract.decode"] == "refuted"
    none = mapping_verdict([r | {"ok": False, "missing": ["x"]} for r in _rows()], "trtllm")
    assert none.verdict == "refuted"


def test_trtllm_not_installed_is_not_run(tmp_path):
    for name in ("surface.cpp_entrypoint", "surface.contract_mapping"):
        f = probes.run(name, engine="trtllm", out=tmp_path)
        assert f.verdict == "not-run" and "tensorrt_llm is not installed" in f.reason


def test_existence_alone_gives_at_most_partial():
    """Symbols and parameter names that exist say nothing of behaviour: no row, nor the entry condition, confirmed."""
    good = mapping_verdict(_rows(empty_embed=False), "trtllm")
    assert good.verdict == "partial" and good.claim_verdicts["entry.contract_table"] == "partial"
    assert "confirmed" not in good.claim_verdicts.values()
