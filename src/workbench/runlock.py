"""One writer per run folder: ``workbench run`` holds an exclusive lock on ``<out>/.writer.lock`` for its whole batch.

Two batches into one folder would each run every notebook (duplicate findings) and each set aside the other's
unfinished work. The lock is an ``fcntl.flock`` on the file, so the kernel releases it when its holder dies, even
by SIGKILL: a stale lock from a dead process is simply taken over. The file's text names the holder (pid, host,
start time, command) for the message a second writer gets.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
from pathlib import Path
from typing import Callable, Iterator

from .engine import WorkbenchError
from .environment import now_iso

LOCK = ".writer.lock"


class RunLocked(WorkbenchError):
    """Another process is writing into this run folder."""


def holder(out: Path) -> str:
    """Who holds (or last held) the lock, in words."""
    try:
        h = json.loads((Path(out) / LOCK).read_text() or "{}")
    except (OSError, ValueError):
        h = {}
    if not isinstance(h, dict) or "pid" not in h:
        return "another process"
    return f"pid {h['pid']} on {h.get('host', '?')} (started {h.get('started', '?')}: {h.get('command', '?')})"


@contextlib.contextmanager
def writer(out: Path, wait: bool = False, waiting: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the run folder's writer lock; :class:`RunLocked` naming the holder unless ``wait``, which queues."""
    out = Path(out)
    fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            who = holder(out)
            if not wait:
                raise RunLocked(f"run folder {out} is being written by {who}; wait for it to finish, or pass "
                                "--wait to queue behind it") from None
            if waiting:
                waiting(who)
            fcntl.flock(fd, fcntl.LOCK_EX)
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started": now_iso(),
              "command": " ".join([os.path.basename(sys.argv[0]), *sys.argv[1:]])[:300]}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(me) + "\n").encode(), 0)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
