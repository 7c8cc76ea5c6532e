"""Inference servers the workbench starts and stops as real processes: the process lifecycle only.

One launcher for ``workbench serve``, the served cells (:mod:`workbench.cells.served`), the loop and the
tests; each engine's wing supplies its launch line (a :data:`Builder`: ``cells/<engine>/served.py``). A server:

- binds 127.0.0.1 unless a host is given; a non-loopback host without an API key is refused, since
  ``/server_info`` and ``/kv_cache_events`` are control surfaces (the gateway guide);
- gets a port the OS picked (unless one is given) and writes its log to a folder of the caller's choosing;
- is ready when ``GET /health`` answers 200; a server that exits first is :class:`ServerDied`, an
  :class:`~workbench.isolate.EngineCrashed` with its exit status and log tail;
- runs in its own process group, which :meth:`Server.stop` ends (SIGTERM, then SIGKILL): the workbench
  exiting (atexit), SIGTERM (a handler stops every server, then the signal takes its default course), an
  exception in the caller (context manager) and the caller being killed outright (Linux
  ``PR_SET_PDEATHSIG``: the kernel sends the server SIGTERM, llama-server SIGKILL, when its parent dies)
  all stop it. The kernel counts the *thread* that forked as the parent (prctl(2)), so every child is forked
  from one daemon thread that lives as long as the process (:func:`spawn`): a server started from a worker
  thread that then ends (a pool's starters) is not killed with it.

Nothing here imports or names an engine: :func:`start` runs the :class:`Launch` its builder returns.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import ipaddress
import os
import queue
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from . import lifecycle
from .engine import WorkbenchError
from .files import tail
from .isolate import EngineCrashed, TAIL_LINES

LOOPBACK = "127.0.0.1"
STOP_GRACE_S = 15.0  # vLLM shuts its engine core down on SIGTERM; llama-server exits at once


class ServerRefused(WorkbenchError, ValueError):
    """The server exited before it was ready because of what it was given (an argument it does not take, a port
    another process holds): the user's to fix, exit 2 (never a crash)."""


#: What a server's log says when the address it was to bind is taken (llama-server: "couldn't bind HTTP server
#: socket"; uvicorn: "[Errno 98] ... address already in use").
PORT_TAKEN = r"(?i)(couldn't bind|address already in use)[^\n]*"


class ServerDied(EngineCrashed):
    """The server process exited (before it was ready, or while serving): its exit status and log tail."""

    def __init__(self, signum: int | None, exitcode: int | None, step: str | None, log_tail: list[str],
                 log_path: str = "") -> None:
        self.log_path = log_path
        super().__init__(signum, exitcode, step, log_tail)

    def headline(self) -> str:
        return super().headline().replace("engine ", "server ", 1) + (f" (log: {self.log_path})" if self.log_path else "")

    def __reduce__(self):
        return (ServerDied, (self.signum, self.exitcode, self.step, self.log_tail, self.log_path))


# --------------------------------------------------------------------------- what a server runs


@dataclass(frozen=True)
class Launch:
    """What to start: the command line, extra environment, and files to write beside the log first."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)  # file name -> text, written into the log folder
    #: what the kernel sends the server when the process that started it dies (PR_SET_PDEATHSIG)
    death_signal: int = signal.SIGTERM
    #: environment variables :func:`start` points at a fresh folder of the server's own, removed once it stopped
    scratch: tuple[str, ...] = ()
    #: what the server's log says when it refuses its command line (a regular expression; its first match is
    #: quoted): a server that exits so before it is ready was given bad arguments (:class:`ServerRefused`), not a crash
    refused_args: str | None = None


#: Server flags the workbench sets itself and must know, by the ``workbench serve`` option (and served-cell option)
#: that sets them: the same flag among the arguments passed through would override it, the last given winning
#: (``--host 0.0.0.0`` after ``--`` bound every interface without the API key :func:`check_host` asks for; a port or
#: a key the client does not know reaches no server). A slot count or threads passed through stay a test's fault.
OWNED_FLAGS: dict[str, tuple[str, ...]] = {
    "--host": ("--host",), "--port": ("--port",), "--model": ("--model", "-m"), "--api-key": ("--api-key",),
}


def check_extra_args(args: Sequence[str]) -> None:
    """Refuse an argument passed through to the server that sets what the workbench sets (:data:`OWNED_FLAGS`),
    naming the option to use instead."""
    for arg in args:
        flag = arg.split("=", 1)[0]
        for option, flags in OWNED_FLAGS.items():
            if flag in flags:
                raise ValueError(f"server argument {arg!r} sets what the workbench sets itself: use `workbench serve "
                                 f"{option}` (or a served cell's option of that name) instead")


@dataclass(frozen=True)
class ServerRequest:
    """One server to start. ``model_path``: a GGUF file (llama-server) or a Hugging Face directory."""

    engine: str
    model_path: str
    host: str = LOOPBACK
    port: int = 0  # 0: the OS picks one
    api_key: str | None = field(default=None, repr=False)  # never printed: passed in the server's environment
    threads: int = 1
    slots: int = 1
    context_tokens: int = 4096  # per slot
    extra_args: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)  # engine-specific (see each builder)

    def __post_init__(self) -> None:
        check_extra_args(self.extra_args)


Builder = Callable[[ServerRequest, int, Path], Launch]
"""An engine's launch line: the request, the port to bind and the log folder -> what to start."""


