"""Engine crashes are contained: the caller lives, and learns the signal, the step and the log tail."""

from __future__ import annotations

import ctypes
import gc
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from conftest import TINY, descendants, gone_within, interruptible
from workbench import isolate
from workbench.engine import ContextOverflow, WorkbenchError


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


def _overflow() -> None:
    raise ContextOverflow(32_000_001, 4096)


def test_an_exception_comes_back_as_itself():
    with pytest.raises(WorkbenchError, match="bad input, named"):
        isolate.call(_refuse)


def test_an_error_whose_init_takes_other_arguments_comes_back_as_itself():
    """ContextOverflow(requested, limit) came back as a ChildError carrying the child's traceback (issue 36)."""
    with pytest.raises(ContextOverflow) as raised:
        isolate.call(_overflow)
    assert (raised.value.requested, raised.value.limit, str(raised.value)) == (
        32_000_001, 4096, "context overflow: 32000001 tokens requested, limit is 4096")


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


# --------------------------------------------------------------------------- issue 23: no orphans


def _spawn_and_hang(pidfile: str) -> None:
    """Engine work that starts a process of its own (as vLLM starts EngineCore) and makes a temp folder (as the
    vLLM cell makes wbv-* for EngineCore's sockets), then runs on and on."""
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    tmp = os.path.dirname(os.readlink("/proc/self/fd/2"))  # the log file isolate gave this child
    made = tempfile.mkdtemp(prefix="wbv-")
    Path(pidfile + ".tmp").write_text(json.dumps({"child": os.getpid(), "grandchild": grandchild.pid, "tmp": tmp,
                                                  "made": made}))
    os.replace(pidfile + ".tmp", pidfile)
    time.sleep(120)


def _spawn_and_hold_the_gil(pidfile: str) -> None:
    """:func:`_spawn_and_hang`, but running on in C code that never lets the GIL go (an engine's call can): a
    catastrophically backtracking regex, which takes longer than any test."""
    import re

    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    tmp = os.path.dirname(os.readlink("/proc/self/fd/2"))
    Path(pidfile + ".tmp").write_text(json.dumps({"child": os.getpid(), "grandchild": grandchild.pid, "tmp": tmp,
                                                  "made": tmp}))
    os.replace(pidfile + ".tmp", pidfile)
    re.match(r"(a+)+$", "a" * 64 + "b")


def _parent_calling_spawn_and_hang(tmp_path, work: str = "_spawn_and_hang") -> tuple[subprocess.Popen, dict]:
    pidfile = tmp_path / "pids.json"
    code = ("import sys, test_isolate; from workbench import isolate; "
            f"isolate.call(test_isolate.{work}, sys.argv[1])")
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.Popen([sys.executable, "-c", code, str(pidfile)], env=env, stderr=subprocess.PIPE, text=True,
                         preexec_fn=interruptible)
    deadline = time.monotonic() + 60
    while not pidfile.exists():
        assert p.poll() is None and time.monotonic() < deadline, p.stderr.read() if p.poll() is not None else "slow"
        time.sleep(0.1)
    return p, json.loads(pidfile.read_text())


def test_kill_9_of_the_parent_ends_the_child_what_it_started_and_its_temp_folder(tmp_path):
    p, pids = _parent_calling_spawn_and_hang(tmp_path)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert gone_within(5, [pids["child"], pids["grandchild"]]) == []
    assert not Path(pids["tmp"]).exists() and not Path(pids["made"]).exists()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_the_child_dies_with_its_parent_while_c_code_holds_the_gil(tmp_path, sig):
    """The watcher is a process of its own: a watcher thread never ran while the child's C code held the GIL,
    and an engine child outlived a SIGTERM'd CLI by 12 minutes and more."""
    p, pids = _parent_calling_spawn_and_hang(tmp_path, "_spawn_and_hold_the_gil")
    time.sleep(0.5)  # inside the regex now
    os.kill(p.pid, sig)
    p.wait(timeout=30)
    assert gone_within(5, [pids["child"], pids["grandchild"]]) == []
    assert not Path(pids["tmp"]).exists()


def test_sigint_stops_the_call_at_once_and_ends_its_processes(tmp_path):
    p, pids = _parent_calling_spawn_and_hang(tmp_path)
    t0 = time.monotonic()
    os.kill(p.pid, signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert time.monotonic() - t0 < 5 and "KeyboardInterrupt" in err
    assert gone_within(1, [pids["child"], pids["grandchild"]]) == []
    assert not Path(pids["tmp"]).exists()


def test_sigint_to_a_probe_exits_130_promptly_with_no_finding_and_no_process_left(tmp_path):
    out = tmp_path / "findings"
    p = subprocess.Popen([sys.executable, "-m", "workbench.cli", "probe", "reuse.per_request_metrics", "--model", TINY,
                          "-p", "repeats=200", "--out", str(out)], stderr=subprocess.PIPE, text=True,
                         preexec_fn=interruptible)
    deadline = time.monotonic() + 60
    while not descendants(p.pid):
        assert p.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    time.sleep(2)  # the child is inside the experiment now
    below = descendants(p.pid)
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=30)
    assert p.returncode == 130 and time.monotonic() - t0 < 5
    assert gone_within(2, below) == []
    assert not list(out.glob("*.json"))


def _seen() -> dict:
    return {"preloaded": "colorsys" in sys.modules, "env": os.environ.get("WB_ISOLATE_PROBE"), "cwd": os.getcwd(),
            "frozen": gc.get_freeze_count()}


