"""The certification matrix: one row per engine and model, figures p50/p90/p95 over repeated runs with the count,
the quality smoke's status (or that the row makes no throughput claim), TensorRT-LLM not-run with the GPU command,
exported as JSON and CSV."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from workbench import findings
from workbench.certify import long_context as lc
from workbench.certify import matrix
from workbench.certify.quality import QualitySmoke

from .helpers import gates_finding


XEON = {"summary": "Xeon (2 cores); no GPU", "cpu": {"model": "Xeon", "cores": 2}}


def loop_arm(engine, arm, model, loop_time, created):
    from workbench.loop.results import Loop

    return findings.Finding(
        probe=f"loop.{arm}", probe_version=Loop.version, claims=["gate.turn_time"], verdict="inconclusive",
        summary="reference arm", engine=engine,
        environment={"engine": engine, "engine_version": "0.3.36", "model": {"name": model, "sha256": "b" * 64},
                     "hardware": XEON,
                     "workbench_version": "0", "time": created},
        params={"arm": arm, "model": model, "context_tokens": 8192}, created=created,
        metrics={"loop_time_s": {"value": loop_time, "unit": "s", "source": "timed"}}, result_class="raw_backend_control")


def quality(engine, model, verdict):
    return findings.Finding(probe="quality.smoke", probe_version=QualitySmoke.version, claims=["cert.quality_smoke"],
                            verdict=verdict,
                            summary=f"Quality smoke {verdict}", engine=engine,
                            environment={"engine": engine, "engine_version": "x", "model": {"name": model},
                                         "hardware": XEON, "workbench_version": "0", "time": "t"},
                            result_class="microbenchmark")


def found():
    fs = [loop_arm("llamacpp", "llamacpp", "SmolLM2", t, f"2026-12-07T10:0{i}:00+00:00")
          for i, t in enumerate((10.0, 12.0, 11.0))]
    fs += [loop_arm("vllm", "vllm", "synthetic-cpu", 30.0, "2026-12-07T10:00:00+00:00"),
           loop_arm("vllm", "vllm-spec", "synthetic-cpu", 25.0, "2026-12-07T10:00:00+00:00"), gates_finding("vllm", gpu=False),
           quality("llamacpp", "SmolLM2", "confirmed"),
           lc._not_run(lc.Plan("trtllm"), "tensorrt_llm needs an NVIDIA GPU")]
    return [(Path(f"{i}.json"), f) for i, f in enumerate(fs)]


def by(cells, engine, model):
    (c,) = [c for c in cells if (c.engine, c.model) == (engine, model)]
    return c


def test_a_spec_and_the_name_it_resolves_to_are_one_model():
    spec = loop_arm("vllm", "vllm", "synthetic:cpu", 1.0, "2026-12-07T10:00:00+00:00")
    spec.environment["model"] = {}
    from workbench import models

    name = matrix._model(spec)
    assert name.startswith("synthetic-") and name == models.resolve("synthetic:cpu").name


def test_one_row_per_engine_and_model_and_end_to_end_over_repeated_runs():
    cells = matrix.build(found())
    smol = by(cells, "llamacpp", "SmolLM2")
    (e2e,) = smol.end_to_end
    assert e2e.p.runs == 3 and e2e.p.p50 == 11.0
    assert "p50 11 s · p90 11.8 s · p95 11.9 s (3 runs)" in e2e.text()
    assert "not contenox-runtime" in e2e.what
    long = by(cells, "llamacpp", "synthetic-long")  # the gates' baseline: its own row, never SmolLM2's
    assert long.first_output.p.runs == 3 and long.tiers == {16384, 32768} and long.kv_precision == {"f16"}
    vllm = by(cells, "vllm", "synthetic-cpu")
    assert [f.p.runs for f in vllm.end_to_end] == [1, 1]  # two arms, two configurations: never pooled as runs
    assert "1 run: no spread" in vllm.end_to_end[0].text() and "arm vllm-spec" in vllm.end_to_end[1].what


def test_a_comparison_across_two_models_reads_not_comparable_and_says_why():
    cells = matrix.build(found())
    vllm = by(cells, "vllm", "synthetic-cpu")
    (against,) = [b for b in vllm.baseline if b.startswith("end to end against llamacpp on SmolLM2")]
    assert "not comparable: " in against and "model: synthetic-cpu vs SmolLM2" in against, against


def test_the_quality_smoke_or_no_throughput_claim():
    cells = matrix.build(found())
    assert by(cells, "llamacpp", "SmolLM2").quality == "passed"
    row = by(cells, "vllm", "synthetic-cpu").as_dict()
    assert row["quality"] == "not-run" and "no throughput claim" in row["throughput_claim"]


def test_tensorrt_llm_reads_not_run_with_the_gpu_command_and_every_engine_has_a_row():
    cells = matrix.build(found())
    assert {c.engine for c in cells} == set(matrix.ENGINES)
    (trt,) = [c for c in cells if c.engine == "trtllm"]
    text = matrix.text_row(trt)
    assert trt.status == "not-run" and "tensorrt_llm needs an NVIDIA GPU" in text[8]
    assert "workbench certify gates --engine trtllm" in text[8] and trt.result_class == "failed_no_performance_claim"
    assert "Verification log" in matrix.text_row(trt, reasons=False)[8]


def test_exports_carry_every_figure_with_its_run_count_and_class(tmp_path):
    cells = matrix.build(found())
    as_json, as_csv = matrix.write(cells, tmp_path)
    doc = json.loads(as_json.read_text())
    assert doc["schema"] == matrix.SCHEMA and doc["heads"] == list(matrix.HEADS)
    smol = [r for r in doc["rows"] if r["engine"] == "llamacpp" and r["model"] == "SmolLM2"][0]
    assert smol["end_to_end"][0]["runs"] == 3 and smol["result_class"] == "raw_backend_control"
    rows = list(csv.DictReader(io.StringIO(as_csv.read_text())))
    smol = [r for r in rows if r["engine"] == "llamacpp" and r["model"] == "SmolLM2"][0]
    assert (smol["end_to_end_p50"], smol["end_to_end_runs"]) == ("11.0", "3")
    assert {r["result_class"] for r in rows} == {"raw_backend_control", "failed_no_performance_claim"}


def test_the_cli_prints_and_exports_the_matrix(tmp_path):
    from typer.testing import CliRunner

    from workbench.cli import app

    folder = tmp_path / "run" / "findings"
    for _, f in found():
        findings.write(f, folder)
    out = CliRunner().invoke(app, ["certify", "matrix", str(tmp_path / "run"), "--json", str(tmp_path / "m.json"),
                                   "--csv", str(tmp_path / "m.csv")])
    assert out.exit_code == 0, out.output
    assert "| backend | version |" in out.output and (tmp_path / "m.json").exists() and (tmp_path / "m.csv").exists()
    bad = CliRunner().invoke(app, ["certify", "matrix", str(tmp_path / "nowhere")])
    assert bad.exit_code == 2 and "neither a run folder nor a findings folder" in bad.output


def test_the_gates_command_refuses_what_it_cannot_run_before_anything_runs(tmp_path):
    from typer.testing import CliRunner

    from workbench.cli import app

    run = CliRunner().invoke
    out = str(tmp_path / "f")
    bad = run(app, ["certify", "gates", "--engine", "nope", "--out", out])
    assert bad.exit_code == 2 and "nope" in bad.output
    bad = run(app, ["certify", "gates", "--engine", "vllm", "--tiers", "8k", "--out", out])
    assert bad.exit_code == 2 and "--tiers takes comma-separated positive integers" in bad.output
    bad = run(app, ["certify", "gates", "--engine", "vllm", "--tiers", "16", "--out", out])
    assert bad.exit_code == 2 and "every tier at least twice output_tokens" in bad.output
    bad = run(app, ["certify", "gates", "--engine", "vllm", "--speculation", "never", "--out", out])
    assert bad.exit_code == 2 and "speculation must be auto or always" in bad.output
    baseline = run(app, ["certify", "gates", "--engine", "llamacpp", "--model", "synthetic:tiny", "--out", out])
    assert baseline.exit_code == 2 and "the baseline itself" in baseline.output
    assert not list((tmp_path / "f").glob("*.json"))


# The reviewer's constructions (review of issue 50, items 8, 9, 10): each drives the matrix to mislead, and it does not.


def test_the_newest_quality_smoke_stands_not_the_oldest():
    """Item 8: an older pass and a newer fail read "passed"."""
    old, new = quality("llamacpp", "SmolLM2", "confirmed"), quality("llamacpp", "SmolLM2", "refuted")
    old.created, new.created = "2026-01-01T00:00:00+00:00", "2026-06-01T00:00:00+00:00"
    (c,) = [c for c in matrix.build([(None, old), (None, new)]) if c.engine == "llamacpp"]
    assert c.quality == "failed" and c.quality_said == "Quality smoke refuted"


def test_one_row_per_kv_profile_each_with_its_own_quality_smoke():
    """Item 8: the gates' A2 of the first arm stood for a row listing "f16, q8_0" though q8_0 had none."""
    f = gates_finding("vllm", gpu=False)
    f.evidence["rows"].append({"kind": "serve", "arm": "llamacpp:q8_0", "role": "baseline", "engine": "llamacpp",
                               "tier": 16384, "served": None, "skipped": "its side served it", "kv": "q8_0",
                               "quality": "not-run", "budget_bytes": 8 << 20, "capacity_from": "computed",
                               "next_tier": 32768, "next_tier_kv_bytes": 16 << 20})
    rows = {tuple(c.kv_precision): c for c in matrix.build([(None, f)]) if c.engine == "llamacpp"}
    assert set(rows) == {("f16",), ("q8_0",)}
    assert rows[("f16",)].quality == "passed" and rows[("q8_0",)].quality == "not-run"


