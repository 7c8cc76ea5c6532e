"""How every command ends: one signal layer, one temp root per command, and a reaper for whatever it started.

**Signals.** :func:`handle_signals` makes SIGINT (Ctrl-C), SIGTERM and SIGHUP one thing: the first raises
:class:`Interrupted` (a ``KeyboardInterrupt``, so every ``except KeyboardInterrupt`` and ``finally`` on the way out
runs: a server stopped, AIPerf's scratch removed) in the main thread, and the command ends with one line and the
exit code ``128 + signal`` (:func:`exit_code`: 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP), never a
traceback. A second signal while that cleanup runs ends the process at once (``repeat="exit"``: a user who presses
Ctrl-C again means it) or is ignored (``repeat="ignore"``: a lane, which its driver signals after the terminal did);
the reaper then ends what is left. A process the command starts that must not see the terminal's Ctrl-C before its
own handler is in place starts with the signals blocked (:func:`blocked`) and unblocks them itself. Before any of
that, while the command line imports its modules, a signal ends the process at once with one line
(:func:`while_starting`). A daemon, which a signal is meant to stop, keeps its own exit code
(:func:`stop_is_ordinary`).

**Temp.** :func:`temp_root` gives the command one folder, ``$TMPDIR/wbr-XXXXXXXX``, and points ``TMPDIR`` (and
Python's :mod:`tempfile`) at it, with Jupyter's runtime folder (a kernel's connection file, which holds its keys)
inside: multiprocessing's ``pymp-*``, AIPerf's ``wb-aiperf-*``, a served llama.cpp's ``llama-slots-*``, torch's
``torchinductor_*`` and every engine's sockets land there, in this process and every process it starts. It is
removed on every way out: by the command as it ends, by the reaper when the command is killed outright, and, were
both killed, by the next command to start (:func:`sweep`: a root whose lock no process holds is a dead command's).
What must outlive a command (recovered findings) goes to :func:`base_tempdir`, the temp folder the user gave.

**Processes.** Every process the command starts inherits :data:`ROOT_ENV`, naming the root, in its environment (a
forked child keeps its parent's): what :func:`end_processes` ends. The reaper is a process forked as the command
starts, in a session of its own (Ctrl-C and a signal to the command's process group miss it), that waits for the
command's end: however it ends (SIGKILL included), it ends every process whose environment names the root
(an engine core whose server crashed, re-parented to init, included) and removes the root. The command's own
parts still end their children themselves (process groups, ``PR_SET_PDEATHSIG``): the reaper is what holds when
they could not.

``workbench.cli.main`` wraps every command in :func:`command`; a long-running command of another module (a daemon)
adopts the same with ``with lifecycle.command(): …`` (docs/cli.md, "How a command ends").
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

#: Names the temp root of the command that started a process; every process it starts inherits it.
ROOT_ENV = "WORKBENCH_RUN_TMP"
#: The temp folder the user gave (``TMPDIR`` before the command pointed it at its root): what outlives a command.
BASE_ENV = "WORKBENCH_TMP_BASE"
PREFIX = "wbr-"  # short: an engine's unix socket paths (at most 107 bytes) live below it
LOCK = ".lock"
#: A root younger than this is never swept (its command may be between creating it and locking it).
SWEEP_MIN_AGE_S = 10.0
SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)


class Interrupted(KeyboardInterrupt):
    """The command was asked to stop by a signal (SIGINT, SIGTERM or SIGHUP): a KeyboardInterrupt, so the cleanup
    of a Ctrl-C runs for each of them."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal_name(self.signum)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


_RECEIVED: int | None = None


def received() -> int | None:
    """The signal that interrupted this process (None: none yet)."""
    return _RECEIVED


def exit_code(signum: int | None = None) -> int:
    """The exit code of a command a signal stopped: 128 + the signal (SIGINT, the default, 130; SIGTERM 143)."""
    return 128 + (signum or _RECEIVED or signal.SIGINT)


def handle_signals(repeat: str = "exit") -> None:
    """SIGINT, SIGTERM and SIGHUP raise :class:`Interrupted` once in this process's main thread; a repeat exits at
    once (``"exit"``) or is ignored (``"ignore"``). Nothing outside the main thread (where handlers live)."""
    if threading.current_thread() is not threading.main_thread():
        return
    handler = _first if repeat == "exit" else _first_only
    for sig in SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:  # nohup's SIGHUP, an inherited ignore: kept
            signal.signal(sig, handler)