def test_a_preloaded_child_starts_with_the_modules_and_the_callers_env_and_cwd(tmp_path):
    """A forkserver imports the engine once per process; each child still gets the environment and working folder
    of its call (not of the forkserver's start), and a crash in it is still reported with its signal. What the
    forkserver imported is frozen (a collection in the child must not walk it, _forkserver_frozen)."""
    code = textwrap.dedent(f"""
        import json, os, sys
        import test_isolate
        from workbench import isolate
        first = isolate.call(test_isolate._seen, preload=("colorsys",))
        os.environ["WB_ISOLATE_PROBE"] = "later"
        os.chdir({str(tmp_path)!r})
        second = isolate.call(test_isolate._seen, preload=("colorsys",))
        spawned = isolate.call(test_isolate._seen)
        try:
            isolate.call(test_isolate._segfault, preload=("colorsys",))
        except isolate.EngineCrashed as e:
            crash = e.signum
        print(json.dumps([first, second, spawned, crash]))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)})
    assert r.returncode == 0, r.stderr
    first, second, spawned, crash = json.loads(r.stdout.splitlines()[-1])
    assert first["preloaded"] and second["preloaded"] and not spawned["preloaded"]
    assert first["frozen"] > 1000 and spawned["frozen"] == 0
    assert first["env"] is None and second["env"] == "later" and second["cwd"] == str(tmp_path)
    assert crash == signal.SIGSEGV


# --------------------------------------------------------------------------- a forkserver shared by a batch


def _lineage() -> dict:
    print("child's own stdout line", flush=True)
    return {"ppid": os.getppid(), "preloaded": "colorsys" in sys.modules, "env": os.environ.get("WB_ISOLATE_PROBE")}


_KERNEL = textwrap.dedent("""
    import json, os, sys
    import test_isolate
    from workbench import isolate
    os.environ["WB_ISOLATE_PROBE"] = "the kernel's"
    seen = isolate.call(test_isolate._lineage, preload=tuple(sys.argv[1].split(",")))
    try:
        isolate.call(test_isolate._segfault, preload=tuple(sys.argv[1].split(",")))
    except isolate.EngineCrashed as e:
        seen["crash"] = e.signum
    print(json.dumps(seen))
""")


def _kernel(shared: str, preload: str) -> tuple[dict, str]:
    """A process started by the driver as a notebook's kernel is (it inherits ``shared``): what its child saw."""
    env = os.environ | {isolate.SHARED_ENV: shared, "PYTHONPATH": os.pathsep.join(sys.path)}
    r = subprocess.run([sys.executable, "-c", _KERNEL, preload], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1]), r.stdout


def test_a_forkserver_shared_by_a_driver_forks_its_processes_children_with_their_env_stdout_and_crashes(tmp_path):
    """``workbench run`` starts one forkserver per engine and its kernels fork their probes' children from it:
    each child is the shared server's (not a forkserver of the kernel's own), with the kernel's environment and
    stdout, and a crash in it is still reported with its signal. A kernel asking for other modules starts its own."""
    log = tmp_path / "forkserver.log"
    with isolate.shared_forkserver(("colorsys",), log) as shared:
        server = json.loads(shared)["pid"]
        first, out1 = _kernel(shared, "colorsys")
        second, _ = _kernel(shared, "colorsys")
        other, _ = _kernel(shared, "json")
    assert first["ppid"] == second["ppid"] == server and other["ppid"] != server
    assert first["preloaded"] and first["env"] == "the kernel's" and first["crash"] == second["crash"] == signal.SIGSEGV
    assert "child's own stdout line" in out1 and "child's own stdout line" not in log.read_text()
    assert gone_within(5, [server]) == [] and not os.path.exists(json.loads(shared)["address"])


def test_a_shared_forkserver_says_when_its_imports_are_done_or_that_it_died(tmp_path, monkeypatch):
    """The driver waits on it before timed work: ready once the last preload is imported, and a server that
    died importing is reported at once, not waited on forever."""
    (tmp_path / "slow_import.py").write_text("import time\ntime.sleep(2)\n")
    (tmp_path / "dies_at_import.py").write_text("import os\nos._exit(3)\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *sys.path]))  # the server's own sys.path
    (tmp_path / "a.log.ready").touch()  # left by a driver killed outright: says nothing of a new server
    with isolate.shared_forkserver(("slow_import",), tmp_path / "a.log") as shared:
        ready = Path(json.loads(shared)["ready"])
        assert ready.parent == tmp_path  # beside its log, never in /tmp
        assert not ready.exists()  # the import sleeps for 2 s
        assert isolate.wait_ready(shared) is True and ready.exists()
    assert not ready.exists()
    with isolate.shared_forkserver(("dies_at_import",), tmp_path / "b.log") as shared:
        t0 = time.monotonic()
        assert isolate.wait_ready(shared) is False and time.monotonic() - t0 < 30


def test_a_shared_forkserver_dies_with_its_driver(tmp_path):
    code = ("import sys, time; from pathlib import Path; from workbench import isolate\n"
            "with isolate.shared_forkserver(('colorsys',), Path(sys.argv[1])) as s:\n"
            "    print(s, flush=True); time.sleep(120)")
    p = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "fs.log")], stdout=subprocess.PIPE, text=True)
    server = json.loads(p.stdout.readline())["pid"]
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert gone_within(5, [server]) == []
