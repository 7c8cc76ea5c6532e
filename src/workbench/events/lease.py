"""One consumer per endpoint: a lease in the user's state folder, keyed by the endpoint.

TensorRT-LLM's ``POST /kv_cache_events`` is a destructive drain of one shared queue, so a second consumer
silently takes events from the first. Every consumer here takes the endpoint's lease first: a JSON file under
``$WORKBENCH_STATE`` (default ``$XDG_STATE_HOME/workbench``, else ``~/.local/state/workbench``) in
``leases/``, named by a digest of the endpoint and naming the holder (pid, host, start, command). A live
holder makes the next consumer refuse, naming it; ``steal=True`` takes the lease over (the old holder sees it
lost at its next :meth:`Lease.check`); a holder that is dead (its pid gone on this host) is taken over and
the takeover noted. A holder on another host cannot be checked and counts as live.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import socket
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..engine import WorkbenchError
from ..files import atomic_write
from ..environment import now_iso


class LeaseHeld(WorkbenchError):
    """Another live consumer holds the endpoint's lease."""


class LeaseLost(WorkbenchError):
    """Our lease was taken over (``--steal``) by another consumer."""


def state_dir() -> Path:
    root = os.environ.get("WORKBENCH_STATE") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state"), "workbench")
    return Path(root)


def lease_path(endpoint: str, root: Path | None = None) -> Path:
    key = hashlib.sha256(endpoint.rstrip("/").encode()).hexdigest()[:24]
    return (root or state_dir()) / "leases" / f"{key}.json"


@dataclass(frozen=True)
class Holder:
    endpoint: str
    pid: int
    host: str
    started: str
    command: str
    token: str

    def __str__(self) -> str:
        return f"pid {self.pid} on {self.host} (since {self.started}: {self.command})"

    def alive(self) -> bool:
        if self.host != socket.gethostname():
            return True  # cannot be checked from here
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def _read(path: Path) -> Holder | None:
    try:
        d = json.loads(path.read_text())
        return Holder(**{k: d[k] for k in Holder.__dataclass_fields__})
    except (OSError, ValueError, KeyError, TypeError):
        return None


@contextlib.contextmanager
def _guard(path: Path) -> Iterator[None]:
    """Serialises read-check-write of one lease between processes (the kernel drops it with its holder)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_suffix(".guard"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class Lease:
    """The endpoint's lease, held by this process from :func:`acquire` until :meth:`release`."""

    def __init__(self, path: Path, me: Holder, previous: Holder | None, note: str | None) -> None:
        self.path, self.holder, self.previous, self.note = path, me, previous, note

    def check(self) -> None:
        """Raise :class:`LeaseLost` when another consumer has taken the lease over."""
        now = _read(self.path)
        if now is None or now.token != self.holder.token:
            raise LeaseLost(f"the lease on {self.holder.endpoint} was taken over by {now or 'nobody (removed)'}; "
                            "stop consuming: events now go to the new holder")

    def release(self) -> None:
        with _guard(self.path):
            now = _read(self.path)
            if now is not None and now.token == self.holder.token:
                self.path.unlink(missing_ok=True)

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def acquire(endpoint: str, *, steal: bool = False, root: Path | None = None) -> Lease:
    """Take ``endpoint``'s lease; :class:`LeaseHeld` naming a live holder unless ``steal``."""
    path = lease_path(endpoint, root)
    me = Holder(endpoint.rstrip("/"), os.getpid(), socket.gethostname(), now_iso(),
                " ".join([os.path.basename(sys.argv[0]), *sys.argv[1:]])[:300], uuid.uuid4().hex)
    with _guard(path):
        old = _read(path)
        note = None
        if old is not None and old.alive() and not steal:
            raise LeaseHeld(f"{endpoint} is consumed by {old}; its events are drained by that consumer, so a "
                            "second one would take events from it. Stop it, or pass --steal to take the lease over")
        if old is not None:
            note = (f"took the lease over from live consumer {old} (--steal)" if old.alive()
                    else f"took over a stale lease: its holder {old} is no longer running")
        atomic_write(path, json.dumps(me.__dict__) + "\n", mode=0o600)
    return Lease(path, me, old, note)
