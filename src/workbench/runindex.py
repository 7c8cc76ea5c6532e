"""Runs you can find: each ``workbench run`` records itself in its folder's ``run.json``
(:class:`~workbench.manifest.RunRecord`: command line, commit, machine, models per engine, start and end, how its
notebooks ended) and, where the folder sits in a folder of runs, one line in that folder's ``index.jsonl``
(``runs/index.jsonl`` for ``make run``'s ``runs/latest``), so the runs under one parent are listed without opening
each. A folder of runs is one named ``runs`` or one that already holds an ``index.jsonl`` (a reader of an index takes
every line for a run beside it): ``--out /tmp/r1`` writes no ``/tmp/index.jsonl``, its record stays in its
``run.json``; ``touch DIR/index.jsonl`` makes ``DIR`` a folder of runs.

A folder holds one model per engine: a run that would add another model for an engine the folder already ran is
refused before anything runs (:func:`check_models`), since resuming would put both models' findings side by side
in one report. Adding an engine the folder has not run is a resume like any other.
"""

from __future__ import annotations

import json
import socket
import sys
import uuid
from dataclasses import asdict, replace
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from . import manifest
from .engine import WorkbenchError
from .files import read_regular
from .environment import now_iso
from .manifest import Machine, RunRecord

INDEX = "index.jsonl"


class MixedModels(WorkbenchError):
    """A run that would put a second model for one engine into a run folder (exit 2, nothing run)."""


def machine() -> Machine:
    """This machine as a run records it: CPU model and cores, NVML's GPUs, hostname."""
    from . import environment

    c, g = environment.cpu(), environment.gpus()
    return Machine(c["model"] or c["machine"], c["cores"], tuple(d["name"] for d in g["devices"]), socket.gethostname())


def planned_models(parameters: Iterable[Mapping]) -> dict[str, tuple[str, ...]]:
    """Engine -> the model specs the notebooks' parameters name, sorted (every notebook gets engine and model)."""
    out: dict[str, set[str]] = {}
    for p in parameters:
        if p.get("engine") is not None and p.get("model") is not None:  # an entry hand-edited without them: no claim
            out.setdefault(str(p["engine"]), set()).add(str(p["model"]))
    return {e: tuple(sorted(m)) for e, m in sorted(out.items())}


def check_models(out: Path, parameters: Iterable[Mapping]) -> None:
    """Refuse (:class:`MixedModels`) a run that asks an engine the folder already ran on a model it did not run it on."""
    held = planned_models(e.parameters for e in manifest.load(out).notebooks.values())
    for engine, models in planned_models(parameters).items():
        new = sorted(set(models) - set(held.get(engine, models)))
        if new:
            raise MixedModels(f"{out} holds {engine} on {', '.join(held[engine])} ({manifest.MANIFEST}); this run asks "
                              f"{engine} on {', '.join(new)}, and a run folder holds one model per engine: give another "
                              f"--out (make run: RUN=runs/NAME), or move {out} aside (nothing was run)")


def begin(out: Path, parameters: Sequence[Mapping], command: Sequence[str] | None = None) -> RunRecord:
    """Record a run as it starts, in ``run.json`` and the index."""
    from . import environment

    rec = RunRecord(uuid.uuid4().hex[:12], str(out), tuple(sys.argv if command is None else command),
                    environment.workbench_version(), environment.git_commit(), machine(), planned_models(parameters),
                    now_iso())
    return _write(out, rec)


def end(out: Path, rec: RunRecord, exit_code: int) -> RunRecord:
    """Record how the run ended: its exit code and each of its notebooks' status from ``run.json``."""
    m = manifest.load(out)
    return _write(out, replace(rec, ended=now_iso(), exit_code=exit_code,
                               notebooks={k: v.status for k, v in sorted(m.notebooks.items())}))


def _write(out: Path, rec: RunRecord) -> RunRecord:
    """``run.json`` (the folder's lock), then a line in the index of the folder of runs it sits in (none: the record
    is in ``run.json`` alone); an index that cannot be written is said, not fatal."""
    manifest.record(out, rec)
    index = index_path(out)
    if index is None:
        return rec
    try:
        with open(index, "a", encoding="utf-8") as f:
            f.write(json.dumps(asdict(rec), sort_keys=True) + "\n")
    except OSError as e:
        print(f"index:     not written: {e}", file=sys.stderr)
    return rec


RUNS = "runs"  # a parent folder of this name is a folder of runs, as make run's runs/ is


def index_path(out: Path) -> Path | None:
    """The index a run folder's runs are listed in: ``index.jsonl`` in its parent folder where that is a folder of
    runs (named ``runs``, or already holding an index); None where it is not (``--out /tmp/r1``: /tmp is no folder of
    runs, and a reader of /tmp/index.jsonl would take every line for a run kept in /tmp)."""
    parent = Path(out).resolve().parent
    return parent / INDEX if parent.name == RUNS or (parent / INDEX).is_file() else None


def read_index(path: Path) -> list[RunRecord]:
    """The runs an index lists, oldest first, each at its last state (a run writes a line at its start and its end);
    lines that do not read as a run are skipped."""
    runs: dict[str, RunRecord] = {}
    try:
        text = read_regular(path).decode("utf-8", "replace")
    except OSError:
        return []
    for line in text.splitlines():
        try:
            rec = RunRecord.from_doc(json.loads(line))
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
        runs.pop(rec.id, None)
        runs[rec.id] = rec
    return list(runs.values())


__all__ = ["INDEX", "MixedModels", "begin", "check_models", "end", "index_path", "machine", "planned_models",
           "read_index"]
