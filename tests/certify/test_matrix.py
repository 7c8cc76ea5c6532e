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

from .helpers import gates_finding


def loop_arm(engine, arm, model, loop_time, created):
    return findings.Finding(
        probe=f"loop.{arm}", claims=["gate.turn_time"], verdict="inconclusive", summary="reference arm", engine=engine,
        environment={"engine": engine, "engine_version": "0.3.36", "model": {"name": model, "sha256": "b" * 64},
                     "hardware": {"summary": "Xeon (2 cores); no GPU", "cpu": {"model": "Xeon", "cores": 2}},
                     "workbench_version": "0", "time": created},
        params={"arm": arm, "model": model, "context_tokens": 8192}, created=created,
        metrics={"loop_time_s": {"value": loop_time, "unit": "s", "source": "timed"}}, result_class="raw_backend_control")


def quality(engine, model, verdict):
    return findings.Finding(probe="quality.smoke", claims=["cert.quality_smoke"], verdict=verdict,
                            summary=f"Quality smoke {verdict}", engine=engine,
                            environment={"engine": engine, "engine_version": "x", "model": {"name": model},
                                         "hardware": {}, "workbench_version": "0", "time": "t"},
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