def evaltable(runs):
    """An eval-table finding: (repeat, concurrency, AIPerf's TTFT p50 of that run)."""
    from workbench.evaltable.finding import CLAIM, PrefixCaching

    return findings.Finding(
        probe="evaltable.prefix_caching", probe_version=PrefixCaching.version, claims=[CLAIM],
        verdict="inconclusive", summary="eval", engine="vllm-server",
        environment={"engine": "vllm-server", "engine_version": "0.32.0", "model": {"name": "synthetic-cpu"},
                     "hardware": XEON, "workbench_version": "0", "time": "t"},
        params={"model": "synthetic:cpu"}, result_class="raw_backend_control",
        evidence={"rows": [{"kind": "cell", "run": f"r{r}/c{c}", "concurrency": c, "workload": "prefix-1k",
                            "ttft_s": t} for r, c, t in runs]})


def test_aiperf_runs_are_counted_as_runs_never_pooled_across_concurrency():
    """Item 9: concurrency 1 and 2 of one repeat read "p50 2.31 s · p90 2.84 s · p95 2.91 s (2 runs)"."""
    (c,) = [c for c in matrix.build([(None, evaltable([(1, 1, 2.0), (1, 2, 3.0)]))]) if c.engine == "vllm-server"]
    assert c.first_output.p.runs == 1 and c.first_output.p.p50 == 2.0 and "concurrency 1" in c.first_output.what
    (c,) = [c for c in matrix.build([(None, evaltable([(1, 1, 2.0), (1, 2, 3.0), (2, 1, 4.0)]))])
            if c.engine == "vllm-server"]
    assert (c.first_output.p.runs, c.first_output.p.p50) == (2, 3.0)


