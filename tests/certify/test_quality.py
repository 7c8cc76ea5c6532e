"""The quality smoke on the real llama.cpp: A2 holds on a working cell and fails when the engine loses part of the
stable prefix's KV (dropped through llama.cpp's own API between EnsurePrefix and PrefillSuffix); the task set runs on
a real model and is not run on random weights; TensorRT-LLM reads not-run with its command."""

from __future__ import annotations

import pytest

from conftest import require_engine
from workbench import claims, settle, standing
from workbench.certify import quality


@pytest.fixture
def llama():
    require_engine("llamacpp")
    from workbench.cells.llamacpp.llama import LlamaCppCell

    return LlamaCppCell


def test_a_working_cell_passes_a2_and_a_random_model_runs_no_task(llama):
    f = quality.run("llamacpp", "synthetic:tiny", threads=1)
    assert f.verdict == "confirmed" and f.result_class == "microbenchmark" and "task set not run" in f.summary
    (row,) = f.evidence["rows"]
    assert row["equal"] and row["warm_reused_tokens"] == quality.A2_STABLE and row["stages"]["prefill_suffix_s"] > 0
    assert settle.unsettled(f, quality.CLAIM) == ()  # re-derived from the engine's tokens it recorded
    (state,) = standing.claim_states([(None, f)], "certification")
    assert not state.resolved and [r.verdict for r in state.references] == ["confirmed"]  # llama.cpp: a reference


def test_kv_the_engine_lost_fails_a2(llama, monkeypatch):
    prefill_suffix = llama.prefill_suffix

    def losing(self, suffix, **kw):
        self._ll.llama_memory_seq_rm(self._mem, 0, 8, 40)  # the engine drops part of the stable prefix's KV
        return prefill_suffix(self, suffix, **kw)

    monkeypatch.setattr(llama, "prefill_suffix", losing)
    f = quality.run("llamacpp", "synthetic:tiny", threads=1)
    assert f.verdict == "refuted" and "differs from the cold full prompt" in f.summary
    assert settle.unsettled(f, quality.CLAIM) == ()


def test_a_real_model_answers_the_task_set(llama):
    f = quality.run("llamacpp", "smollm2-135m", threads=1)
    tasks = [r for r in f.evidence["rows"] if r["kind"] == "task"]
    assert [t["task"] for t in tasks] == [t.name for t in quality.TASKS] and all(t["answer"] for t in tasks)
    assert f.metric("task_pass_fraction") == sum(t["passed"] for t in tasks) / len(tasks)
    assert f.verdict == ("confirmed" if f.metric("task_pass_fraction") >= quality.TASK_PASS else "refuted")


def test_tensorrt_llm_reads_not_run_with_its_command():
    f = quality.run("trtllm", "HF_DIR")
    assert f.verdict == "not-run" and f.result_class == "failed_no_performance_claim"
    assert claims.get(quality.CLAIM).resolve.startswith("workbench certify quality --engine trtllm")
