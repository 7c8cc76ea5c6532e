"""The gates end to end on real engines, as notebook 60 runs them in `make run` (smaller): vLLM the candidate, llama.cpp
the baseline, one synthetic model, in a child process; its finding re-derives, names its class, and never answers
the subject's claims (vLLM is a reference); TensorRT-LLM reads not-run with the command for a GPU machine, and
llama.cpp itself runs no gates (it is the baseline)."""

from __future__ import annotations

import pytest

from conftest import require_engine
from workbench import claims, findings, plots, settle, standing
from workbench.certify import long_context as lc


@pytest.fixture(scope="module")
def gated(tmp_path_factory):
    require_engine("vllm")
    require_engine("llamacpp")
    out = tmp_path_factory.mktemp("gates")
    plan = lc.Plan("vllm", "synthetic:long,ctx=4096", tiers=(1024, 2048), runs=1, output_tokens=8, serve_kv=("f16",),
                   threads=1)
    return lc.run_in_child(plan, out), out


def test_vllm_against_llamacpp_writes_one_finding_with_three_gate_rows(gated):
    f, out = gated
    (path, back), = findings.scan([out]).findings
    assert back == f and f.engine == "vllm" and f.result_class == "raw_backend_control"
    assert set(f.claim_verdicts) == {"gate.context_tier", "gate.usable_context", "gate.prefill_32k"}
    assert all(f.claim_reasons[c] for c in f.claim_verdicts)
    kinds = {(r["kind"], r["arm"]) for r in f.evidence["rows"]}
    assert {("serve", "vllm"), ("serve", "llamacpp:f16"), ("a2", "vllm"), ("a2", "llamacpp:f16"),
            ("timed", "vllm"), ("timed", "llamacpp:f16")} <= kinds
    timed = [r for r in f.evidence["rows"] if r["kind"] == "timed" and r["served"]]
    assert len(timed) == 4 and all(r["stages"]["ensure_prefix_s"] > 0 and r["warm"]["state"] == "cold" for r in timed)
    assert f.verdict_on("gate.prefill_32k") == "inconclusive"  # no 32k tier here, and one run
    ids = f.environment["gates"]["identities"]
    assert ids["vllm"]["model"] == ids["llamacpp:f16"]["model"] and ids["vllm"]["digest"] == ids["llamacpp:f16"]["digest"]


def test_its_verdicts_rederive_and_never_answer_the_subjects_claims(gated):
    f, _ = gated
    for c in f.claim_verdicts:
        assert not any("decided again" in w for w in settle.unsettled(f, c))
    states = {s.claim.id: s for s in standing.claim_states([(None, f)], "gates")}
    assert not any(s.resolved for s in states.values())
    assert [r.engine for r in states["gate.context_tier"].references] == ["vllm"]
    assert dict(plots.side_by_side("gates", [f]))  # its figure draws


def test_tensorrt_llm_reads_not_run_with_the_gpu_command_and_llamacpp_runs_no_gates():
    f = lc.run(lc.Plan("trtllm"))
    assert f.verdict == "not-run" and f.result_class == "failed_no_performance_claim"
    assert claims.GATES_COMMAND in f.reason
    assert lc.run(lc.Plan("llamacpp")) is None and lc.run(lc.Plan("llamacpp-server")) is None
