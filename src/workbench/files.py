"""Writing files so that a reader never sees half of one and a failure leaves nothing behind; reading only
regular files, so that a FIFO or a device named like a finding never hangs a reader."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import uuid
from pathlib import Path

from .engine import WorkbenchError

REPO_ROOT = Path(__file__).resolve().parents[2]  # src/workbench/files.py → the checkout


class OutputError(WorkbenchError):
    """An output folder the workbench cannot write to; raised before any experiment runs."""


def atomic_write(path: str | Path, data: str | bytes, *, mode: int = 0o644, overwrite: bool = True) -> Path:
    """Write ``data`` to a temporary file beside ``path``, then move it into place.

    ``overwrite=False`` never replaces an existing file (:class:`FileExistsError`); either way the temporary
    file is removed when anything fails.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)  # mkstemp makes it private
        if overwrite:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # fails if path exists
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def read_regular(path: str | Path) -> bytes:
    """The bytes of ``path`` if it is a regular file (symlinks followed); :class:`OSError` otherwise.

    Opened non-blocking and checked on the open descriptor, so a FIFO is refused instead of waited on.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"not a regular file: {path}")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


CHECK_TRIES = 3  # a concurrent check may remove, between our mkdir and our write, a folder it made itself


def check_writable(directory: str | Path, what: str = "--out", nothing: str = "nothing was run") -> Path:
    """Create, write, fsync and remove a probe file in ``directory`` (making the folder for the check, and
    removing again what it made), so that an experiment never runs only to lose its result; :class:`OutputError`
    names the folder, the reason and ``nothing`` (what was not done). Two runs queued on one folder check it at
    once: a folder the other check removed under this one is made again (up to :data:`CHECK_TRIES` times), never
    reported as unwritable."""
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise OutputError(f"{what} {d} is a file, not a folder; choose a writable folder ({nothing})")
    for attempt in range(CHECK_TRIES):
        try:
            _write_check(d)
            return d
        except FileNotFoundError as e:
            if attempt + 1 < CHECK_TRIES:
                continue
            reason = e.strerror or str(e)
        except OSError as e:
            reason = e.strerror or str(e)
        raise OutputError(f"{what} {d} cannot be written ({reason}); choose a writable folder ({nothing})") from None
    return d  # pragma: no cover - the loop returns or raises


#: Folders the workbench writes into where the environment names them: the synthetic-model cache, served engines'
#: logs, the event plane's leases.
ENV_FOLDERS = ("WORKBENCH_CACHE", "WORKBENCH_SERVER_LOGS", "WORKBENCH_STATE")


def check_env_folders(nothing: str = "nothing was run") -> None:
    """:func:`check_writable` for each of :data:`ENV_FOLDERS` that is set, so a variable naming a file (or a folder
    that cannot be written) is said before anything runs, naming the variable."""
    for var in ENV_FOLDERS:
        if os.environ.get(var):
            check_writable(os.environ[var], var, nothing)


def check_file_writable(path: str | Path, what: str = "--out", nothing: str = "nothing was run") -> Path:
    """:func:`check_writable` for a file a command will write (``--out``, a blueprint written back in place):
    its folder must take a file, and the path must not be a folder."""
    p = Path(path)
    if p.is_dir():
        raise OutputError(f"{what} {p} is a folder; give a file's path ({nothing})")
    check_writable(p.parent, f"{what} {p}: its folder", nothing)
    return p


def write_output(path: str | Path, data: str | bytes, *, mode: int = 0o644) -> Path:
    """:func:`atomic_write` of a file a person asked for, its folder made: a write that fails midway (a full disk,
    a read-only mount) leaves the file as it was, and the :class:`OutputError` says so."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return atomic_write(path, data, mode=mode)
    except OSError as e:
        raise OutputError(f"{path} could not be written ({e.strerror or e}); nothing was changed: free space or "
                          "choose a writable path") from None


def _write_check(d: Path) -> None:
    made = [p for p in (d, *d.parents) if not p.exists()]
    probe = d / f".workbench-write-check-{uuid.uuid4().hex[:8]}"
    d.mkdir(parents=True, exist_ok=True)
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, b"workbench write check\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.unlink(probe)
    for p in made:  # deepest first; a folder someone filled meanwhile stays
        with contextlib.suppress(OSError):
            p.rmdir()


def tail(path: str | Path, n: int) -> list[str]:
    """The last ``n`` non-blank lines of a log (what a failure shows); none when it cannot be read."""
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [line for line in lines if line.strip()][-n:]
