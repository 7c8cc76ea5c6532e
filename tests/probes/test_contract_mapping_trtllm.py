"""``surface.contract_mapping`` on TensorRT-LLM: every version-guard row is reported, none folded into another."""

from __future__ import annotations

import dataclasses

from doubles.trtllm_fixture import fake_trt  # noqa: F401 - the fixture

from workbench.cells.trtllm import guard as trtllm_guard
from workbench.probes import ProbeContext, churn
from workbench.probes.contract_mapping import ContractMapping
from workbench.probes.installed import NoParams


def _without_field(cls, name):
    """``cls`` as a release without field ``name`` would define it."""
    kept = [(f.name, f.type, f) for f in dataclasses.fields(cls) if f.name != name]
    return dataclasses.make_dataclass(cls.__name__, kept, kw_only=True)


def test_every_guard_row_is_reported(fake_trt):
    rows = trtllm_guard.surface_rows()
    guard = [r for r in rows if "guard" in r]
    assert len(guard) == len(trtllm_guard.GUARD)
    assert [(r["guard"], r["feature"]) for r in guard if r["guard"] == "llmapi.llm_args.TorchLlmArgs"] == [
        ("llmapi.llm_args.TorchLlmArgs", f) for f in ("core", "guided", "lora", "connector")]
    assert all(r["ok"] for r in rows)


def test_a_missing_guided_field_is_not_hidden_by_the_connector_row(fake_trt, monkeypatch):
    """Keyed by symbol, the four TorchLlmArgs rows collapsed into the last (connector) one."""
    monkeypatch.setattr(fake_trt.llmapi.llm_args, "TorchLlmArgs",
                        _without_field(fake_trt.llmapi.llm_args.TorchLlmArgs, "guided_decoding_backend"))
    out = ContractMapping().run(ProbeContext("trtllm", "unused"), NoParams())
    assert out.verdict == "partial" and out.claim_verdicts["contract.decode"] == "refuted"
    assert out.claim_verdicts["contract.lora"] == "partial" and out.claim_verdicts["contract.overflow"] == "partial"
    assert any("TorchLlmArgs [guided]: changed" in n for n in out.notes)
    broken = [r for r in out.rows if not r["ok"]]
    assert {r.get("claim") or r.get("guard") for r in broken} == {"contract.decode", "llmapi.llm_args.TorchLlmArgs"}


def test_each_guard_row_records_the_signature_it_read(fake_trt):
    rows = trtllm_guard.surface_rows()
    table = churn.signature_table(rows)
    assert len(table) == len(trtllm_guard.GUARD)
    args = table["llmapi.llm_args.TorchLlmArgs [guided]"]
    assert args == {"at": "llmapi.llm_args.TorchLlmArgs", "names": {"guided_decoding_backend": True}, "defaults": {}}
    assert table["llmapi.KvCacheConfig [core]"]["defaults"] == {"use_kv_cache_manager_v2": "False"}


def test_two_releases_of_the_double_one_without_a_field_confirm_churn_with_the_change(fake_trt, monkeypatch):
    """Surveys of 1.2.1 and of a "1.3.0" that dropped guided_decoding_backend: the cross-version rule names it."""
    before = churn.signature_table(trtllm_guard.surface_rows())
    monkeypatch.setattr(fake_trt, "__version__", "1.3.0")
    monkeypatch.setattr(fake_trt.llmapi.llm_args, "TorchLlmArgs",
                        _without_field(fake_trt.llmapi.llm_args.TorchLlmArgs, "guided_decoding_backend"))
    after_rows = trtllm_guard.surface_rows()
    assert {r["version"] for r in after_rows} == {"1.3.0"}
    out = churn.churn_verdict({"1.2.1": before, "1.3.0": churn.signature_table(after_rows)})
    assert out.verdict == "confirmed"
    assert out.rows == [{"from": "1.2.1", "to": "1.3.0",
                         "change": "llmapi.llm_args.TorchLlmArgs [guided]: guided_decoding_backend gone"}]
    same = churn.churn_verdict({"1.2.1": before, "1.2.2": before})
    assert same.verdict == "refuted"


def test_one_survey_leaves_churn_inconclusive_and_says_what_it_needs(fake_trt):
    out = ContractMapping().run(ProbeContext("trtllm", "unused"), NoParams())
    assert out.claim_verdicts["risk.version_churn"] == "inconclusive"
    assert any("≥2 TensorRT-LLM versions" in n and "only 1.2.1" in n for n in out.notes)
    assert out.claim_verdicts["entry.contract_table"] == "partial"  # existence and names alone: never confirmed
