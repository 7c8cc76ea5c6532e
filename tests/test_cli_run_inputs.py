"""``workbench run`` and ``probe`` given bad input (issue 40): each is refused before any kernel starts. Every row runs
the real CLI into an empty folder and expects exit 2, a one-line message, no traceback, and the folder still empty
(no lock, no executed notebook, no log, no finding, no report: a notebook that ran would have left all of them)."""

from __future__ import annotations

import subprocess
import sys

import pytest

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
    ("a probe on an engine not installed, with an unknown model",
     ["probe", "retention.pinning_under_pressure", "--engine", "trtllm", "-m", "smollm3"],
     "unknown model spec 'smollm3'"),
    ("a probe given papermill's two-token -p", ["probe", "capacity.budget_policy", "-p", "tolerance", "0.1"],
     "write -p tolerance=0.1"),
]


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """Every row's command, run side by side (each is a CLI start-up, most of its time importing)."""
    out = {c[0]: tmp_path_factory.mktemp("run") for c in CASES}
    procs = {case: subprocess.Popen([sys.executable, "-m", "workbench.cli", *args, "--out", str(out[case])],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for case, args, _ in CASES}
    return {case: (p, *p.communicate(timeout=300), out[case]) for case, p in procs.items()}


@pytest.mark.parametrize("case, says", [(c[0], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_exits_2_before_anything_runs(case, says, ran):
    proc, stdout, stderr, out = ran[case]
    assert proc.returncode == 2, (stdout, stderr)
    assert "Traceback" not in stderr + stdout
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], stderr
    assert not list(out.iterdir())  # nothing written, not even the writer's lock


def test_version_names_the_package_and_the_commit():
    """``--version`` before (or without) a command: the installed package's version and this checkout's commit."""
    from importlib import metadata
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    r = subprocess.run([sys.executable, "-m", "workbench.cli", "--version", "run"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"workbench {metadata.version('workbench')}" + (f" (commit {head}" if head else ""))
