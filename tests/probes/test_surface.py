"""surface.*: parameter names checked against a versioned table; only TensorRT-LLM speaks to its rows."""

from __future__ import annotations

from workbench import probes
from workbench.probes.surface import LLAMACPP_ROWS, mapping_verdict

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


def test_cpp_entrypoint_on_llamacpp_is_a_reference(run_probe):
    f = run_probe("surface.cpp_entrypoint")
    assert f.verdict == "not-applicable" and f.metric("symbols_missing") == 0


def test_trtllm_not_installed_is_not_run(tmp_path):
    for name in ("surface.cpp_entrypoint", "surface.contract_mapping"):
        f = probes.run(name, engine="trtllm", out=tmp_path)
        assert f.verdict == "not-run" and "tensorrt_llm is not installed" in f.reason


def test_audit_1_existence_alone_gives_at_most_partial():
    """Symbols and parameter names that exist say nothing of behaviour: no row, nor the entry condition, confirmed."""
    good = mapping_verdict(_rows(empty_embed=False), "trtllm")
    assert good.verdict == "partial" and good.claim_verdicts["entry.contract_table"] == "partial"
    assert "confirmed" not in good.claim_verdicts.values()


# --------------------------------------------------------------------------- version churn across surveys

from workbench.probes.surface import CHURN_COMMAND, churn_verdict, signature_changes  # noqa: E402

SIG = {"LLM.generate_async [core]": {"at": "LLM.generate_async", "names": {"inputs": True, "cache_salt": True},
                                     "defaults": {}},
       "llmapi.KvCacheConfig [core]": {"at": "llmapi.KvCacheConfig", "names": {"max_tokens": True},
                                       "defaults": {"use_kv_cache_manager_v2": "False"}}}


def _changed(key, **part):
    return SIG | {key: SIG[key] | part}


def test_churn_rule_returns_each_of_its_verdicts():
    one = churn_verdict({"1.2.1": SIG})
    assert one.verdict == "inconclusive" and "≥2 TensorRT-LLM versions" in one.summary and CHURN_COMMAND in one.summary
    assert churn_verdict({"1.2.0": SIG, "1.2.1": SIG}).verdict == "refuted"
    gone = churn_verdict({"1.2.1": SIG, "1.3.0": _changed("LLM.generate_async [core]",
                                                         names={"inputs": True, "cache_salt": False})})
    assert gone.verdict == "confirmed" and gone.rows == [
        {"from": "1.2.1", "to": "1.3.0", "change": "LLM.generate_async [core]: cache_salt gone"}]
    assert "1.2.1 → 1.3.0: LLM.generate_async [core]: cache_salt gone" in gone.summary
    apart = churn_verdict({"1.2.1": {"a [core]": SIG["LLM.generate_async [core]"]}, "1.3.0": {"b [core]": {}}})
    assert apart.verdict == "inconclusive" and "share no entry point" in apart.summary


def test_churn_sees_a_moved_symbol_and_a_changed_default():
    moved = _changed("LLM.generate_async [core]", at="llm.LLM.generate_async")
    default = _changed("llmapi.KvCacheConfig [core]", defaults={"use_kv_cache_manager_v2": "'auto'"})
    out = churn_verdict({"1.2.1": SIG, "1.3.0rc1": moved, "1.4.0rc1": default})
    assert out.verdict == "confirmed" and [r["change"] for r in out.rows] == [
        "LLM.generate_async [core]: found at llm.LLM.generate_async, was LLM.generate_async",
        "LLM.generate_async [core]: found at LLM.generate_async, was llm.LLM.generate_async",
        "llmapi.KvCacheConfig [core]: use_kv_cache_manager_v2 defaults to 'auto', was False"]


def test_churn_compares_versions_in_release_order_not_text_order():
    out = churn_verdict({"1.10.0": _changed("LLM.generate_async [core]", names={"inputs": True, "cache_salt": False}),
                         "1.9.0": SIG})
    assert out.rows[0]["from"] == "1.9.0" and out.rows[0]["change"].endswith("cache_salt gone")


def test_what_only_one_survey_checked_is_a_change_of_the_table_not_churn():
    """A newer workbench checks one more name: the engine did not change, so identical is still refuted."""
    more = _changed("LLM.generate_async [core]", names={"inputs": True, "cache_salt": True, "streaming": True})
    out = churn_verdict({"1.2.0": SIG, "1.2.1": more})
    assert out.verdict == "refuted" and any("streaming (checked in one survey only)" in n for n in out.notes)
    assert signature_changes(SIG, more) == ([], ["LLM.generate_async [core]: streaming (checked in one survey only)"])


def test_surveys_without_signature_tables_cannot_answer_churn():
    out = churn_verdict({"1.2.0": None, "1.2.1": SIG})
    assert out.verdict == "inconclusive" and any("1.2.0 recorded no signature table" in n for n in out.notes)


def test_audit_a_default_no_longer_declared_is_churn_not_identity():
    """A pinned field whose default stopped being declared was dropped from the record and read as identical."""
    undeclared = _changed("llmapi.KvCacheConfig [core]", defaults={"use_kv_cache_manager_v2": "(not declared)"})
    out = churn_verdict({"1.2.1": SIG, "1.3.0": undeclared})
    assert out.verdict == "confirmed" and out.rows[0]["change"].endswith("defaults to (not declared), was False")


def test_audit_entry_points_found_in_neither_survey_are_not_a_reading():
    nowhere = {k: {"at": None, "names": {}, "defaults": {}} for k in SIG}
    out = churn_verdict({"1.2.1": nowhere, "1.3.0": nowhere})
    assert out.verdict == "inconclusive" and "share no entry point" in out.summary