def while_starting() -> None:
    """Until :func:`handle_signals` puts a command's own handlers in place, SIGINT, SIGTERM and SIGHUP end the
    process at once with one line and ``128 + signal``: all it has done is import its modules (seconds, for the
    command line), so nothing it started can be left. Without it, a Ctrl-C then prints an import's traceback."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _before_start)


def _before_start(signum: int, frame: object) -> None:
    say(f"interrupted ({signal_name(signum)}): stopped as it started; nothing was running yet")
    os._exit(exit_code(signum))


_ORDINARY = False


def stop_is_ordinary() -> None:
    """This command is a daemon, and a signal is how it is meant to stop (``workbench cell serve``, as modeld stops
    on SIGTERM): the signal that stops it ends it with the command's own exit code (0) and its own line, not
    ``128 + signal``. The rest holds as for every command: its cleanup runs, a second signal ends it at once."""
    global _ORDINARY
    _ORDINARY = True


def stopped_by_signal() -> int | None:
    """The signal that stopped this command, unless that is how it is meant to stop (:func:`stop_is_ordinary`)."""
    return None if _ORDINARY else _RECEIVED


def _first(signum: int, frame: object) -> None:
    global _RECEIVED
    if _RECEIVED is not None:  # asked again while stopping: now (the reaper ends what is left)
        os._exit(exit_code())
    _RECEIVED = signum
    _silence()
    raise Interrupted(signum)


_CONSOLE: int | None = None  # the command's stderr as it was, once a signal moved fd 2 aside
_SINK: Path | None = None


def keep_stderr_in(path: Path | None) -> None:
    """Where what a stopped command's unwinding still prints goes (a run's log folder); None: nowhere."""
    global _SINK
    _SINK = path


def _silence() -> None:
    """Once a signal stopped the command, what its unwinding prints (a dead kernel's words, a library's warning, a
    finalizer's traceback) goes to :func:`keep_stderr_in`'s file, not the console: the console gets one line
    (:func:`say`)."""
    global _CONSOLE
    if _CONSOLE is not None:
        return
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    _CONSOLE = os.dup(2)
    try:
        if _SINK is None:
            raise OSError
        _SINK.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(_SINK, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:
        fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 2)
    os.close(fd)


def say(line: str) -> None:
    """``line`` on the command's console: its stderr as it was before a signal moved it aside."""
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    os.write(_CONSOLE if _CONSOLE is not None else 2, (line + "\n").encode())


def _record(signum: int, frame: object) -> None:
    global _RECEIVED
    if _RECEIVED is None:
        _RECEIVED = signum


def settle() -> None:
    """The command's work is over and its cleanup runs: a signal from now on is recorded (the exit code says it),
    never raised into the cleanup."""
    if threading.current_thread() is threading.main_thread():
        for sig in SIGNALS:
            if signal.getsignal(sig) in (_first, _first_only):
                signal.signal(sig, _record)


def _first_only(signum: int, frame: object) -> None:
    global _RECEIVED
    if _RECEIVED is None:
        _RECEIVED = signum
        _silence()
        raise Interrupted(signum)


@contextlib.contextmanager
def blocked() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP held back in this thread for the span (one that arrives is delivered after it):
    a process started inside starts with them blocked too, and unblocks them once its handlers are in place
    (:func:`unblock`), so a Ctrl-C while it imports prints no traceback."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def unblock() -> None:
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)


def die_with_parent(signum: int = signal.SIGTERM, parent: int | None = None) -> None:
    """Linux: this process gets ``signum`` when the thread that started it ends (``PR_SET_PDEATHSIG``); when its
    parent (``parent``, the pid it was started by) is already gone, it gets it now."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signum)  # PR_SET_PDEATHSIG
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), signum)


# --------------------------------------------------------------------------- the temp root


def base_tempdir() -> Path:
    """The temp folder the user gave: ``$WORKBENCH_TMP_BASE`` inside a command, else Python's temp folder."""
    return Path(os.environ.get(BASE_ENV) or tempfile.gettempdir())


def _owned_roots(base: Path) -> Iterator[Path]:
    try:
        entries = list(os.scandir(base))
    except OSError:
        return
    for e in entries:
        try:
            if e.name.startswith(PREFIX) and e.is_dir(follow_symlinks=False) and e.stat().st_uid == os.getuid():
                yield Path(e.path)
        except OSError:
            continue


