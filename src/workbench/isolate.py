"""Run engine work in a child process, so that an engine crash is reported instead of killing the caller.

A segfault inside llama.cpp (e.g. llama.cpp #20824 on AMX CPUs) would otherwise take down the CLI
without a word, or a notebook's kernel with papermill's bare "Kernel died". Here the child's stderr,
where the engine's log and Python's ``faulthandler`` traceback go, is kept in a file; when the child
dies by a signal, :class:`EngineCrashed` names the signal, the workbench function that was running
(read from the faulthandler traceback) and the last lines of that log. Nothing the child was writing
is kept: results come back to the parent only on success.

A child is spawned fresh, or, where the caller names the modules its work imports anyway (``preload``: an
engine such as vLLM takes ~15 s to import on 2 cores), forked from a multiprocessing forkserver that imported
them once for this process: every later child starts with them loaded. The forkserver ends with this process.
A batch of processes (``workbench run``'s notebook kernels) can share one: :func:`shared_forkserver` starts it
in the batch's driver and names it in the environment the kernels inherit, so the import is paid once per run,
not once per notebook. Either way the child gets the caller's environment, working directory and stdout as
they are at the call.

No child outlives its parent. The child leads a process group of its own, which the engine's processes
(vLLM's ``EngineCore`` and workers) join; the parent kills that group on every way out of :func:`call`
(answer, exception, timeout, Ctrl-C). When the parent dies without a way out (SIGKILL), its end of a pipe
the child watches closes, and the child removes its temp folder and kills its own group. A pipe rather
than ``PR_SET_PDEATHSIG``: the signal would kill the child alone, leaving the engine's processes behind. That
folder is the child's temp folder (``TMPDIR``): what the child and the engine's processes make in temp (vLLM's
``wbv-*`` socket folder) goes with it, however the parent ended.
"""

from __future__ import annotations

import contextlib
import faulthandler
import multiprocessing
import multiprocessing.connection
import os
import pickle
import re
import shutil
import signal
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from . import envvars, lifecycle
from .engine import WorkbenchError

#: ``workbench probe`` and ``workbench doctor`` exit with this code when the engine crashed (2 is bad input).
CRASH_EXIT_CODE = 3
TAIL_LINES = 12
_FRAME = re.compile(r'File "(?:.*/)?workbench/(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\w+)')


class EngineCrashed(WorkbenchError):
    """The child process running engine work died by a signal (or exited without a result)."""

    def __init__(self, signum: int | None, exitcode: int | None, step: str | None, log_tail: list[str]) -> None:
        self.signum, self.exitcode, self.step, self.log_tail = signum, exitcode, step, log_tail
        super().__init__(self.headline())

    def headline(self) -> str:
        if self.signum is not None:
            try:
                name = signal.Signals(self.signum).name
            except ValueError:
                name = f"signal {self.signum}"
            what = f"engine crashed with {name} (signal {self.signum})"
        else:
            what = f"engine process exited with code {self.exitcode} without a result"
        return what + (f" during {self.step}" if self.step else "")

    def __str__(self) -> str:
        tail = "\n".join(f"  | {line}" for line in self.log_tail)
        return self.headline() + (f"\nlast lines of the engine's log:\n{tail}" if tail else "")

    def __reduce__(self):  # picklable, so that a nested caller can pass it on
        return (EngineCrashed, (self.signum, self.exitcode, self.step, self.log_tail))


@dataclass(frozen=True)
class _Failure:
    """An ordinary exception in the child: re-raised in the parent as it was, or described when unpicklable."""

    exc: BaseException | None
    kind: str
    message: str
    trace: str


class EngineTimeout(WorkbenchError):
    """The child did not answer within its time limit and was killed."""

    def __init__(self, seconds: float, log_tail: list[str]) -> None:
        self.seconds, self.log_tail = seconds, log_tail
        tail = "\n".join(f"  | {line}" for line in log_tail)
        super().__init__(f"engine did not answer within {seconds:g} s and was killed"
                         + (f"\nlast lines of the engine's log:\n{tail}" if tail else ""))


class ChildError(WorkbenchError):
    """An exception from the child that could not be sent back as itself."""


#: seconds a child that answered gets to exit by itself (its engine shutting down) before its group is killed
EXIT_GRACE_S = 30.0


def _die_with_parent(alive, tmp: Path) -> None:
    """Once the parent's end of ``alive`` closes (the parent is gone, however it died), remove the temp folder and
    kill this process group: the child, and every engine process it started, instead of a result nobody reads.

    The watcher is a forked process of the group, not a thread: a thread waits for the GIL, which C code (an
    engine's call, a regex) can hold for minutes, so an isolated child outlived a SIGTERM'd CLI by 12 min and more.
    It keeps only ``alive`` open: a copy of the answer pipe would hide the child's death from the parent."""
    fd = alive.fileno()
    if os.fork():
        alive.close()
        return
    try:  # the watcher: nothing but the wait, the removal and the kill, then out without Python's exit handlers
        os.closerange(0, fd)
        os.closerange(fd + 1, _MAX_FD)
        with contextlib.suppress(OSError):
            os.read(fd, 1)  # blocks until the parent's end closes (nothing is ever sent)
        shutil.rmtree(tmp, ignore_errors=True)
        os.killpg(0, signal.SIGKILL)
    finally:
        os._exit(0)