# --------------------------------------------------------------------------- host and port


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


CONTROL_ROUTES = "/server_info, /kv_cache_events and /slots are control surfaces"


def check_host(host: str, api_key: str | None, surfaces: str = CONTROL_ROUTES) -> None:
    """Refuse a non-loopback bind without an API key: the servers' control routes (``surfaces`` says what would be
    open to the network) would be open to the network."""
    if not host.strip():
        raise ValueError("the host to bind is empty; give an address, e.g. 127.0.0.1 (--host)")
    if not is_loopback(host) and not api_key:
        raise ValueError(f"refusing to bind {host} without an API key: {surfaces}; pass an API key (--api-key) or "
                         "bind 127.0.0.1")
    try:  # an address this machine does not have, or a name that resolves to none, before anything starts
        free_port(host)
    except (OSError, UnicodeError) as e:
        raise ValueError(f"cannot bind host {host!r} here ({getattr(e, 'strerror', None) or e}); give an address "
                         "of this machine, e.g. 127.0.0.1") from None


def check_port(host: str, port: int) -> None:
    """Refuse a ``port`` (0: the OS picks one, never refused) that another process holds on ``host``, before
    anything starts; bound as a server binds it (SO_REUSEADDR: a port some closed connection waits on is free)."""
    if not port:
        return
    if not 0 < port <= 65535:
        raise ServerRefused(f"port must be 0 (the OS picks) to 65535, got {port}")
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise ServerRefused(f"port {port} on {host} is {_taken(e)}: give another --port, or leave it out for one "
                                "the OS picks") from None


def _taken(e: OSError) -> str:
    import errno

    if e.errno == errno.EADDRINUSE:
        return "in use by another process"
    if e.errno == errno.EACCES:
        return "reserved for root (ports below 1024)"
    return f"not free ({e.strerror or e})"


def refused(dead: ServerDied, launch: "Launch", req: "ServerRequest") -> ServerRefused | None:
    """Why a server that exited before it was ready refused what it was given, where its log says so: a taken port
    or (the wing's :attr:`Launch.refused_args`) its command line; None: a crash."""
    import re

    if dead.signum is not None:
        return None
    text = "\n".join(tail(dead.log_path, 200)) if dead.log_path else "\n".join(dead.log_tail)
    if req.port and re.search(PORT_TAKEN, text):
        return ServerRefused(f"port {req.port} on {req.host} is in use by another process: give another --port, or "
                             "leave it out for one the OS picks")
    said = re.search(launch.refused_args, text) if launch.refused_args else None
    if said:
        return ServerRefused(f"{req.engine} refused its arguments: {said.group(0).strip()} (the arguments after `--` "
                             f"go to the server as they are; its log: {dead.log_path})")
    return None


def free_port(host: str = LOOPBACK) -> int:
    """A port the OS picks, free at the moment of asking (the server binds it a moment later)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- the process


_LIVE: set["Server"] = set()
_LOCK = threading.Lock()
_PR_SET_PDEATHSIG = 1


def _die_with_parent(death_signal: int) -> None:  # pragma: no cover - runs in the child between fork and exec
    """The kernel sends the server ``death_signal`` when the process that started it dies, however it dies."""
    os.setsid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, death_signal)
    except (OSError, AttributeError):
        pass


_SPAWNS: queue.SimpleQueue = queue.SimpleQueue()
_SPAWNER: threading.Thread | None = None


def _spawner() -> None:
    while True:
        popen, done = _SPAWNS.get()
        if done.set_running_or_notify_cancel():
            try:
                done.set_result(popen())
            except BaseException as e:  # handed to the caller, who raises it
                done.set_exception(e)


def _reap(done: Future) -> None:
    """A child whose caller was interrupted while it was being forked: nobody holds it, so it goes now."""
    if not done.cancelled() and done.exception() is None:
        proc = done.result()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def spawn(argv: Sequence[str], death_signal: int, **popen: Any) -> subprocess.Popen:
    """``subprocess.Popen(argv, **popen)`` in a process group of its own, sent ``death_signal`` when this process
    dies, forked from the one thread that lives as long as this process (the death signal follows the thread)."""
    global _SPAWNER
    with _LOCK:
        if _SPAWNER is None or not _SPAWNER.is_alive():  # first use, or a forked copy of this process
            _SPAWNER = threading.Thread(target=_spawner, name="workbench-spawner", daemon=True)
            _SPAWNER.start()
    done: Future = Future()
    _SPAWNS.put((functools.partial(subprocess.Popen, list(argv), preexec_fn=functools.partial(
        _die_with_parent, death_signal), **popen), done))
    try:
        proc = done.result()
    except BaseException:
        done.add_done_callback(_reap)
        raise
    lifecycle.adopt_group(proc.pid)  # what the server starts in its group ends with the command, however it ends
    return proc


def _stop_all() -> None:
    for s in list(_LIVE):
        s.stop()


def _on_sigterm(signum: int, frame: Any) -> None:
    """Stop every server, then let SIGTERM do what it would have done without us."""
    _stop_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


_HOOKS = False


def _install_hooks() -> None:
    """atexit, and SIGTERM where nobody else handles it (main thread only: that is where handlers live)."""
    global _HOOKS
    if _HOOKS:
        return
    atexit.register(_stop_all)
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)
    _HOOKS = True


class Server:
    """A running server. Use as a context manager, or call :meth:`stop`; ``url`` is its base URL."""

    def __init__(self, req: ServerRequest, proc: subprocess.Popen, url: str, log_path: Path, argv: Sequence[str],
                 scratch: Sequence[str] = ()) -> None:
        self.request, self.proc, self.url, self.log_path, self.argv = req, proc, url, log_path, tuple(argv)
        self.scratch = tuple(scratch)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def died(self, step: str | None = None) -> ServerDied | None:
        """:class:`ServerDied` if the process has exited, else None."""
        code = self.proc.poll()
        if code is None:
            return None
        return ServerDied(-code if code < 0 else None, code, step or f"serving {self.url}", tail(self.log_path, TAIL_LINES),
                          str(self.log_path))

    def stop(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """End the server's process group: SIGTERM, then SIGKILL after ``grace_s``; its exit status."""
        with _LOCK:
            _LIVE.discard(self)
        if self.proc.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                pass
        self._signal_group(signal.SIGKILL)  # whatever the server left in its group (vLLM's engine core)
        try:
            return self.proc.wait(5)
        except subprocess.TimeoutExpired:
            return None
        finally:
            _remove(self.scratch)

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Server({self.request.engine} at {self.url}, pid {self.pid}, log {self.log_path})"


