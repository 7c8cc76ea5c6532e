"""``make lab`` after ``make run`` (issue 40 item 6): JupyterLab at the checkout's root, so the run folder, its
executed notebooks and its report are in the file browser, open on the run's executed summary notebook (whose
``out`` is that run's findings); before any run, on the committed summary. Asked of make with ``-n``: nothing runs."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from workbench.files import REPO_ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make here")


def _lab_line(run: str) -> str:
    r = subprocess.run(["make", "-n", "lab", f"RUN={run}"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    text = r.stdout.replace("\\\n", " ")
    return next(line for line in text.splitlines() if "jupyter lab" in line)


def test_lab_opens_the_last_runs_executed_summary_at_the_checkouts_root():
    executed = REPO_ROOT / "runs" / "_test_make_lab" / "notebooks" / "vllm" / "90_summary.ipynb"
    executed.parent.mkdir(parents=True, exist_ok=True)
    try:
        executed.write_text("{}")
        line = _lab_line("runs/_test_make_lab")
    finally:
        shutil.rmtree(REPO_ROOT / "runs" / "_test_make_lab")
    assert "--ServerApp.root_dir=. " in line and line.endswith("runs/_test_make_lab/notebooks/vllm/90_summary.ipynb")


def test_lab_before_any_run_opens_the_committed_summary():
    line = _lab_line("runs/_no_such_run")
    assert "--ServerApp.root_dir=. " in line and line.endswith(" notebooks/90_summary.ipynb")
