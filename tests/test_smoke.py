"""``workbench doctor --smoke``: not-run here with the reason; every path named, pass or fail, on the double."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from doubles.trtllm_fixture import fake_trt, model_dir  # noqa: F401 - the fixture

from workbench import smoke
from workbench.engine import WorkbenchError

PATHS = ["open with dummy weights", "ensure_prefix with retention", "decode streaming", "perf metrics",
         "kv events drain", "iteration stats drain", "connector log"]


def wb(*args):
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True)


def _tensorrt_llm_here() -> bool:
    import importlib.util

    return importlib.util.find_spec("tensorrt_llm") is not None


@pytest.mark.skipif(_tensorrt_llm_here(), reason="tensorrt_llm is installed here")
def test_smoke_is_not_run_here_with_the_reason(tmp_path):
    d = model_dir(tmp_path)
    r = wb("doctor", "--smoke", "--engine", "trtllm", "--model", str(d))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("smoke       trtllm on") and "not-run — tensorrt_llm is not installed" in r.stdout
    rep = json.loads(wb("doctor", "--smoke", "--model", str(d), "--json").stdout)
    assert rep["status"] == "not-run" and rep["steps"] == [] and "tensorrt_llm" in rep["reason"]


def test_smoke_bad_input_exits_2_naming_the_fix(tmp_path):
    r = wb("doctor", "--smoke", "--engine", "trtllm")
    assert r.returncode == 2 and "--model HF_DIR" in r.stderr
    r = wb("doctor", "--smoke", "--engine", "llamacpp", "--model", "synthetic:tiny")
    assert r.returncode == 2 and "supports --engine trtllm" in r.stderr
    r = wb("doctor", "--smoke", "--model", str(tmp_path / "missing"))
    assert r.returncode == 2 and "unknown model spec" in r.stderr


def test_every_path_passes_on_the_double(fake_trt, tmp_path):
    rep = smoke.run("trtllm", str(model_dir(tmp_path)))
    assert [s.path for s in rep.steps] == PATHS
    assert rep.status == "pass" and rep.exit_code == 0, smoke.render(rep)
    assert all(s.status == "pass" and s.seconds is not None for s in rep.steps)
    init = fake_trt.llmapi.llm.LLM.instances[-1].calls[0][1]
    assert init["load_format"] == "dummy" and init["kv_connector_config"] is not None


def test_a_broken_path_fails_by_name_with_its_exception(fake_trt, tmp_path, monkeypatch):
    def broken(self, timeout=2):
        raise RuntimeError("event queue gone")

    monkeypatch.setattr(fake_trt.llmapi.llm.LLM, "get_stats", broken)
    rep = smoke.run("trtllm", str(model_dir(tmp_path)))  # the open request reads stats too: open fails
    assert rep.status == "fail" and rep.exit_code == 1
    assert rep.steps[0].status == "fail" and "RuntimeError: event queue gone" in rep.steps[0].detail
    assert {s.status for s in rep.steps[1:]} == {"not-run"}
    assert "fail" in smoke.render(rep) and "event queue gone" in smoke.render(rep)


def test_a_path_that_returns_nothing_fails(fake_trt, tmp_path, monkeypatch):
    monkeypatch.setattr(fake_trt.llmapi.llm.LLM, "_take_stats", lambda self: [])
    rep = smoke.run("trtllm", str(model_dir(tmp_path)))
    failed = {s.path: s.detail for s in rep.steps if s.status == "fail"}
    assert list(failed) == ["iteration stats drain"] and "no iteration stats" in failed["iteration stats drain"]


def test_smoke_refuses_other_engines_and_missing_models():
    with pytest.raises(WorkbenchError, match="supports --engine trtllm"):
        smoke.run("vllm", "x")
    with pytest.raises(WorkbenchError, match="needs --model"):
        smoke.run("trtllm", None)
