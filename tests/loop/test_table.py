"""The loop's arms × metrics table, over the findings of a real three-turn loop on llama.cpp (TensorRT-LLM's arm not
run here): a row per arm that ran, each column one declared metric in one unit with its source, CIs labelled."""

from __future__ import annotations

from dataclasses import replace

import pytest

from workbench import loop, metrics
from workbench.loop.table import COLUMNS, SOURCE_WORDS, arm_table


@pytest.fixture(scope="module")
def run():
    return loop.run("claude-code", arms="llamacpp-cold,llamacpp,trtllm", model="synthetic:tiny", sessions=1, turns=3,
                    threads=1, context_tokens=1024)


def test_a_row_per_arm_that_ran_with_the_serving_metrics_in_one_unit_each(run):
    t = arm_table(run.findings)
    assert [r.arm for r in t.rows] == ["llamacpp-cold", "llamacpp"]
    assert t.not_run == (("trtllm", "tensorrt_llm is not installed"),)
    assert [c.tag for c in t.columns] == list(COLUMNS)
    for c in t.columns:  # the header and the source are the declaration's, the unit said once in the column's title
        assert c.header == metrics.get(c.tag).header and c.source == SOURCE_WORDS[metrics.get(c.tag).source]
    by = {c.tag: c for c in t.columns}
    assert by["itl_p50_s"].unit == "ms" and by["reuse_efficiency"].unit == "%"  # a CPU turn's gaps: under a second
    assert by["itl_p50_s"].source == "timed by the workbench" and by["reuse_efficiency"].source == "engine-read"
    cold = next(f for f in run.findings if f.probe == "loop.llamacpp-cold")
    row = dict(zip(COLUMNS, t.rows[0].values))
    assert row["itl_p50_s"] == f"{cold.metric('itl_p50_s') * 1e3:.3g}" and "ms" not in row["itl_p50_s"]
    assert cold.metric("loop_output_tokens_per_s") == pytest.approx(
        sum(r["decode_tokens"] for r in cold.evidence["rows"]) / cold.metric("loop_time_s"))
    assert row["speedup_vs_best_llamacpp"].endswith("(CI over 3 turns)") and " [" in row["speedup_vs_best_llamacpp"]
    assert t.rows[1].best and not t.rows[0].best  # reuse beats a cold sequence every turn
    text = t.text()
    assert "ITL (TPOT) p50 (ms)" in text and "engine-read: reuse efficiency" in text
    assert "not run: trtllm: tensorrt_llm is not installed" in text


def test_a_value_whose_finding_records_another_source_says_so(run):
    """Reuse efficiency is engine-read where the engine counted the reuse; on the cell's own count the cell says so."""
    f = next(f for f in run.findings if f.probe == "loop.llamacpp")
    own = replace(f, metrics=f.metrics | {"reuse_efficiency": f.metrics["reuse_efficiency"] | {"source": "cell"}})
    row = dict(zip(COLUMNS, arm_table([own]).rows[0].values))
    assert row["reuse_efficiency"].endswith("(the cell's own count)")
    assert dict(zip(COLUMNS, arm_table([f]).rows[0].values))["reuse_efficiency"] == f"{f.metric('reuse_efficiency'):.1%}"[:-1]


def test_an_arm_that_ran_on_another_model_is_not_listed_as_not_run(run):
    """Issue 51: a batch's llama.cpp lane reports the vLLM arms not-run on its model while vLLM's own lane runs them
    on another: "Not run here: vllm" sat under the table that showed the vLLM rows."""
    ran = next(f for f in run.findings if f.probe == "loop.llamacpp")
    elsewhere = replace(ran, id="", verdict="not-run", reason="its engine is not installed", metrics={},
                        params=ran.params | {"model": "another"})
    assert [a for a, _ in arm_table([*run.findings, elsewhere]).not_run] == ["trtllm"]
    assert [a for a, _ in arm_table([elsewhere]).not_run] == ["llamacpp"]


def test_ttft_at_p50_p90_p95_and_loop_time_over_the_runs_with_their_count(run):
    """Review of issue 50 (item 14): the arm table gave TTFT p50 and p90 over turns, no p95, and no run count. TTFT is
    at p50, p90 and p95 over the run's turns; the loop time is p50 · p90 · p95 over the runs of the whole trace with
    the same workload, the run count in its own column, and every row names its result class."""
    t = arm_table(run.findings)
    assert [c.tag for c in t.columns][:3] == ["ttft_p50_s", "ttft_p90_s", "ttft_p95_s"]
    cold = next(f for f in run.findings if f.probe == "loop.llamacpp-cold")
    assert cold.metric("ttft_p95_s") >= cold.metric("ttft_p90_s") >= cold.metric("ttft_p50_s")
    row = dict(zip(COLUMNS, t.rows[0].values))
    assert t.rows[0].runs == 1 and row["loop_time_s"].endswith("(1 run)")
    assert t.rows[0].result_class == "raw_backend_control" and "result class" in t.frame()
    again = [replace(f, id=f.id + "-2", metrics=f.metrics | {"loop_time_s": f.metrics["loop_time_s"] | {
        "value": f.metric("loop_time_s") * 2}}) for f in run.findings if f.probe == "loop.llamacpp-cold"]
    other = [replace(f, id=f.id + "-3", params=f.params | {"turns": 99}) for f in again]  # another workload
    t2 = arm_table(run.findings, [*run.findings, *again, *other])
    row = dict(zip(COLUMNS, t2.rows[0].values))
    assert t2.rows[0].runs == 2 and t2.rows[1].runs == 1  # only the same workload's runs are counted together
    assert row["loop_time_s"].startswith("p50 ") and " · p95 " in row["loop_time_s"] and row["loop_time_s"].endswith(
        "(2 runs)")
    assert "loop time is p50 · p90 · p95 over the runs of the whole trace" in t2.text()
