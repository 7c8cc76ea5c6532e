"""The workbench command line: exit codes, clear errors, doctor tells the truth."""

from __future__ import annotations

import json
import subprocess
import sys


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
           "-p", "budget_tokens=256,512", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("refuted:")
    assert "KV capacity" in r.stdout or "measured capacity" in r.stdout
    assert len(list(tmp_path.glob("*.json"))) == 1


def test_not_run_is_not_an_error(tmp_path):
    r = wb("probe", "reuse.per_request_metrics", "--engine", "trtllm", "--model", "synthetic:tiny", "--out", str(tmp_path))
    assert r.returncode == 0 and r.stdout.startswith("not-run:")


def test_bad_input_exits_non_zero_naming_the_fix(tmp_path):
    cases = [
        (("probe", "nope", "--out", str(tmp_path)), "valid probes"),
        (("probe", "capacity.budget_policy", "--engine", "sglang", "--out", str(tmp_path)), "valid engines"),
        (("probe", "capacity.budget_policy", "-p", "bogus=1", "--out", str(tmp_path)), "valid: budget_tokens"),
        (("probe", "capacity.budget_policy", "-p", "budget_tokens", "--out", str(tmp_path)), "key=value"),
        (("probe", "capacity.budget_policy", "--model", "synthetic:nope", "--out", str(tmp_path)), "preset"),
    ]
    for args, message in cases:
        r = wb(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert message in r.stderr and "Traceback" not in r.stderr
    assert not list(tmp_path.glob("*.json"))


def test_findings_command_lists_and_reports_corrupt(tmp_path):
    wb("probe", "surface.contract_mapping", "--out", str(tmp_path))
    (tmp_path / "junk.json").write_text("{")
    r = wb("findings", str(tmp_path))
    assert r.returncode == 0 and "surface.contract_mapping" in r.stdout and "corrupt" in r.stderr
