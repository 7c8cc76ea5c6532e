"""``workbench run --matrix FILE``: one run as engines × models × cell options × environments (YAML).

    notebooks: [20_reuse_metrics, 50_capacity_surface]   # optional: as --only names them; default all
    engines: [trtllm, llamacpp]                         # required
    models: [smollm2-135m]                              # optional: default the default model
    params: {repeats: 3}                                # optional: as -p, for every job
    cell_options: [{}, {tokens_per_block: 64}]          # optional: each set is one more job per notebook
    environments:                                       # optional: name -> Ray runtime_env (--executor ray)
      trtllm-1.2.0: {pip: ["tensorrt_llm==1.2.0"]}
      trtllm-1.2.1: {pip: ["tensorrt_llm==1.2.1"]}
    resources:                                          # optional: per engine, instead of the rule
      vllm: {num_cpus: 2}

The whole file is checked before anything runs, every bad entry named in one line (:class:`MatrixError`, exit 2):
UTF-8 YAML within :data:`MAX_BYTES` and :data:`MAX_DEPTH`, no alias, every number finite. Jobs
whose axes have several values land in ``notebooks/<engine>/<environment>__<model>__options-N/`` (only the
axes that vary), all in one run folder, so the churn rule reads each release's survey from it.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from . import cells, models
from .engine import WorkbenchError
from .executors import Job, Resources, resources_for

KEYS = ("notebooks", "engines", "models", "params", "cell_options", "environments", "resources")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

#: The most a run matrix file holds: a few engines, models and options fit in far less. PyYAML sets no limit of
#: its own (its composer recurses once per level: deep nesting was a RecursionError).
MAX_BYTES = 256 * 1024
MAX_DEPTH = 16
#: What one job may ask of Ray: Ray counts in units of 1/10,000 and refuses a smaller amount above 0
#: (ray/_common/ray_option_utils.py: _validate_resource_quantity); no node has more than the upper bound, and a
#: job asking more than any node has waits forever. NaN, which Ray took until it failed to convert it, is in no range.
RESOURCE_RANGE = {"num_cpus": (1e-4, 1024.0), "num_gpus": (1e-4, 64.0)}


class MatrixError(WorkbenchError):
    """A run matrix with bad entries; the message lists each one."""


@dataclass(frozen=True)
class Matrix:
    engines: tuple[str, ...]
    models: tuple[str, ...] = (models.DEFAULT_MODEL,)
    notebooks: tuple[str, ...] | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    cell_options: tuple[Mapping[str, Any], ...] = ({},)
    environments: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    resources: Mapping[str, Resources] = field(default_factory=dict)

    def jobs(self, out: Path, notebooks_dir: Path | None = None) -> list[Job]:
        """Every job of the matrix, planned (:func:`workbench.runner.plan`); a notebook or parameter no
        notebook takes is a :class:`MatrixError`."""
        from .runner import RunError, plan

        envs = list(self.environments.items()) or [(None, None)]
        todo = []
        for engine in self.engines:
            for model in self.models:
                for i, opts in enumerate(self.cell_options):
                    params = {k: _text(v) for k, v in self.params.items()} | (
                        {"cell_options": json.dumps(dict(opts))} if opts else {})
                    try:
                        planned = plan(out, engine, model, params, list(self.notebooks or []) or None, notebooks_dir)
                    except RunError as e:
                        raise MatrixError(f"run matrix: {e}") from None
                    for env, runtime_env in envs:
                        variant = self._variant(env, model, i)
                        res = self.resources.get(engine) or resources_for(engine, opts)
                        todo += [Job(_with_variant(p, variant), res, env, runtime_env) for p in planned]
        return todo

    def _variant(self, env: str | None, model: str, i: int) -> str:
        parts = [env if len(self.environments) > 1 else None,
                 re.sub(r"[^A-Za-z0-9._-]+", "-", model) if len(self.models) > 1 else None,
                 f"options-{i}" if len(self.cell_options) > 1 else None]
        return "__".join(x for x in parts if x)


def _with_variant(p: Any, variant: str) -> Any:
    from dataclasses import replace

    return replace(p, variant=variant)


def _text(v: Any) -> Any:
    """A YAML value as ``-p`` would give it: mappings as JSON, lists as the comma-separated text probes read."""
    if isinstance(v, Mapping):
        return json.dumps(dict(v))
    if isinstance(v, list):
        return ",".join(map(str, v))
    return v if isinstance(v, (str, bool, int, float)) else str(v)


def load(path: Path) -> Matrix:
    """Read and check a matrix file; :class:`MatrixError` (one line) naming the file, the line or the entry, and
    the fix."""
    doc = parse(path)
    problems = check(doc)
    if problems:
        raise MatrixError(f"--matrix {path}: fix {'; '.join(problems)} (nothing was run)")
    return Matrix(tuple(doc["engines"]), tuple(doc.get("models") or (models.DEFAULT_MODEL,)),
                  tuple(doc["notebooks"]) if doc.get("notebooks") else None, dict(doc.get("params") or {}),
                  tuple(doc.get("cell_options") or ({},)), dict(doc.get("environments") or {}),
                  {e: Resources(float(r.get("num_cpus", 1)), float(r.get("num_gpus", 0)))
                   for e, r in (doc.get("resources") or {}).items()})


class _Refused(yaml.MarkedYAMLError):
    """YAML that PyYAML reads but a run matrix does not take (:class:`_Loader`)."""


class _Loader(yaml.SafeLoader):
    """SafeLoader with a run matrix's limits. No alias: a matrix repeats nothing a name does not already share
    (environments, resources per engine), and an alias is how a small file expands into billions of entries
    (an alias bomb ran 52 s, then MemoryError). Python's own ValueErrors from a scalar (an int of 5,000 digits,
    month 13) are given the scalar's line, like PyYAML's errors."""

    depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise _Refused(None, None, f"alias *{event.anchor}: a run matrix takes no YAML aliases; write the entry "
                           "out", event.start_mark)
        if self.depth >= MAX_DEPTH:
            raise _Refused(None, None, f"nested deeper than {MAX_DEPTH} levels; a run matrix needs a few",
                           event.start_mark)
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except ValueError as e:  # Python's own advice (sys.set_int_max_str_digits) is no fix for a matrix
            raise _Refused(None, None, str(e).split("; use sys.")[0], node.start_mark) from None


def parse(path: Path) -> Any:
    """The YAML document in ``path``, read within :data:`MAX_BYTES`, UTF-8, :class:`_Loader`'s limits; every
    way it fails a one-line :class:`MatrixError` with the line."""
    try:  # never blocks: a named pipe (or a device) waits for a writer that may never come
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise MatrixError(f"--matrix {path}: cannot be read ({e.strerror or e})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise MatrixError(f"--matrix {path} is not a regular file ({_file_kind(mode)}); give a YAML file (nothing was "
                          "run)")
    with open(fd, "rb") as f:
        try:
            data = f.read(MAX_BYTES + 1)
        except OSError as e:
            raise MatrixError(f"--matrix {path}: cannot be read ({e.strerror or e})") from None
    if len(data) > MAX_BYTES:
        raise MatrixError(f"--matrix {path}: over {MAX_BYTES // 1024} KiB; a run matrix is a short YAML file "
                          "(nothing was run)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise MatrixError(f"--matrix {path}, line {line}: not UTF-8 (byte 0x{data[e.start]:02x}); save the file as "
                          "UTF-8 (nothing was run)") from None
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        what = e.problem if isinstance(e, _Refused) else f"not YAML: {e.problem or e.context}"
        raise MatrixError(f"--matrix {path}{f', line {mark.line + 1}' if mark else ''}: {what} (nothing was run)"
                          ) from None
    except yaml.YAMLError as e:
        raise MatrixError(f"--matrix {path} is not YAML: {' '.join(str(e).split())} (nothing was run)") from None


def _file_kind(mode: int) -> str:
    for test, what in ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return "not a file"


def check(doc: Any) -> list[str]:
    """Every problem of a parsed matrix, one line each, naming the entry and the fix."""
    from .fleet import environment_problems

    if not isinstance(doc, Mapping):
        return [f"the file must be a mapping with {', '.join(KEYS)}; got {type(doc).__name__}"]
    problems = [f"{k}: unknown key (valid: {', '.join(KEYS)})" for k in doc if k not in KEYS]
    problems += _names("engines", doc.get("engines"), required=True, known=cells.engines())
    problems += _names("models", doc.get("models"))
    problems += _names("notebooks", doc.get("notebooks"))
    if not isinstance(doc.get("params", {}) or {}, Mapping):
        problems.append("params: a mapping of notebook parameters, e.g. {repeats: 3}")
    opts = doc.get("cell_options", [{}]) or [{}]
    if not isinstance(opts, list) or not all(isinstance(o, Mapping) for o in opts):
        problems.append("cell_options: a list of mappings, e.g. [{}, {tokens_per_block: 64}]")
    envs = doc.get("environments") or {}
    if not isinstance(envs, Mapping):
        problems.append("environments: a mapping of name -> runtime_env, e.g. {a: {pip: [\"pkg==1.0\"]}}")
    else:
        for name, env in envs.items():
            if not isinstance(name, str) or not _NAME.match(name):
                problems.append(f"environments.{name}: a name of letters, digits, '.', '_' or '-'")
            problems += environment_problems(str(name), env)
    problems += _resources(doc.get("resources") or {})
    return problems + [p for k, v in doc.items() if k != "resources" for p in _nonfinite(v, str(k))]


def _nonfinite(value: Any, key: str) -> list[str]:
    """Every NaN or infinity under ``key``: no parameter or option means either (each notebook checks the
    range of its own parameters)."""
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{key}: {value!r} is not a value to run with; give a finite number"]
    if isinstance(value, Mapping):
        return [p for k, v in value.items() for p in _nonfinite(v, f"{key}.{k}")]
    return [p for i, v in enumerate(value) for p in _nonfinite(v, f"{key}[{i}]")] if isinstance(value, list) else []


def _names(key: str, value: Any, required: bool = False, known: list[str] | None = None) -> list[str]:
    if value is None:
        return [f"{key}: required, a list such as [llamacpp, vllm]"] if required else []
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        return [f"{key}: a non-empty list of names"]
    dupes = sorted({v for v in value if value.count(v) > 1})
    out = [f"{key}: {', '.join(dupes)} listed twice"] if dupes else []
    if known is not None:
        out += [f"{key}: unknown engine {v!r} (valid: {', '.join(known)})" for v in value if v not in known]
    return out


def _resources(res: Any) -> list[str]:
    if not isinstance(res, Mapping):
        return ["resources: a mapping of engine -> {num_cpus: N, num_gpus: N}"]
    out = []
    for engine, r in res.items():
        if not isinstance(r, Mapping) or set(r) - {"num_cpus", "num_gpus"}:
            out.append(f"resources.{engine}: only num_cpus and num_gpus, e.g. {{num_cpus: 2}}")
            continue
        out += [f"resources.{engine}.{k}: 0 or a number from {RESOURCE_RANGE[k][0]:g} to {RESOURCE_RANGE[k][1]:g}, "
                f"got {v!r}" for k, v in r.items() if not _in_range(v, *RESOURCE_RANGE[k])]
    return out


def _in_range(v: Any, lo: float, hi: float) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and (v == 0 or lo <= v <= hi)