def test_gates_runs_of_another_identity_or_machine_are_never_pooled():
    """Item 9: gates' timed rows pooled per (engine, model) across runs, machines and output caps."""
    here = gates_finding("vllm", gpu=False, created="2026-12-07T10:00:00+00:00")
    short = gates_finding("vllm", gpu=False, created="2026-12-06T10:00:00+00:00")
    for i in short.environment["gates"]["identities"].values():
        i["output_cap"] = 16
    h200 = gates_finding("vllm", created="2026-12-05T10:00:00+00:00")
    here.environment["hardware"] = short.environment["hardware"] = XEON
    cells = [c for c in matrix.build([(None, here), (None, short), (None, h200)]) if c.engine == "llamacpp"]
    assert len(cells) == 2 and {c.topology.split(" ")[0] for c in cells} == {"Xeon", "1"}  # two machines, two rows
    (xeon,) = [c for c in cells if c.topology.startswith("Xeon")]
    assert xeon.first_output.p.runs == 3  # the newest run's three, not six
    assert xeon.not_pooled == ["3 run(s) of another identity (output_cap 16) not pooled"]
    assert "not pooled" in matrix.text_row(xeon)[8]


def test_loop_times_are_figures_per_workload():
    """Item 9: loop times were pooled across traces and turn counts."""
    a, b = (loop_arm("llamacpp", "llamacpp", "SmolLM2", t, f"2026-12-07T10:0{i}:00+00:00") for i, t in enumerate((10.0, 20.0)))
    b.environment["loop"] = {"trace": "claude-code", "turns": 5, "sha256": "c" * 64}
    (c,) = [c for c in matrix.build([(None, a), (None, b)]) if c.engine == "llamacpp"]
    assert [f.p.runs for f in c.end_to_end] == [1, 1] and any("claude-code (5 turns" in f.what for f in c.end_to_end)


