"""The record each finding is bound to: its digest, written down by whatever wrote it, beside it.

A finding is a file anyone can edit. What binds it to the run that wrote it is a record kept apart from it:

- every findings folder holds ``.ledger.jsonl``, one line per finding :func:`workbench.findings.write` put there
  (its id, its digest, the ``workbench run`` attempt that wrote it, when, on which host, by which process), appended
  under a lock, so a notebook, ``workbench probe --out DIR``, ``workbench loop`` and ``workbench evaltable`` all
  leave one;
- a run folder's ``run.json`` also lists, per notebook, the digest of each finding its attempt wrote, taken by the
  driver when the notebook ended (:func:`workbench.runner`), the run's own record of what it produced.

A digest is of the finding's JSON document as written (:func:`digest`: keys sorted, whitespace ignored), so
reformatting a file changes nothing and changing any value changes it. :mod:`workbench.settle` reads a finding's
records (:func:`records_for`): one that no record lists settles nothing, and one whose digest is not the recorded one
was "edited after its run". What this does not protect against (someone who rewrites the record too) is said in
docs/probes.md.

A leaf module: it imports only :mod:`workbench.files` and :mod:`workbench.manifest`.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping

from . import manifest
from .files import read_regular

LEDGER = ".ledger.jsonl"
SCHEMA = "workbench.ledger/v1"


def digest(doc: Any) -> str:
    """The digest of a finding's JSON document (a parsed object): SHA-256 of its canonical form (keys sorted, no
    whitespace), so it does not depend on how the file was indented."""
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Record:
    """One record of one finding: where it was recorded (``where``, in words), the digest written down there, and
    the attempt of ``workbench run`` that wrote it (None outside a run)."""

    where: str
    digest: str
    attempt: str | None = None


def entry(finding_id: str, doc_digest: str, attempt: str | None, written: str) -> dict:
    """One ledger line: the finding, its digest, and what wrote it (the attempt, when, the host, the process; the
    commit is in the finding's own fingerprint and the run's record)."""
    return {"schema": SCHEMA, "id": finding_id, "digest": doc_digest, "attempt": attempt, "written": written,
            "host": socket.gethostname(), "pid": os.getpid()}


def append(folder: str | os.PathLike, entries: Iterable[Mapping[str, Any]]) -> None:
    """Append ``entries`` to ``folder``'s ledger under its lock (several kernels of one run write side by side)."""
    lines = "".join(json.dumps(dict(e), sort_keys=True) + "\n" for e in entries)
    if not lines:
        return
    fd = os.open(Path(folder) / LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # one writer at a time: each line whole, in one write
        os.write(fd, lines.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)  # closing releases the lock


def merge(folder: str | os.PathLike, data: bytes, keep: Iterable[str] | None = None) -> int:
    """Append another folder's ledger (its bytes, e.g. what a remote job sent back) to ``folder``'s, only the lines of
    the finding ids in ``keep`` (all where None); lines already there are not repeated. Returns how many it added."""
    have = {json.dumps(e, sort_keys=True) for es in _entries(Path(folder)).values() for e in es}
    wanted = None if keep is None else set(keep)
    new = []
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if isinstance(e, dict) and isinstance(e.get("id"), str) and (wanted is None or e["id"] in wanted) \
                and json.dumps(e, sort_keys=True) not in have:
            new.append(e)
    append(folder, new)
    return len(new)


def entries(folder: str | os.PathLike) -> dict[str, list[dict]]:
    """Every line of ``folder``'s ledger, per finding id (none where it has no ledger)."""
    return _entries(Path(folder))


def _entries(folder: Path) -> dict[str, list[dict]]:
    path = folder / LEDGER
    try:
        st = path.stat()
    except OSError:
        return {}
    return _read(str(path), st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=64)
def _read(path: str, mtime_ns: int, size: int) -> dict[str, list[dict]]:
    """The ledger's entries per finding id (cached while the file is unchanged); unreadable lines are skipped."""
    out: dict[str, list[dict]] = {}
    try:
        text = read_regular(path).decode("utf-8", "replace")
    except OSError:
        return out
    for line in text.splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if isinstance(e, dict) and isinstance(e.get("id"), str) and isinstance(e.get("digest"), str):
            out.setdefault(e["id"], []).append(e)
    return out


def _notebooks(run: Path) -> tuple:
    """The notebook entries of run folder ``run``'s ``run.json`` (none where it has none), cached while unchanged."""
    try:
        st = (run / manifest.MANIFEST).stat()
    except OSError:
        return ()
    return _manifest(str(run), st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=16)
def _manifest(run: str, mtime_ns: int, size: int) -> tuple:
    return tuple(manifest.load(Path(run)).notebooks.values())


def ids(folder: str | os.PathLike) -> dict[str, str]:
    """Every finding id ``folder``'s ledger lists, with its last recorded digest."""
    return {i: es[-1]["digest"] for i, es in _entries(Path(folder)).items()}


def records_for(path: Path, finding_id: str, attempt: str | None) -> list[Record]:
    """Every record of finding ``finding_id`` read from ``path``: the run's own (``run.json`` beside the findings
    folder, the notebook entry of its ``attempt``) first, then the folder's ledger."""
    out: list[Record] = []
    folder = path.parent
    if attempt is not None:
        for nb in _notebooks(folder.parent):
            if nb.attempt == attempt and nb.findings and finding_id in nb.findings:
                out.append(Record(f"{manifest.MANIFEST} (notebook {nb.name}, attempt {attempt})",
                                  nb.findings[finding_id], attempt))
    out += [Record(f"{folder.name}/{LEDGER}", e["digest"], e.get("attempt"))
            for e in _entries(folder).get(finding_id, [])]
    return out


__all__ = ["LEDGER", "Record", "append", "digest", "entries", "entry", "ids", "merge", "records_for"]
