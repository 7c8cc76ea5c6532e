"""What a notebook passes its parameters to: the probes it runs, read from its own code, so that ``workbench run
-p key=value`` is checked against the probe's declared type and bounds before any kernel starts (a ``-p
pressure=abc`` otherwise fails in the notebook's fifth cell, seconds later, with a report written).

The notebook's code is the one home of which notebook parameter feeds which probe parameter: a call whose first
argument names a registered probe (``probes.run("retention.pinning_under_pressure", …, params=dict(pressure=
pressure, …))``, or a helper ``run("events.admission", seed=seed)``) maps each keyword given a bare name. The same
reading checks what a notebook hands the library beyond a probe's parameters (:data:`ARGUMENTS`): a probe's
``cell_options`` against the engine's options class, and the loop's ``trace`` and ``arms``.
"""

from __future__ import annotations

import ast
import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from .engine import WorkbenchError


@dataclass(frozen=True)
class ProbeCall:
    """One probe a notebook runs and, for each of that probe's parameters it sets, the notebook parameter it reads."""

    probe: str
    takes: Mapping[str, str]  # probe parameter → notebook parameter


@functools.cache
def probe_calls(nb: Path) -> tuple[ProbeCall, ...]:
    """The probe calls in ``nb``'s code cells (a cell that is not plain Python, e.g. a magic, is skipped)."""
    from . import probes

    calls = []
    for node in _calls(nb):
        name = _probe_named(node)
        if name is None or name not in probes.PROBES:
            continue
        fields = {f["name"] for f in probes.describe_params(name)}
        takes = {kw.arg: kw.value.id for sub in ast.walk(node) for kw in getattr(sub, "keywords", ())
                 if kw.arg in fields and isinstance(kw.value, ast.Name)}
        calls.append(ProbeCall(name, takes))
    return tuple(calls)


def _calls(nb: Path) -> list[ast.Call]:
    """Every call in ``nb``'s code cells that parse as Python."""
    found = []
    for source in _code_cells(nb):
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        found += [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
    return found


def _code_cells(nb: Path) -> list[str]:
    cells = json.loads(nb.read_text()).get("cells", [])
    return ["".join(c.get("source", "")) for c in cells if c.get("cell_type") == "code"]


def _probe_named(node: ast.AST) -> str | None:
    """The string a call passes first (a probe's name, where it is one)."""
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        value = node.args[0].value
        return value if isinstance(value, str) else None
    return None


def _cell_options(engine: str, value: Any) -> None:
    from . import cells

    if not isinstance(value, Mapping):
        raise ValueError(f"must be a mapping of cell option to value, got {value!r}")
    cells.check_options(engine, value)


def _trace(engine: str, value: Any) -> None:
    from .loop import traces

    traces.resolve(str(value))


def _arms(engine: str, value: Any) -> None:
    from . import loop

    if value != "auto":  # the notebook's own choice per engine (loop.default_arms)
        loop.parse_arms(value)


ARGUMENTS: Mapping[tuple[str, str], Callable[[str, Any], None]] = {
    ("cell_options", "cell_options"): _cell_options,  # probes.run(…, cell_options=cell_options) and helpers
    ("run_in_child", "trace"): _trace,  # loop.run_in_child(engine, trace, arms=arms, …)
    ("run_in_child", "arms"): _arms,
}
"""(the call, or a keyword any call takes; the argument) → its check (raises with what is wrong), for notebook
parameters handed to the library rather than to a probe's declared parameters."""


@functools.cache
def arguments(nb: Path) -> tuple[tuple[str, str, str], ...]:
    """(call or keyword, argument, the notebook parameter it reads) for each :data:`ARGUMENTS` entry ``nb``'s code
    feeds a bare name: by keyword, or by position (``run_in_child(engine, trace, …)``: the second is the trace)."""
    positional = {"run_in_child": ("engine", "trace")}
    found = set()
    for node in _calls(nb):
        callee = getattr(node.func, "attr", getattr(node.func, "id", ""))
        named = {kw.arg: kw.value for kw in node.keywords} | dict(zip(positional.get(callee, ()), node.args))
        for arg, value in named.items():
            key = next((k for k in ((callee, arg), (arg, arg)) if k in ARGUMENTS), None)
            if key and isinstance(value, ast.Name):
                found.add((*key, value.id))
    return tuple(sorted(found))


def problem(nb: Path, given: Mapping[str, Any], defaults: Mapping[str, Any], engine: str | None = None) -> str | None:
    """Each probe ``nb`` runs that takes a parameter in ``given`` gets what the notebook would pass it (``given``
    over the notebook's ``defaults``), read as the probe reads it; the first value of the wrong type or below its
    bound, in words naming the notebook, the probe and the parameter (None: every one reads). With ``engine``, the
    values ``given`` hands the library beyond a probe's parameters (:data:`ARGUMENTS`) are checked too."""
    from . import probes

    for where, arg, name in arguments(nb) if engine is not None else ():
        if name in given:
            try:
                ARGUMENTS[(where, arg)](engine, given[name])
            except (WorkbenchError, ValueError, TypeError) as e:
                return f"notebook {nb.stem}: parameter {name}: {e}"
    for call in probe_calls(nb):
        if not given.keys() & set(call.takes.values()):
            continue
        values = {k: given[v] if v in given else defaults[v] for k, v in call.takes.items()
                  if v in given or v in defaults}
        try:
            probes.parse_params(probes.get(call.probe), values)
        except WorkbenchError as e:
            return f"notebook {nb.stem} runs {e}"
    return None
