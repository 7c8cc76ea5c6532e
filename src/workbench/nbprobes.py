"""What a notebook passes its parameters to: the probes it runs, read from its own code, so that ``workbench run
-p key=value`` is checked against the probe's declared type and bounds before any kernel starts (a ``-p
pressure=abc`` otherwise fails in the notebook's fifth cell, seconds later, with a report written).

The notebook's code is the one home of which notebook parameter feeds which probe parameter: a call whose first
argument names a registered probe (``probes.run("retention.pinning_under_pressure", …, params=dict(pressure=
pressure, …))``, or a helper ``run("events.admission", seed=seed)``) maps each keyword given a bare name.
"""

from __future__ import annotations

import ast
import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .contract import WorkbenchError


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
    for source in _code_cells(nb):
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            name = _probe_named(node)
            if name is None or name not in probes.PROBES:
                continue
            fields = {f["name"] for f in probes.describe_params(name)}
            takes = {kw.arg: kw.value.id for sub in ast.walk(node) for kw in getattr(sub, "keywords", ())
                     if kw.arg in fields and isinstance(kw.value, ast.Name)}
            calls.append(ProbeCall(name, takes))
    return tuple(calls)


def _code_cells(nb: Path) -> list[str]:
    cells = json.loads(nb.read_text()).get("cells", [])
    return ["".join(c.get("source", "")) for c in cells if c.get("cell_type") == "code"]


def _probe_named(node: ast.AST) -> str | None:
    """The string a call passes first (a probe's name, where it is one)."""
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        value = node.args[0].value
        return value if isinstance(value, str) else None
    return None


def problem(nb: Path, given: Mapping[str, Any], defaults: Mapping[str, Any]) -> str | None:
    """Each probe ``nb`` runs that takes a parameter in ``given`` gets what the notebook would pass it (``given``
    over the notebook's ``defaults``), read as the probe reads it; the first value of the wrong type or below its
    bound, in words naming the notebook, the probe and the parameter (None: every one reads)."""
    from . import probes

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
