"""The run matrix: every bad entry named before anything runs; jobs per engine × model × options × environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench import matrix, runner
from workbench.executors import ExecutorError, Job, Resources, resources_for

FIXTURES = Path(__file__).parent / "fixtures" / "notebooks"


@pytest.mark.parametrize("doc, says", [
    ([1], "must be a mapping"),
    ({"models": ["m"]}, "engines: required"),
    ({"engines": ["nope"]}, "unknown engine 'nope'"),
    ({"engines": ["llamacpp", "llamacpp"]}, "listed twice"),
    ({"engines": ["llamacpp"], "typo": 1}, "typo: unknown key"),
    ({"engines": ["llamacpp"], "cell_options": [3]}, "cell_options: a list of mappings"),
    ({"engines": ["llamacpp"], "environments": {"a": {"pip": "x==1"}}}, "environments.a.pip: a list"),
    ({"engines": ["llamacpp"], "environments": {"a": {"pip": ["x"], "conda": "c"}}}, "exclusive"),
    ({"engines": ["llamacpp"], "environments": {"a": {"docker": "x"}}}, "environments.a.docker: unknown"),
    ({"engines": ["llamacpp"], "environments": {"a b": {}}}, "environments.a b: a name"),
    ({"engines": ["llamacpp"], "resources": {"vllm": {"num_gpus": -1}}}, "resources.vllm.num_gpus"),
    ({"engines": ["llamacpp"], "resources": {"vllm": {"gpus": 1}}}, "only num_cpus and num_gpus"),
    ({"engines": ["llamacpp"], "resources": {"vllm": {"num_cpus": 5000}}}, "num_cpus: 0 or a number from"),
])
def test_each_bad_entry_is_named(doc, says):
    assert any(says in p for p in matrix.check(doc)), matrix.check(doc)


def test_a_good_matrix_has_no_problem():
    assert matrix.check({"engines": ["llamacpp", "vllm"], "models": ["synthetic:tiny"], "params": {"seed": 1},
                         "cell_options": [{}], "environments": {"a": {"pip": ["x==1"]}, "b": {"conda": "c"}},
                         "resources": {"vllm": {"num_cpus": 2}}}) == []


def test_malformed_file_exits_2_naming_every_entry(tmp_path):
    from typer.testing import CliRunner

    from workbench.cli import app

    bad = tmp_path / "m.yaml"
    bad.write_text("engines: [llamacpp, nope]\ncell_options: 3\n")
    r = CliRunner().invoke(app, ["run", "-o", str(tmp_path / "run"), "--matrix", str(bad)])
    assert r.exit_code == 2
    assert "unknown engine 'nope'" in r.output and "cell_options: a list of mappings" in r.output
    assert not (tmp_path / "run" / "run.json").exists()
    (tmp_path / "n.yaml").write_text("engines: [llamacpp\n")
    r = CliRunner().invoke(app, ["run", "-o", str(tmp_path / "run"), "--matrix", str(tmp_path / "n.yaml")])
    assert r.exit_code == 2 and ": not YAML: expected" in r.output


_BOMB = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefg", "bcdefgh")) + "engines: [llamacpp]\nparams: {x: *h}\n"


@pytest.mark.parametrize("executor, text, says", [
    ("local", _BOMB.encode(), "line 2: alias *a: a run matrix takes no YAML aliases"),  # was 52 s, then MemoryError
    ("local", b"engines: [llamacpp]\nparams: {x: " + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
     "line 2: nested deeper than 16 levels"),  # was RecursionError
    ("ray", b"engines: [llamacpp]\n# caf\xe9 (Latin-1)\nmodels: [x]\n", "line 2: not UTF-8 (byte 0xe9)"),
    ("ray", b"engines: [vllm]\nresources:\n  vllm: {num_cpus: .nan}\n",
     "resources.vllm.num_cpus: 0 or a number from 0.0001 to 1024, got nan"),  # Ray: cannot convert float NaN
    ("local", b"engines: [llamacpp]\nparams: {temperature: .inf}\n", "params.temperature: inf is not a value"),
    ("local", b"engines: [llamacpp]\nparams: {n: " + b"9" * 5000 + b"}\n",
     "line 2: Exceeds the limit (4300 digits) for integer string conversion: value has 5000 digits (nothing"),
], ids=["alias-bomb", "deep-nesting", "latin-1", "nan-cpus", "inf-param", "5000-digits"])
def test_a_bad_matrix_file_is_one_line_exit_2_before_anything_runs(tmp_path, monkeypatch, executor, text, says):
    """The real CLI; nothing runs (no run folder, no notebook, no Ray head: run_batch is never reached)."""
    import time

    from typer.testing import CliRunner

    from workbench.cli import app

    monkeypatch.setattr(runner, "run_batch", lambda *a, **k: pytest.fail("the matrix ran"))
    (tmp_path / "m.yaml").write_bytes(text)
    start = time.perf_counter()
    r = CliRunner().invoke(app, ["run", "-o", str(tmp_path / "run"), "--matrix", str(tmp_path / "m.yaml"),
                                 "--executor", executor])
    took = time.perf_counter() - start
    assert (r.exit_code, r.output.strip().count("\n"), "Traceback" in r.output) == (2, 0, False), r.output
    assert f"m.yaml, {says}" in r.output or f"m.yaml: fix {says}" in r.output, r.output
    # a guard, not a speed test: an expanded bomb takes minutes; 30 s leaves room for a loaded machine
    assert took < 30 and not (tmp_path / "run").exists()


def test_a_named_pipe_or_a_folder_as_matrix_is_refused_at_once(tmp_path):
    """A FIFO as ``--matrix`` waited for a writer forever (issue 52); a folder is no matrix either. The real CLI in a
    child, so that a hang fails this test instead of stalling the suite."""
    import os
    import subprocess
    import sys

    os.mkfifo(tmp_path / "pipe.yaml")
    for given, what in ((tmp_path / "pipe.yaml", "a named pipe"), (tmp_path, "a folder")):
        r = subprocess.run([sys.executable, "-m", "workbench.cli", "run", "-o", str(tmp_path / "run"), "--matrix",
                            str(given)], capture_output=True, text=True, timeout=120)
        assert (r.returncode, r.stderr.count("\n"), "Traceback" in r.stderr) == (2, 1, False), r.stderr
        assert f"--matrix {given} is not a regular file ({what})" in r.stderr
    assert not (tmp_path / "run").exists()


def test_a_cell_option_value_in_a_matrix_is_refused_before_anything_runs(tmp_path):
    """A cell option its engine's class refuses, in a matrix as with ``-p cell_options=``: exit 2 before a kernel
    starts (it started one and exited 1, issue 52)."""
    from typer.testing import CliRunner

    from workbench.cli import app

    (tmp_path / "m.yaml").write_text("engines: [llamacpp]\nnotebooks: [retention]\ncell_options: [{}, {threads: abc}]\n")
    r = CliRunner().invoke(app, ["run", "-o", str(tmp_path / "run"), "--matrix", str(tmp_path / "m.yaml")])
    assert (r.exit_code, r.output.strip().count("\n")) == (2, 0), r.output
    assert "llamacpp cell option threads must be an integer or null, got 'abc'" in r.output
    assert not (tmp_path / "run").exists()


def test_jobs_cover_the_axes_and_only_varying_axes_name_the_folder(tmp_path):
    m = matrix.Matrix(("llamacpp", "trtllm"), ("synthetic:tiny",), ("writes_finding",), {"seed": 2}, ({},),
                      {"rel-1": {"pip": ["p==1"]}, "rel-2": {"pip": ["p==2"]}}, {"trtllm": Resources(1, 1)})
    jobs = m.jobs(tmp_path, FIXTURES)
    assert sorted(j.planned.key for j in jobs) == ["llamacpp/rel-1/writes_finding", "llamacpp/rel-2/writes_finding",
                                                   "trtllm/rel-1/writes_finding", "trtllm/rel-2/writes_finding"]
    assert {j.planned.output for j in jobs} >= {"notebooks/trtllm/rel-2/writes_finding.ipynb"}
    assert all(j.planned.parameters["seed"] == 2 for j in jobs)
    assert {j.planned.key: j.resources.num_gpus for j in jobs}["trtllm/rel-1/writes_finding"] == 1
    assert {j.runtime_env["pip"][0] for j in jobs if j.environment == "rel-2"} == {"p==2"}
    with pytest.raises(matrix.MatrixError, match="no selected notebook takes parameter"):
        matrix.Matrix(("llamacpp",), cell_options=({"n_ctx": 64},), notebooks=("writes_finding",)).jobs(tmp_path, FIXTURES)


@pytest.mark.parametrize("engine, options, gpus", [
    ("trtllm", {}, 1), ("trtllm-serve", {}, 1), ("llamacpp", {"gpu_layers": 99}, 1), ("llamacpp", {}, 0),
    ("llamacpp-server", {"gpu_layers": 0}, 0), ("vllm", {}, 0)])
def test_resources_rule(engine, options, gpus):
    assert resources_for(engine, options) == Resources(1.0, float(gpus))


@pytest.mark.parametrize("gpu", [False, True])
def test_only_a_gpu_only_engine_without_a_gpu_times_nothing(monkeypatch, gpu):
    """TensorRT-LLM's jobs can only report not-run where NVML sees no GPU; every other engine runs on the CPU."""
    from workbench import executors, nvml

    monkeypatch.setattr(nvml, "read", lambda: {"available": gpu})
    assert [e for e in ("trtllm", "trtllm-serve", "llamacpp", "vllm") if executors.untimed_here(e)] == \
        ([] if gpu else ["trtllm", "trtllm-serve"])


def test_the_local_executor_refuses_environments_before_running(tmp_path):
    (p,) = runner.plan(tmp_path, "llamacpp", "synthetic:tiny", {}, ["writes_finding"], FIXTURES)
    with pytest.raises(ExecutorError, match="--executor ray"):
        runner.LocalExecutor().check([Job(p, environment="a", runtime_env={"pip": ["x"]})])