def _held(root: Path) -> bool:
    """Whether a live command holds ``root``'s lock, or it may: too young to tell, or no lock (not a root this
    module made, unless it is an empty folder a minute old: a command killed between making it and locking it)."""
    import fcntl

    try:
        age = time.time() - root.stat().st_mtime
    except OSError:  # gone meanwhile: nothing to sweep
        return True
    if age < SWEEP_MIN_AGE_S:
        return True
    try:
        fd = os.open(root / LOCK, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        with contextlib.suppress(OSError):
            return not (age > 60 and not any(root.iterdir()))
        return True
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        return e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
    finally:
        os.close(fd)
    return False


def sweep(base: Path | None = None) -> list[Path]:
    """Remove the roots under ``base`` of commands that are gone (no process holds their lock: killed outright,
    their reaper too), ending first any process still running from them; the roots removed."""
    gone = []
    for root in _owned_roots(Path(base) if base else base_tempdir()):
        if not _held(root):
            end_processes(root)
            _remove_folders(root)
            shutil.rmtree(root, ignore_errors=True)
            gone.append(root)
    return gone


@contextlib.contextmanager
def temp_root() -> Iterator[Path]:
    """A temp root for this command (module doc): made after :func:`sweep`, named in ``TMPDIR``, :data:`ROOT_ENV`
    and ``JUPYTER_RUNTIME_DIR`` for the span, watched by a reaper, and removed on leaving with every process still
    running from it."""
    import fcntl

    from . import envvars

    base = Path(tempfile.gettempdir())
    sweep(base)
    root = Path(tempfile.mkdtemp(prefix=PREFIX, dir=base))
    lock = os.open(root / LOCK, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    saved = tempfile.tempdir
    with envvars.scoped({"TMPDIR": str(root), ROOT_ENV: str(root), "JUPYTER_RUNTIME_DIR": str(root / "jupyter")},
                        default={BASE_ENV: str(base)}):
        tempfile.tempdir = str(root)
        reaper = _Reaper(root)
        try:
            yield root
        finally:
            tempfile.tempdir = saved
            end_processes(root, also_spare={reaper.pid})
            _multiprocessing_temp_now(root)
            _remove_folders(root)
            shutil.rmtree(root, ignore_errors=True)
            reaper.release()
            os.close(lock)


def _multiprocessing_temp_now(root: Path) -> None:
    """Remove multiprocessing's ``pymp-*`` folder of this process now, through its own finalizer (which would
    otherwise try at interpreter exit, after the root is gone, and print a traceback)."""
    import multiprocessing.util as mp

    tempdir = mp.process.current_process()._config.get("tempdir")
    if not tempdir or root not in Path(tempdir).parents:
        return
    for finalizer in list(getattr(mp, "_finalizer_registry", {}).values()):
        if getattr(finalizer, "_callback", None) is getattr(mp, "_remove_temp_dir", None):
            with contextlib.suppress(Exception):
                finalizer()


# --------------------------------------------------------------------------- processes


def _marked(root: Path, spare: set[int]) -> list[int]:
    """The processes (not ``spare``) whose environment names ``root`` or a root inside it (a command it started)."""
    if not Path("/proc/self/environ").exists():
        return []
    want = f"{ROOT_ENV}={root}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in spare:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:  # gone, a zombie, or another user's
            continue
        if any(v == want or v.startswith(want + b"/") for v in env):
            found.append(int(name))
    return found


GROUPS = ".groups"


def _started(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, /proc/PID/stat field 22): with the pid, who it is."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def adopt_group(pgid: int) -> None:
    """Record that the process group ``pgid`` (a server's, an experiment's child's) belongs to the running command,
    so that whatever is in it when the command ends (killed outright included) is ended with it. A process can
    rename itself and overwrite the environment :func:`_marked` reads (vLLM's ``VLLM::EngineCore`` does); it
    cannot leave its group unnoticed. Nothing outside a command (no :data:`ROOT_ENV`)."""
    root, start = os.environ.get(ROOT_ENV), _started(pgid)
    if root and start and Path(root).is_dir():
        with contextlib.suppress(OSError):
            (Path(root) / GROUPS).mkdir(exist_ok=True)
            (Path(root) / GROUPS / f"{pgid}-{start}").touch()


FOLDERS = ".folders"


def adopt_folder(folder: str | os.PathLike) -> None:
    """Record a folder the running command made outside its temp root (a Ray session's, which must stay short and
    lies in ``RAY_TMPDIR`` or /tmp), so that it goes with the command's root however the command ends. Nothing
    outside a command."""
    root = os.environ.get(ROOT_ENV)
    if root and Path(root).is_dir():
        import hashlib

        with contextlib.suppress(OSError):
            (Path(root) / FOLDERS).mkdir(exist_ok=True)
            path = os.path.abspath(folder)
            (Path(root) / FOLDERS / hashlib.sha256(path.encode()).hexdigest()[:16]).write_text(path)


def _remove_folders(root: Path) -> None:
    """Remove the folders recorded under ``root`` (:func:`adopt_folder`); what already went is skipped."""
    for record in root.rglob(f"{FOLDERS}/*"):
        with contextlib.suppress(OSError):
            shutil.rmtree(record.read_text().strip(), ignore_errors=True)


def _end_groups(root: Path, spare: set[int]) -> None:
    """SIGKILL each process group recorded under ``root`` (and the roots inside it) whose leader is the process
    recorded or gone: a group id is never handed out again while any process is in the group, so a gone leader's
    group holds only what the command started; a live process of that pid that started at another time is
    another's, and is left alone."""
    for record in root.rglob(f"{GROUPS}/*"):
        pid, _, start = record.name.partition("-")
        if not pid.isdigit() or int(pid) in spare:
            continue
        now = _started(int(pid))
        if now is None or now == start:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(pid), signal.SIGKILL)


def end_processes(root: Path, also_spare: set[int] = frozenset(), rounds: int = 20) -> list[int]:
    """SIGKILL every process started under ``root``: the process groups recorded (:func:`adopt_group`), then every
    process whose environment names it (:func:`_marked`), again until none is left (one may have forked
    meanwhile); the pids found by their environment."""
    spare = {os.getpid(), *also_spare}
    _end_groups(root, spare)
    killed: list[int] = []
    for _ in range(rounds):
        pids = _marked(root, spare)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed += pids
        time.sleep(0.05)
    return killed


class _Reaper:
    """A process forked now, in a session of its own, that waits for this one to end (its pipe closes: on exit,
    however it exits) and then ends what is left of ``root`` (module doc)."""

    def __init__(self, root: Path) -> None:
        self.pid: int | None = None
        self._w: int | None = None
        if not hasattr(os, "fork") or not Path("/proc/self").exists():
            return
        r, w = os.pipe()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the reaper; a test kills its command and watches what it leaves
            try:
                _reap(root, r, w, parent)
            finally:
                os._exit(0)
        os.close(r)
        self.pid, self._w = pid, w

    def release(self) -> None:
        """This command's own cleanup is done: the reaper checks once more and exits; it is waited for."""
        if self._w is not None:
            os.close(self._w)
            self._w = None
        if self.pid is not None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            self.pid = None


def _reap(root: Path, r: int, w: int, parent: int) -> None:  # pragma: no cover - runs in the reaper
    os.close(w)
    os.setsid()
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # not the command's terminal or pipes: a caller reading its output sees it end with it
        os.dup2(null, fd)
    keep = {r, null, *_lock_fds(root)}
    for fd in _open_fds():
        if fd > 2 and fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)
    while True:
        ready, _, _ = select.select([r], [], [], 1.0)
        if ready or os.getppid() != parent:
            break
    end_processes(root)
    _remove_folders(root)
    shutil.rmtree(root, ignore_errors=True)


