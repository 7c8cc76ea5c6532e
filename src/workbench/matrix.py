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

The whole file is checked before anything runs, every bad entry named (:class:`MatrixError`, exit 2). Jobs
whose axes have several values land in ``notebooks/<engine>/<environment>__<model>__options-N/`` (only the
axes that vary), all in one run folder, so the churn rule reads each release's survey from it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from . import cells, models
from .contract import WorkbenchError
from .executors import Job, Resources, resources_for

KEYS = ("notebooks", "engines", "models", "params", "cell_options", "environments", "resources")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


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
    """Read and check a matrix file; :class:`MatrixError` listing every bad entry."""
    import yaml

    try:
        doc = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise MatrixError(f"--matrix {path}: cannot be read ({e.strerror or e})") from None
    except yaml.YAMLError as e:
        raise MatrixError(f"--matrix {path} is not YAML: {e}") from None
    problems = check(doc)
    if problems:
        raise MatrixError(f"--matrix {path}: fix these entries (nothing was run):\n  " + "\n  ".join(problems))
    return Matrix(tuple(doc["engines"]), tuple(doc.get("models") or (models.DEFAULT_MODEL,)),
                  tuple(doc["notebooks"]) if doc.get("notebooks") else None, dict(doc.get("params") or {}),
                  tuple(doc.get("cell_options") or ({},)), dict(doc.get("environments") or {}),
                  {e: Resources(float(r.get("num_cpus", 1)), float(r.get("num_gpus", 0)))
                   for e, r in (doc.get("resources") or {}).items()})


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
    return problems


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
        out += [f"resources.{engine}.{k}: a number ≥ 0, got {v!r}" for k, v in r.items()
                if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0]
    return out