def _remove(folders: Iterable[str]) -> None:
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


#: How long a server may take to become ready before its start fails (and it is stopped).
READY_TIMEOUT_S = 600.0


def start(req: ServerRequest, log_dir: str | os.PathLike, *, build: Builder, ready_timeout_s: float = READY_TIMEOUT_S,
          on_wait: Callable[[float], None] | None = None) -> Server:
    """Start ``req`` as ``build`` builds it (its engine's launch line) and return it once ``GET /health`` answers
    200.

    Raises :class:`ServerDied` when the process exits before that, :class:`WorkbenchError` when it is not ready
    within ``ready_timeout_s`` (it is stopped first), ``ValueError`` for a refused host.
    """
    check_host(req.host, req.api_key)
    check_port(req.host, req.port)
    folder = Path(log_dir)
    folder.mkdir(parents=True, exist_ok=True)
    port = req.port or free_port(req.host)
    launch = build(req, port, folder)
    for name, text in launch.files.items():
        (folder / name).write_text(text)
    log_path = folder / f"{req.engine}-{port}.log"
    _install_hooks()
    scratch = {name: tempfile.mkdtemp(prefix="wbserve-") for name in launch.scratch}  # short: socket paths
    try:
        with open(log_path, "ab") as log:
            log.write(f"$ {' '.join(launch.argv)}\n".encode())
            log.flush()
            proc = spawn(launch.argv, launch.death_signal, stdin=subprocess.DEVNULL, stdout=log,
                         stderr=subprocess.STDOUT, env=os.environ | dict(launch.env) | scratch, close_fds=True)
    except BaseException:
        _remove(scratch.values())
        raise
    host = f"[{req.host}]" if ":" in req.host else req.host
    server = Server(req, proc, f"http://{host}:{port}", log_path, launch.argv, tuple(scratch.values()))
    with _LOCK:
        _LIVE.add(server)
    try:
        wait_ready(server, ready_timeout_s, on_wait)
    except ServerDied as dead:
        server.stop()
        raise (refused(dead, launch, req) or dead) from None
    except BaseException:
        server.stop()
        raise
    return server


def wait_ready(server: Server, timeout_s: float, on_wait: Callable[[float], None] | None = None) -> None:
    t0 = time.monotonic()
    headers = {"Authorization": f"Bearer {server.request.api_key}"} if server.request.api_key else {}
    while True:
        dead = server.died(f"starting {server.request.engine}")
        if dead is not None:
            raise dead
        try:
            with urllib.request.urlopen(urllib.request.Request(server.url + "/health", headers=headers),
                                        timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError, ValueError):
            pass
        waited = time.monotonic() - t0
        if waited > timeout_s:
            raise WorkbenchError(f"{server.request.engine} did not become ready within {timeout_s:g} s at "
                                 f"{server.url}; last lines of {server.log_path}:\n"
                                 + "\n".join(f"  | {x}" for x in tail(server.log_path, TAIL_LINES)))
        if on_wait:
            on_wait(waited)
        time.sleep(0.25)


def live() -> list[Server]:
    """The servers this process started and has not stopped."""
    return list(_LIVE)


__all__ = ["LOOPBACK", "Builder", "Launch", "Server", "ServerDied", "ServerRefused", "ServerRequest", "check_host",
           "check_port", "free_port", "is_loopback", "live", "start"]
