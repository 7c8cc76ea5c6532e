"""A run folder's manifest (``run.json``): which notebook ran with which parameters, and how it ended.

Its own module, importing only leaf helpers, so that the runner (which writes it) and the report
(which reads it) depend on it and not on each other.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

from .files import atomic_write, read_regular

MANIFEST = "run.json"
SCHEMA = "workbench.run/v1"


@dataclass
class NotebookRun:
    """One notebook's entry in the manifest. ``status`` is running, ok, error or timeout."""

    name: str
    status: str
    parameters: dict
    output: str  # executed notebook, relative to the run folder
    started: str
    duration_s: float | None = None  # wall time of the notebook, kernel start included
    error: str | None = None
    attempt: str | None = None  # written into every finding of this attempt (findings.ATTEMPT_ENV)
    log: str | None = None  # what its kernel and engines printed, relative to the run folder
    environment: str | None = None  # the run matrix's environment it ran in (workbench.matrix)
    node: dict | None = None  # where a remote executor ran it: hostname, GPU, driver (workbench.fleet)
    retried: str | None = None  # why an earlier attempt was given up (a node lost mid-job)


@dataclass
class Manifest:
    notebooks: dict[str, NotebookRun] = field(default_factory=dict)
    updated: str = ""
    schema: str = SCHEMA


def load(out: Path) -> Manifest:
    """The run folder's manifest; an absent or unreadable one is empty (everything reruns)."""
    try:
        doc = json.loads(read_regular(Path(out) / MANIFEST))
        return Manifest({k: NotebookRun(**v) for k, v in doc["notebooks"].items()}, doc.get("updated", ""))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return Manifest()


@contextlib.contextmanager
def _locked(out: Path) -> Iterator[None]:
    with open(out / ".run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def record(out: Path, entry: NotebookRun) -> Manifest:
    """Merge one entry into ``run.json`` (read, update, atomic replace) under the folder's lock."""
    with _locked(out):
        m = load(out)
        m.notebooks[entry.name] = entry
        m.updated = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")  # as findings.now_iso
        doc = {"schema": m.schema, "updated": m.updated,
               "notebooks": {k: asdict(v) for k, v in sorted(m.notebooks.items())}}
        atomic_write(out / MANIFEST, json.dumps(doc, indent=2) + "\n")
        return m
