"""Engine crashes are contained: the caller lives, and learns the signal, the step and the log tail."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from conftest import TINY
from workbench import isolate
from workbench.contract import WorkbenchError


def _segfault() -> None:
    os.write(2, b"engine: about to touch address 0\n")
    ctypes.string_at(0)


def _answer(x: int) -> int:
    return x * 2


def _refuse() -> None:
    raise WorkbenchError("bad input, named")


def _hang() -> None:
    import time

    time.sleep(60)


def test_a_result_comes_back():
    assert isolate.call(_answer, 21) == 42


def test_an_exception_comes_back_as_itself():
    with pytest.raises(WorkbenchError, match="bad input, named"):
        isolate.call(_refuse)


def test_a_segfault_is_reported_with_signal_and_log_tail():
    with pytest.raises(isolate.EngineCrashed) as e:
        isolate.call(_segfault)
    assert e.value.signum == signal.SIGSEGV
    assert "engine crashed with SIGSEGV (signal 11)" in str(e.value)
    assert e.value.log_tail[-1] == "engine: about to touch address 0"


def test_a_child_that_does_not_answer_is_killed():
    with pytest.raises(isolate.EngineTimeout, match="within 1 s"):
        isolate.call(_hang, timeout=1)


def test_crash_step_names_the_innermost_workbench_calls():
    log = textwrap.dedent('''\
        llama: decoding
        Fatal Python error: Segmentation fault

        Current thread 0x00007f (most recent call first):
          File "/x/sitecustomize.py", line 5 in crashing
          File "/x/src/workbench/cells/llamacpp.py", line 352 in _eval
          File "/x/src/workbench/cells/llamacpp.py", line 401 in ensure_prefix
          File "/x/src/workbench/probes/reuse.py", line 60 in run
          File "/x/src/workbench/probes/__init__.py", line 200 in run
        ''')
    assert isolate.crash_step(log) == ("_eval (workbench/cells/llamacpp.py:352) ← ensure_prefix "
                                       "(workbench/cells/llamacpp.py:401) ← run (workbench/probes/reuse.py:60)")
    assert isolate.crash_step("no traceback") is None


def test_a_crash_inside_llama_cpp_fails_the_probe_command_without_a_finding(tmp_path, crashing_llama):
    out = tmp_path / "findings"
    r = subprocess.run([sys.executable, "-m", "workbench.cli", "probe", "reuse.per_request_metrics",
                        "--model", TINY, "--out", str(out)], capture_output=True, text=True, env=crashing_llama)
    assert r.returncode == isolate.CRASH_EXIT_CODE, r.stderr
    assert "engine crashed with SIGSEGV (signal 11) during _eval (workbench/cells/llamacpp/llama.py" in r.stderr
    assert "last lines of the engine's log" in r.stderr and "no finding was written" in r.stderr
    assert not out.exists() or not list(out.glob("*.json"))
