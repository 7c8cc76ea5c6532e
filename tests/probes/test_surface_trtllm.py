"""``surface.contract_mapping`` on TensorRT-LLM: every version-guard row is reported, none folded into another."""

from __future__ import annotations

import dataclasses

from doubles.trtllm_fixture import fake_trt  # noqa: F401 - the fixture

from workbench.cells import trtllm_guard
from workbench.probes import ProbeContext, surface


def _without_field(cls, name):
    """``cls`` as a release without field ``name`` would define it."""
    kept = [(f.name, f.type, f) for f in dataclasses.fields(cls) if f.name != name]
    return dataclasses.make_dataclass(cls.__name__, kept, kw_only=True)


def test_every_guard_row_is_reported(fake_trt):
    rows = surface._trtllm_rows()
    guard = [r for r in rows if "guard" in r]
    assert len(guard) == len(trtllm_guard.GUARD)
    assert [(r["guard"], r["feature"]) for r in guard if r["guard"] == "llmapi.llm_args.TorchLlmArgs"] == [
        ("llmapi.llm_args.TorchLlmArgs", f) for f in ("core", "guided", "lora", "connector")]
    assert all(r["ok"] for r in rows)


def test_defect_3_a_missing_guided_field_is_not_hidden_by_the_connector_row(fake_trt, monkeypatch):
    """Keyed by symbol, the four TorchLlmArgs rows collapsed into the last (connector) one."""
    monkeypatch.setattr(fake_trt.llmapi.llm_args, "TorchLlmArgs",
                        _without_field(fake_trt.llmapi.llm_args.TorchLlmArgs, "guided_decoding_backend"))
    out = surface.ContractMapping().run(ProbeContext("trtllm", "unused"), surface.NoParams())
    assert out.verdict == "partial" and out.claim_verdicts["contract.decode"] == "refuted"
    assert out.claim_verdicts["contract.lora"] == "confirmed" and out.claim_verdicts["contract.overflow"] == "confirmed"
    assert any("TorchLlmArgs [guided]: changed" in n for n in out.notes)
    broken = [r for r in out.rows if not r["ok"]]
    assert {r.get("claim") or r.get("guard") for r in broken} == {"contract.decode", "llmapi.llm_args.TorchLlmArgs"}
