"""A run folder's manifest (``run.json``): which notebook ran with which parameters, and how it ended, and each
``workbench run`` that wrote into the folder (:class:`RunRecord`: command line, commit, machine, models).

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
    node: dict | None = None  # where it ran: a remote executor's hostname, GPU, driver (workbench.fleet); a lane and
    #                           its cores (workbench.lanes: lane None is the driver, for a notebook covering the batch)
    retried: str | None = None  # why an earlier attempt was given up (a node lost mid-job)
    findings: dict[str, str] | None = None  # each finding this attempt wrote: id -> digest (workbench.ledger.digest),
    #                                         taken when it ended: the run's record a finding is bound to


@dataclass(frozen=True)
class Machine:
    """Where a run ran, as :mod:`workbench.environment` reads it."""

    cpu: str  # the CPU's model name (/proc/cpuinfo), else its architecture
    cores: int | None
    gpus: tuple[str, ...]  # NVML's device names; () where it sees none
    hostname: str


@dataclass(frozen=True)
class RunRecord:
    """One ``workbench run`` into a folder: what was asked, by which code, where, and how its notebooks ended.
    Written at its start (``ended`` None: still running, or stopped before its end) and again at its end."""

    id: str  # one run's id (its two writes, at its start and its end, are one record)
    folder: str  # the run folder, absolute
    command: tuple[str, ...]  # the command line as typed (``sys.argv``)
    version: str  # the workbench's package version
    commit: str | None  # git commit of the checkout, ``-dirty`` with uncommitted changes (``workbench --version``)
    machine: Machine
    models: dict[str, tuple[str, ...]]  # engine -> the model specs this run planned for it
    started: str
    ended: str | None = None
    exit_code: int | None = None
    notebooks: dict[str, str] = field(default_factory=dict)  # manifest key -> status at the end

    @classmethod
    def from_doc(cls, doc: dict) -> "RunRecord":
        return cls(**(doc | {"command": tuple(doc["command"]), "machine": Machine(**(doc["machine"] | {
            "gpus": tuple(doc["machine"]["gpus"])})), "models": {k: tuple(v) for k, v in doc["models"].items()}}))


@dataclass
class Manifest:
    notebooks: dict[str, NotebookRun] = field(default_factory=dict)
    updated: str = ""
    schema: str = SCHEMA
    runs: list[RunRecord] = field(default_factory=list)  # every workbench run into the folder, oldest first


def load(out: Path) -> Manifest:
    """The run folder's manifest; an absent or unreadable one is empty (everything reruns)."""
    try:
        doc = json.loads(read_regular(Path(out) / MANIFEST))
        runs = [r for r in map(_run_record, doc.get("runs", [])) if r is not None]
        return Manifest({k: NotebookRun(**v) for k, v in doc["notebooks"].items()}, doc.get("updated", ""), runs=runs)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return Manifest()


def _run_record(doc: object) -> RunRecord | None:
    """One run's record, None where it does not read (a hand edit, a newer field): the notebooks still load."""
    try:
        return RunRecord.from_doc(doc)  # type: ignore[arg-type]
    except (KeyError, TypeError, AttributeError, ValueError):
        return None


@contextlib.contextmanager
def _locked(out: Path) -> Iterator[None]:
    with open(out / ".run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def record(out: Path, entry: NotebookRun | RunRecord) -> Manifest:
    """Merge one notebook's entry, or one run's record (the same run again: by its id), into ``run.json`` (read,
    update, atomic replace) under the folder's lock."""
    with _locked(out):
        m = load(out)
        if isinstance(entry, RunRecord):
            m.runs = [r for r in m.runs if r.id != entry.id] + [entry]
        else:
            m.notebooks[entry.name] = entry
        m.updated = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")  # as environment.now_iso
        doc = {"schema": m.schema, "updated": m.updated,
               "notebooks": {k: asdict(v) for k, v in sorted(m.notebooks.items())},
               "runs": [asdict(r) for r in m.runs]}
        atomic_write(out / MANIFEST, json.dumps(doc, indent=2) + "\n")
        return m
