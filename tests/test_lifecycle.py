"""The lifecycle every command shares (workbench.lifecycle): a temp root per command, removed on every way out, and
a reaper that ends what the command started when it is killed outright. Plain Python children stand in for
engines here (a `sleep` that inherits the command's environment, as every engine process does); tests/test_faults.py
drives the real commands."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from conftest import alive, gone_within
from workbench import lifecycle

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="the reaper reads /proc")

#: A command in a child: it takes the lifecycle, starts a grandchild that outlives it unless ended (its own session,
#: like a server's), prints the root, the grandchild's pid and the temp folder Python uses, then waits.
COMMAND = textwrap.dedent("""
    import os, subprocess, sys, tempfile, time
    from workbench import lifecycle
    with lifecycle.command() as root:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        (root / "made-by-the-command").mkdir()
        outside = tempfile.mkdtemp(dir=os.environ["OUTSIDE"])  # a Ray session's folder, kept short in /tmp
        lifecycle.adopt_folder(outside)
        print(root, child.pid, tempfile.gettempdir(), flush=True)
        time.sleep(float(sys.argv[1]))
""")


def _default_signals() -> None:
    """A child's stop signals as a terminal's command gets them: a runner that started this suite in the background
    (``nohup``, ``&`` in a script) hands its children SIGINT and SIGHUP ignored, and an ignored signal stays ignored
    across exec, as it should for a real command."""
    for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(s, signal.SIG_DFL)


def _command(base: Path, hold_s: float) -> tuple[subprocess.Popen, Path, int]:
    base.mkdir(exist_ok=True)
    (base.parent / "outside").mkdir(exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", COMMAND, str(hold_s)], stdout=subprocess.PIPE, text=True,
                            env=os.environ | {"TMPDIR": str(base), "OUTSIDE": str(base.parent / "outside")},
                            start_new_session=True, preexec_fn=_default_signals)
    root, child, temp = proc.stdout.readline().split()
    assert temp == root and Path(root).parent == base and Path(root).name.startswith(lifecycle.PREFIX)
    return proc, Path(root), int(child)


def test_a_command_ends_what_it_started_and_removes_its_root(tmp_path):
    proc, root, child = _command(tmp_path / "tmp", 0.5)
    assert proc.wait(60) == 0
    assert gone_within(10, [child]) == []
    assert list((tmp_path / "tmp").iterdir()) == [] and list((tmp_path / "outside").iterdir()) == []


def test_the_reaper_ends_what_a_killed_command_started_and_removes_its_root(tmp_path):
    """kill -9 of the command: nothing of it runs its cleanup, yet nothing it started is left."""
    proc, root, child = _command(tmp_path / "tmp", 600)
    assert alive(child) and root.is_dir() and list((tmp_path / "outside").iterdir())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    assert gone_within(30, [child]) == []
    deadline = time.monotonic() + 30
    while root.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list((tmp_path / "tmp").iterdir()) == [] and list((tmp_path / "outside").iterdir()) == []


def test_the_next_command_sweeps_a_root_whose_command_and_reaper_were_both_killed(tmp_path):
    """Were the reaper killed too (kill -9 of every process of the user), the next command to start removes the
    dead root and ends what still runs from it; a root a live command holds, and a folder that is no root, stay."""
    base = tmp_path / "tmp"
    proc, live, child = _command(base, 600)
    dead = base / f"{lifecycle.PREFIX}dead"
    dead.mkdir()
    (dead / lifecycle.LOCK).touch()
    straggler = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                 env=os.environ | {lifecycle.ROOT_ENV: str(dead / "nested")}, start_new_session=True)
    foreign = base / f"{lifecycle.PREFIX}not-ours"  # no lock: not a root this module made, and not empty
    foreign.mkdir()
    (foreign / "kept").touch()
    old = time.time() - 3600
    for folder in (dead, foreign):
        os.utime(folder, (old, old))
    try:
        os.utime(live, (old, old))  # old, but held: its command runs
        assert sorted(p.name for p in lifecycle.sweep(base)) == [dead.name]
        assert straggler.wait(10) == -signal.SIGKILL
        assert not dead.exists() and foreign.is_dir() and live.is_dir() and alive(child)
    finally:
        straggler.kill()
        proc.kill()
        proc.wait()
    assert gone_within(30, [child]) == []


def test_what_must_outlive_a_command_goes_to_the_users_temp_folder(tmp_path, monkeypatch):
    """A finding that could not be written is kept in the user's temp folder, not in the command's root (which goes
    with the command)."""
    from workbench import findings

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.delenv(lifecycle.BASE_ENV, raising=False)
    with lifecycle.temp_root() as root:
        assert tempfile.gettempdir() == str(root) and os.environ["JUPYTER_RUNTIME_DIR"].startswith(str(root))
        assert findings.recovery_dir().parent == tmp_path
    assert list(tmp_path.iterdir()) == [] and tempfile.gettempdir() == str(tmp_path)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_each_stop_signal_unwinds_the_command_once(signum):
    """SIGINT, SIGTERM and SIGHUP raise one Interrupted (a KeyboardInterrupt, so cleanup runs) that names the signal;
    the exit code is 128 + the signal."""
    code = textwrap.dedent(f"""
        import os, signal, sys, time
        from workbench import lifecycle
        lifecycle.handle_signals()
        try:
            os.kill(os.getpid(), {int(signum)})
            time.sleep(5)
        except KeyboardInterrupt as e:
            print(type(e).__name__, e.name, lifecycle.exit_code())
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       preexec_fn=_default_signals)
    assert r.stdout.split() == ["Interrupted", signal.Signals(signum).name, str(128 + signum)], r.stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_command_line_imports_ends_it_in_one_line(signum):
    """`workbench` imports its modules for seconds before a command's handlers are in place: a Ctrl-C then (a user's
    "oops") ends it with one line and 128 + the signal, not an import's traceback. The signal arrives as `typer`, the
    command line's first heavy import, is looked up."""
    code = textwrap.dedent(f"""
        import importlib.abc, os, sys
        class Stop(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "typer":
                    os.kill(os.getpid(), {int(signum)})
                return None
        sys.meta_path.insert(0, Stop())
        sys.argv[0] = os.path.join(os.path.dirname(sys.executable), "workbench")  # as the console script runs it
        from workbench.cli import main
        main()
    """)
    r = subprocess.run([sys.executable, "-c", code, "doctor"], capture_output=True, text=True, timeout=120,
                       preexec_fn=_default_signals)
    name = signal.Signals(signum).name
    assert (r.returncode, r.stderr) == (128 + signum, f"interrupted ({name}): stopped as it started; nothing was "
                                                      "running yet\n")


def test_a_daemon_stopped_by_a_signal_ends_as_it_is_meant_to():
    """A daemon (`workbench cell serve`) that a signal stops keeps its own exit code: the signal is its ordinary
    end (lifecycle.stop_is_ordinary); for any other command it is the signal's 128 + N."""
    code = textwrap.dedent("""
        import os, signal, time
        from workbench import lifecycle
        lifecycle.handle_signals()
        before = lifecycle.stopped_by_signal()
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        except KeyboardInterrupt:
            pass
        other = lifecycle.stopped_by_signal()
        lifecycle.stop_is_ordinary()
        print(before, other, lifecycle.stopped_by_signal())
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       preexec_fn=_default_signals)
    assert r.stdout.split() == ["None", str(int(signal.SIGTERM)), "None"], r.stderr