def test_a_finding_settle_rejects_fills_no_row():
    """Item 9: an exploratory TensorRT-LLM finding made on a test double filled its row as raw_backend_control."""
    f = gates_finding()
    f.params["output_tokens"] = 16
    f.environment["test_double"] = "tests/fake_trtllm"
    dropped: list[str] = []
    (trt,) = [c for c in matrix.build([(None, f)], dropped) if c.engine == "trtllm"]
    assert trt.status == "not-run" and trt.result_class == "failed_no_performance_claim"
    assert len(dropped) == 1 and "test double" in dropped[0]
    assert "left out: " in " ".join(matrix.document([trt], dropped)["notes"])
    forged = gates_finding("vllm", gpu=False)
    forged.claim_verdicts["gate.context_tier"] = "refuted"  # its rows say confirmed
    assert matrix.left_out(forged) and "decided again" in matrix.left_out(forged)
    exploratory = gates_finding("vllm", gpu=False, on_target=False)  # measured, off target: its figures stand
    assert matrix.left_out(exploratory) is None


def test_not_comparable_names_the_figures_own_difference_not_an_unrelated_probes_class():
    """Item 10: vLLM against llama.cpp on one model read "result classes differ" because of an unrelated probe."""
    fs = [loop_arm("llamacpp", "llamacpp", "synthetic-cpu", 10.0, "2026-12-07T10:00:00+00:00"),
          loop_arm("vllm", "vllm", "synthetic-cpu", 12.0, "2026-12-07T10:00:00+00:00")]
    micro = loop_arm("vllm", "vllm", "synthetic-cpu", 1.0, "2026-12-07T10:01:00+00:00")
    micro.probe, micro.probe_version, micro.result_class, micro.metrics = "capacity.budget_policy", "4", "microbenchmark", {}
    micro.claims = ["risk.memory_fraction"]
    cells = matrix.build([(None, f) for f in [*fs, micro]])
    (vllm,) = [c for c in cells if c.engine == "vllm"]
    assert vllm.result_class == "microbenchmark + raw_backend_control"  # the row's findings, both classes
    (against,) = [b for b in vllm.baseline if b.startswith("end to end against llamacpp")]
    assert "comparable: the loop's own speed-up" in against and "result classes" not in against, against
