"""``make run`` names the loop arms of its llama.cpp pass (Makefile, ``LLAMACPP_RUN``) to fit its five minutes: the
names it gives must still hold the gate's whole baseline (a llama.cpp arm with prefix reuse and llama.cpp's own
speculation: ``gate.BASELINE``), every llama.cpp arm that could be the best one (every arm with reuse), and the subject,
so a smaller ``make run`` never weakens the baseline the subject is held to. Read from the Makefile as make expands it."""

import re
import shutil
import subprocess

import pytest

from workbench.files import REPO_ROOT
from workbench.loop import arms as _arms
from workbench.loop import gate, parse_arms

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make here")


def _make_run_arms() -> list[str]:
    r = subprocess.run(["make", "-n", "-o", ".venv/.installed", "run", "RUN=runs/_test_make_run_arms"], cwd=REPO_ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    found = re.findall(r"-p llamacpp:arms=(\S+)", r.stdout)
    assert len(found) == 1, r.stdout
    return parse_arms(found[0])


def test_make_runs_llamacpp_arms_hold_the_whole_baseline_every_reuse_arm_and_the_subject():
    named = _make_run_arms()
    specs = [_arms.get(n) for n in named]
    llama = [s for s in specs if _arms.is_llamacpp(s.name)]
    assert {(s.reuse, s.speculation) for s in llama} >= set(gate.BASELINE)
    every_reuse_arm = {n for n in _arms.names() if _arms.is_llamacpp(n) and _arms.get(n).reuse}
    assert every_reuse_arm <= set(named)
    assert gate.GateRule().subject in named