def _open_fds() -> list[int]:
    try:
        return [int(fd) for fd in os.listdir("/proc/self/fd")]
    except OSError:
        return []


def _lock_fds(root: Path) -> list[int]:
    """The descriptors of ``root``'s lock in this process (the reaper keeps it held while it works)."""
    out = []
    for fd in _open_fds():
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{fd}") == str(root / LOCK):
                out.append(fd)
    return out


# --------------------------------------------------------------------------- a command


@contextlib.contextmanager
def command() -> Iterator[Path]:
    """A command's lifecycle: its signals handled (:func:`handle_signals`) and its temp root (:func:`temp_root`)
    with the reaper watching it. Yields the root."""
    handle_signals()
    with temp_root() as root:
        try:
            yield root
        finally:
            settle()


def interrupted_line(e: BaseException, what: str = "stopped") -> str:
    """The one line a command a signal stopped ends with."""
    signum = getattr(e, "signum", None) or _RECEIVED or signal.SIGINT
    return f"interrupted ({signal_name(signum)}): {what}"


__all__ = ["BASE_ENV", "ROOT_ENV", "Interrupted", "base_tempdir", "blocked", "command", "end_processes", "exit_code",
           "adopt_folder", "adopt_group", "handle_signals", "interrupted_line", "keep_stderr_in", "received", "say",
           "settle", "stop_is_ordinary", "stopped_by_signal", "sweep", "temp_root", "unblock", "while_starting"]