_MAX_FD = os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 65536


def _kill_group(proc) -> None:
    """SIGKILL the child's process group (the child and what it started); nothing when it is already gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # the group outlives a reaped leader while its members live
        return
    if proc.exitcode is None:  # not reaped yet, so its pid is still its own: it died before leading a group
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)


def _child(conn, alive, stdout, log_path: str, env: dict, cwd: str, fn: Callable, args: tuple, kwargs: dict) -> None:
    os.environ.clear()  # a forkserver started earlier holds the environment of then, not of this call
    os.environ.update(env)
    os.chdir(cwd)
    os.setpgid(0, 0)  # a group of its own: the parent (or the watcher) ends the engine's processes with it
    tmp = os.path.dirname(log_path)
    os.environ["TMPDIR"] = tempfile.tempdir = tmp  # the engine's processes' temp too: the watcher removes it
    _die_with_parent(alive, Path(tmp))
    os.dup2(stdout.fileno(), 1)  # the caller's stdout (a notebook's log), not the one a shared forkserver has
    stdout.close()
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 2)  # the engine's C-level log and faulthandler's traceback land in the log file
    os.environ["WORKBENCH_LLAMA_VERBOSE"] = "1"
    faulthandler.enable(all_threads=False)
    try:
        conn.send(("ok", fn(*args, **kwargs)))
    except BaseException as e:  # noqa: BLE001 - every failure goes back to the parent
        failure = _Failure(e, type(e).__name__, str(e), traceback.format_exc())
        try:
            pickle.loads(pickle.dumps(e))  # an exception whose __init__ takes other arguments cannot come back
        except Exception:  # noqa: BLE001
            failure = _Failure(None, failure.kind, failure.message, failure.trace)
        conn.send(("error", failure))
    conn.close()


def crash_step(log: str, depth: int = 3) -> str | None:
    """The innermost workbench calls in faulthandler's traceback (most recent first), e.g.
    ``_eval (workbench/cells/llamacpp.py:352) ← ensure_prefix (…)``."""
    start = log.rfind("Fatal Python error")
    frames = [f"{m['func']} (workbench/{m['file']}:{m['line']})"
              for m in _FRAME.finditer(log, start if start >= 0 else 0)]
    return " ← ".join(frames[:depth]) or None


def log_tail(log: str, n: int = TAIL_LINES) -> list[str]:
    """The engine's last lines before faulthandler's traceback (which :func:`crash_step` summarizes)."""
    cut = log.rfind("Fatal Python error")
    return [line for line in log[: cut if cut >= 0 else None].splitlines() if line.strip()][-n:]


_PRELOADED: tuple[str, ...] | None = None  # what this process's forkserver imports, once it is set
#: Names the forkserver a batch's driver shares with the processes it starts: ``{"address", "preload"}`` (JSON).
SHARED_ENV = "WORKBENCH_FORKSERVER"
#: Where a shared forkserver's own output goes (read by :mod:`workbench._forkserver_guard` as it starts).
SHARED_LOG_ENV = "WORKBENCH_FORKSERVER_LOG"
#: The file a shared forkserver creates once its imports are done (:mod:`workbench._forkserver_frozen`).
SHARED_READY_ENV = "WORKBENCH_FORKSERVER_READY"


def _modules(preload: Sequence[str]) -> list[str]:
    """What a forkserver for ``preload`` imports: the parent-death guard first, the freeze last."""
    return ["workbench._forkserver_guard", __name__, *preload, "workbench._forkserver_frozen"]


def _context(preload: Sequence[str]) -> Any:
    """The forkserver when ``preload`` is what it imports (the first such call sets it: the shared one when the
    environment names one for exactly ``preload``), else a fresh spawn."""
    global _PRELOADED
    want = tuple(dict.fromkeys(preload))
    if not want:
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    if _PRELOADED is None:
        if not _join_shared(want):
            ctx.set_forkserver_preload(_modules(want))
        _PRELOADED = want
    return ctx if want == _PRELOADED else multiprocessing.get_context("spawn")


def _join_shared(want: tuple[str, ...]) -> bool:
    """Point this process's forkserver client at the shared forkserver, when the environment names one that
    imported exactly ``want``. Python 3.11's forkserver forks for whoever connects to its socket and reports the
    child's pid and exit status over the pipe it is handed (multiprocessing/forkserver.py), so a process it did not
    start can use it; only starting and reaping it are the driver's. A forkserver that authenticates its clients
    (``_forkserver_authkey``, in newer Pythons) is not joined: each process then starts its own."""
    import json
    from multiprocessing import forkserver, resource_tracker

    try:
        shared = json.loads(os.environ.get(SHARED_ENV) or "null")
    except ValueError:  # a stale or garbled value names no forkserver: this process starts its own
        return False
    server = forkserver._forkserver
    if not isinstance(shared, dict) or not isinstance(shared.get("address"), str):
        return False
    preload = shared.get("preload")
    if (not isinstance(preload, list) or tuple(preload) != want or not os.path.exists(shared["address"])
            or not hasattr(server, "_forkserver_address") or hasattr(server, "_forkserver_authkey")):
        return False
    server._forkserver_address = shared["address"]
    server._forkserver_alive_fd = os.open(os.devnull, os.O_WRONLY)  # handed to each child, which never uses it
    server.ensure_running = resource_tracker.ensure_running  # nothing of its own to start, nor to reap
    return True


@contextlib.contextmanager
def shared_forkserver(preload: Sequence[str], log: Path) -> Iterator[str]:
    """A forkserver that imports ``preload`` once; yields the value of :data:`SHARED_ENV` that points a process
    at it (a process started with it in its environment forks its :func:`call` with the same ``preload`` from
    it). Its own output (the imports') goes to ``log``. It dies with this process's calling thread
    (:mod:`workbench._forkserver_guard`) and is stopped on leaving; each child it forked ends with its caller."""
    import json
    from multiprocessing import forkserver

    want = tuple(dict.fromkeys(preload))
    server = forkserver.ForkServer()
    server.set_forkserver_preload(_modules(want))
    log.parent.mkdir(parents=True, exist_ok=True)
    ready = log.with_name(log.name + ".ready")  # beside its log: a driver killed outright leaves nothing in /tmp
    ready.unlink(missing_ok=True)  # a killed run's, which would say a new server is ready before it is
    with envvars.scoped({SHARED_LOG_ENV: str(log), SHARED_READY_ENV: str(ready)}):
        server.ensure_running()
    try:
        yield json.dumps({"address": server._forkserver_address, "preload": list(want), "pid": server._forkserver_pid,
                          "ready": str(ready)})
    finally:
        server._stop()  # closes its "alive" pipe, so it exits; then reaps it and removes its socket
        ready.unlink(missing_ok=True)


def wait_ready(shared: str, timeout_s: float = 600.0, poll_s: float = 0.05) -> bool:
    """Block until the shared forkserver ``shared`` names has done its imports; False if it died first or is
    still importing after ``timeout_s`` (each call through it then reports what went wrong itself)."""
    import json

    doc = json.loads(shared)
    ready, pid, deadline = Path(doc["ready"]), int(doc["pid"]), time.monotonic() + timeout_s
    while not ready.exists():
        if not _running(pid) or time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    return True


def _running(pid: int) -> bool:
    """Whether process ``pid`` (a child of this one) is still running: neither gone nor a zombie."""
    if Path("/proc/self").exists():
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except OSError:
            return False
    try:  # no /proc: only whether it exists
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def call(fn: Callable, *args: Any, timeout: float | None = None, preload: Sequence[str] = (), **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in a child process; its result, its exception, or :class:`EngineCrashed`.

    ``timeout`` (seconds) kills a child that has not answered by then (:class:`EngineTimeout`). ``preload``
    names modules the work imports anyway; the child then forks from a forkserver that has them loaded.
    """
    ctx = _context(preload)
    with tempfile.TemporaryDirectory(prefix="wbc-") as tmp:
        log_path = Path(tmp) / "stderr.log"
        log_path.touch()
        parent, child = ctx.Pipe(duplex=False)
        watched, alive = ctx.Pipe(duplex=False)
        stdout = multiprocessing.connection.Connection(os.dup(1), readable=False)
        proc = ctx.Process(target=_child, daemon=False, args=(child, watched, stdout, str(log_path), dict(os.environ),
                                                              os.getcwd(), fn, args, kwargs))
        try:
            proc.start()
            lifecycle.adopt_group(proc.pid)  # the group it leads: the engine's processes, however they rename
        finally:
            stdout.close()
        child.close()
        watched.close()
        status = value = None
        try:
            answered = parent.poll(timeout)
            if answered:
                try:
                    status, value = parent.recv()
                except EOFError:  # the child died before it could answer
                    pass
                proc.join(EXIT_GRACE_S)
        finally:  # answered or not, interrupted or not: the child's group goes with this call
            _kill_group(proc)
            proc.join()
            alive.close()
            parent.close()
        log = log_path.read_text(errors="replace")
    if not answered:
        raise EngineTimeout(timeout, log_tail(log))
    if status == "ok":
        return value
    if status == "error":
        if value.exc is not None:
            raise value.exc
        raise ChildError(f"{value.kind}: {value.message}\n{value.trace}")
    code = proc.exitcode
    raise EngineCrashed(-code if code is not None and code < 0 else None, code, crash_step(log), log_tail(log))
