"""The workbench command line: exit codes, clear errors, doctor tells the truth."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def wb(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True, cwd=cwd)


def test_doctor_json_tells_the_truth_on_this_machine():
    r = wb("doctor", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["engines"]["llamacpp"]["available"] is True
    assert rep["engines"]["trtllm"]["available"] is False
    assert "tensorrt_llm" in rep["engines"]["trtllm"]["reason"]
    assert "llamacpp" in rep["runnable_engines"] and "trtllm" not in rep["runnable_engines"]
    assert rep["gpu"]["available"] is False and rep["gpu"]["reason"]


def test_probe_command_prints_verdict_and_writes_the_finding(tmp_path):
    r = wb("probe", "capacity.budget_policy", "--engine", "llamacpp", "--model", "synthetic:tiny",
           "-p", "tolerance=0.05", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("confirmed:")  # llama.cpp pads 300 tokens to 512: +71 % of the bytes
    assert "KV capacity" in r.stdout or "measured capacity" in r.stdout
    assert len(list(tmp_path.glob("*.json"))) == 1


def test_not_run_is_not_an_error(tmp_path):
    r = wb("probe", "reuse.per_request_metrics", "--engine", "trtllm", "--model", "synthetic:tiny", "--out", str(tmp_path))
    assert r.returncode == 0 and r.stdout.startswith("not-run:")


def test_bad_input_exits_non_zero_naming_the_fix(tmp_path):
    cases = [
        (("probe", "nope", "--out", str(tmp_path)), "valid probes"),
        (("probe", "capacity.budget_policy", "--engine", "sglang", "--out", str(tmp_path)), "valid engines"),
        (("probe", "capacity.budget_policy", "-p", "bogus=1", "--out", str(tmp_path)), "valid: tolerance"),
        (("probe", "capacity.budget_policy", "-p", "tolerance", "--out", str(tmp_path)), "key=value"),
        (("probe", "capacity.budget_policy", "--model", "synthetic:nope", "--out", str(tmp_path)), "preset"),
        (("probe", "retention.pinning_under_pressure", "-p", "pressure=inf", "--out", str(tmp_path)),
         "parameter pressure must be float (finite)"),
        (("probe", "retention.pinning_under_pressure", "-p", "pressure=nan", "--out", str(tmp_path)),
         "parameter pressure must be float (finite)"),
        (("probe", "retention.pinning_under_pressure", "-p", "pressure=-1", "--out", str(tmp_path)),
         "pressure ratios must be positive"),
        (("probe", "capacity.budget_policy", "-m", "synthetic:tiny", "-c", "kv_budget_bytes=100", "--out",
          str(tmp_path)), "kv_budget_bytes=100 is below one token"),
        (("probe", "reuse.per_request_metrics", "-m", "synthetic:tiny", "-c", "bogus_option=1", "--out",
          str(tmp_path)), "bogus_option"),
        (("probe", "surface.contract_mapping", "--model", "synthetic:tiny", "--out", str(tmp_path)), "drop --model"),
        (("probe", "surface.contract_mapping", "--out", str(tmp_path / "x.json")), None),
        (("writeback", "data/blueprint/blueprint.md", "--findings", str(tmp_path / "nowhere"), "--out",
          str(tmp_path / "bp.md")), "no findings folder"),
    ]
    (tmp_path / "x.json").write_text("{}")
    for args, message in cases:
        r = wb(*args, cwd=ROOT)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert (message or "is a file") in r.stderr and "Traceback" not in r.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"] and (tmp_path / "x.json").read_text() == "{}"


def test_findings_of_a_missing_folder_exits_2_naming_it(tmp_path):
    r = wb("findings", str(tmp_path / "nope"))
    assert r.returncode == 2 and "nope" in r.stderr


def test_findings_command_lists_and_reports_corrupt(tmp_path):
    wb("probe", "surface.contract_mapping", "--out", str(tmp_path))
    (tmp_path / "junk.json").write_text("{")
    r = wb("findings", str(tmp_path))
    assert r.returncode == 0 and "surface.contract_mapping" in r.stdout and "corrupt" in r.stderr
