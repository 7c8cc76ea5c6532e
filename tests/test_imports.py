"""Importing the package never imports an engine (lazy registries); no import circle; no import up a layer."""

from __future__ import annotations

import subprocess
import sys


def test_import_workbench_imports_no_engine():
    code = ("import sys, workbench, workbench.probes, workbench.findings, workbench.cli, workbench.doctor;"
            "import workbench.cells;"
            "bad = [m for m in ('llama_cpp', 'tensorrt_llm', 'vllm', 'torch') if m in sys.modules];"
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_unknown_engine_lists_the_valid_ones():
    import pytest

    from workbench import cells

    with pytest.raises(ValueError, match="valid engines: llamacpp, llamacpp-server, trtllm, trtllm-serve, vllm, vllm-server"):
        cells.open_cell("sglang", "synthetic:tiny")


def _import_graph() -> dict[str, set[str]]:
    """Every module of src/workbench and the workbench modules it imports, at module level or inside a
    function alike: a lazy import still closes a circle, it only hides it until the function runs. A
    submodule's ``from . import sibling`` names the sibling, not its package, so edges to a module's own
    packages are left out (importing a submodule always runs its package first)."""
    import ast
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1] / "src" / "workbench"
    mods = {}
    for f in root.rglob("*.py"):
        parts = f.relative_to(root).with_suffix("").parts
        mods[".".join(("workbench", *parts)).removesuffix(".__init__")] = f
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, f in mods.items():
        pkg = name if f.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(f.read_text())):  # every Import/ImportFrom, however deep
            if isinstance(node, ast.ImportFrom):
                base = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)] if node.level else []
                mod = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module
                targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in mods else mod for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in mods and t != name and not name.startswith(t + ".")}
    return graph


def test_no_import_cycle_between_modules():
    """No module imports, directly or through others, a module that imports it back (function-level imports
    included, so a circle cannot hide behind a lazy import)."""
    graph = _import_graph()
    mods = graph

    def cycle_from(start: str) -> list[str] | None:
        stack, path = [(start, iter(graph[start]))], [start]
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                path.pop()
            elif nxt == start:
                return path + [start]
            elif nxt not in path:
                stack.append((nxt, iter(graph[nxt])))
                path.append(nxt)
        return None

    cycles = [c for m in mods if (c := cycle_from(m))]
    assert cycles == []


def test_no_probe_asks_which_engine_it_is():
    """A probe compares the engine it runs on with its claim's subject, never with an engine's name: each engine's
    tables and wording live with its cell."""
    import ast
    import pathlib

    from workbench import cells

    root = pathlib.Path(__file__).resolve().parents[1] / "src" / "workbench" / "probes"
    names = set(cells.engines())
    found = [f"{f.name}:{node.lineno}" for f in sorted(root.glob("*.py")) for node in ast.walk(ast.parse(f.read_text()))
             if isinstance(node, ast.Compare)
             and any(isinstance(c, ast.Constant) and c.value in names for c in (node.left, *node.comparators))]
    assert found == []


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_one_job_runs_in_a_room_below_the_batch_runner_and_the_fleet():
    """Running one notebook job (jobs.py) is what the local executor (runner.py) and the Ray fleet (fleet.py) both
    run through, so it reaches neither of them nor what sits above them; the checkout's root is a leaf's fact
    (files.py), so the loop finds its traces without reaching the batch runner."""
    graph = _import_graph()
    assert {"workbench.runner", "workbench.fleet"} <= {m for m, imports in graph.items() if "workbench.jobs" in imports}
    above = {"workbench.runner", "workbench.fleet", "workbench.matrix", "workbench.cli", "workbench.report"}
    up = {m for m in _reach(graph, "workbench.jobs")
          if m in above or m.startswith(("workbench.cells", "workbench.probes", "workbench.loop"))}
    assert up == set()
    assert [m for m in graph if m.startswith("workbench.loop") and "workbench.runner" in _reach(graph, m)] == []
    assert _reach(graph, "workbench.files") <= {"workbench.engine"}


WING_NAMES = {"llamacpp": r"llama_?cpp|llama_?server", "vllm": r"vllm", "trtllm": r"trtllm|tensorrt"}
"""How code names each in-process engine: its package, its wing's modules, its classes and functions."""

NAMES_ENGINES = {
    "workbench.cli": "`workbench bench` runs llama.cpp's own overhead bench (cells/llamacpp/bench.py), as the CLI "
                     "lists engines",
    "workbench.models.hf": "llama.cpp's loader is the fast reader of a GGUF file's metadata (a file format)",
    "workbench.evaltable": "the eval-backend table names each served backend it measures, with its wing's "
                           "launch line and identity (seed 004's table is backends side by side)",
    "workbench.loop": "the loop's arms are declared per engine, and its headline compares each arm with the best "
                      "llama.cpp arm (speedup_vs_best_llamacpp)",
}
"""Modules outside a wing that name an engine, each with why (a prefix covers its submodules)."""


def _names(tree) -> set[str]:
    """Every identifier a module's code uses: imported modules and names, names, attributes, definitions,
    arguments and keywords (strings and docstrings are prose and registry keys, not code naming an engine)."""
    import ast

    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {getattr(node, "module", None) or "", *(a.name for a in node.names), *(a.asname or "" for a in node.names)}
        elif isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.arg, ast.keyword)):
            out.add(node.arg or "")
    return out - {""}


def test_no_module_outside_an_engines_wing_names_that_engine():
    """Adding an engine touches its wing (cells/<engine>/), its registration and its tests: no other module
    imports, calls or defines anything of an engine's, beyond the short list of :data:`NAMES_ENGINES`."""
    import ast
    import pathlib
    import re

    from workbench import cells

    assert set(WING_NAMES) == set(cells.engines(served=False))
    root = pathlib.Path(__file__).resolve().parents[1] / "src" / "workbench"
    found = []
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root)
        module = ".".join(("workbench", *rel.with_suffix("").parts)).removesuffix(".__init__")
        if any(module == m or module.startswith(m + ".") for m in NAMES_ENGINES):
            continue
        names = _names(ast.parse(f.read_text()))
        for engine, pattern in WING_NAMES.items():
            if rel.parts[:2] != ("cells", engine):
                found += [f"{module} names {engine}: {n}" for n in sorted(names) if re.search(pattern, n, re.I)]
    assert found == []


def test_every_engine_declares_its_facts_and_they_load():
    """Each engine's declared facts (its registration) load: the options dataclass, and the event plane's calls
    with the parameters the spec names, or no plane at all."""
    from workbench import cells

    for engine in cells.engines():
        assert cells.options_class(engine).__dataclass_fields__
        assert cells.runs(engine) in cells.engines(served=False)
        plane = cells.event_plane(engine)
        assert plane is None or callable(plane.hasher)


LAYERS = ("contract", "engine", "findings", "probes", "standing", "views", "commands")
"""The layers, bottom first: a module imports its own layer's modules and those of the layers below it, never one
above (a function-level import counts: it only runs later). docs/architecture.md lists every room in this order."""

LAYER_OF = {
    # contract: modeld's session contract and its wire, as contenox layers them (runtime/transport and
    # transport/grpc): it knows no engine and nothing else of the workbench, so contenox's benchmark report
    # (transport/benchreport.py) is driven through the contract only
    "workbench.transport": "contract",
    # engine: the engine layer (engine.py, cells/ with each engine's wing and its session adapter), the session
    # adapters' base, the model slot and the daemon that serve a cell, what an engine answers to the event plane
    # and to the gateway's P/D, and what all of them stand on: models, processes, the machine, the declared
    # claims, metrics and result classes
    "workbench": "engine", "workbench.engine": "engine", "workbench.cells": "engine",
    "workbench.transport.session": "engine", "workbench.transport.service": "engine",
    "workbench.transport.daemon": "engine",
    "workbench.events.plane": "engine", "workbench.events.sources": "engine", "workbench.events.hashing": "engine",
    "workbench.gateway.pd": "engine",
    "workbench.registry": "engine", "workbench.models": "engine", "workbench.adapters": "engine",
    "workbench.serve": "engine", "workbench.isolate": "engine", "workbench._forkserver_guard": "engine",
    "workbench._forkserver_frozen": "engine", "workbench.lifecycle": "engine", "workbench.envvars": "engine",
    "workbench.environment": "engine", "workbench.cpu": "engine", "workbench.nvml": "engine",
    "workbench.files": "engine", "workbench.params": "engine", "workbench.progress": "engine",
    "workbench.observe": "engine", "workbench.versions": "engine", "workbench.claims": "engine",
    "workbench.metrics": "engine", "workbench.certify.classes": "engine",
    # findings: the schema-checked store every experiment writes, the record each finding is bound to (its ledger
    # line), and a run's record beside it
    "workbench.findings": "findings", "workbench.ledger": "findings", "workbench.manifest": "findings",
    # probes: experiments on fresh cells that write findings (the probes, the loop, certify's gates and quality
    # smoke, the gateway's pool, the event plane's consumer, the eval table, the TensorRT-LLM smoke)
    "workbench.probes": "probes", "workbench.loop": "probes", "workbench.certify": "probes",
    "workbench.gateway": "probes", "workbench.events": "probes", "workbench.evaltable": "probes",
    "workbench.smoke": "probes",
    # standing: each stored verdict re-derived (settle), which one stands per claim, and certify's matrix and
    # product path, built from the findings that settle
    "workbench.settle": "standing", "workbench.standing": "standing",
    "workbench.certify.matrix": "standing", "workbench.certify.product": "standing",
    # views: what a researcher reads: the report and its words, every package's figures, the blueprint's and the
    # gateway guide's write-backs, the findings' export, the notebooks' helpers
    "workbench.report": "views", "workbench.reading": "views", "workbench.compare": "views",
    "workbench.notebook_html": "views", "workbench.plots": "views", "workbench.panels": "views",
    "workbench.plotstyle": "views", "workbench.transport.figures": "views", "workbench.certify.figures": "views",
    "workbench.events.figures": "views", "workbench.gateway.figures": "views",
    "workbench.gateway.pd_figures": "views", "workbench.evaltable.figures": "views",
    "workbench.blueprint": "views", "workbench.certify.writeback": "views", "workbench.events.guide": "views",
    "workbench.findings_export": "views", "workbench.widgets": "views", "workbench.nbprobes": "views",
    # commands: the command line and the batch runner around everything (one job, where jobs execute, lanes, the
    # Ray fleet, the run matrix, the run's lock and index), each package's own command
    "workbench.cli": "commands", "workbench.doctor": "commands", "workbench.runner": "commands",
    "workbench.runlock": "commands", "workbench.runindex": "commands", "workbench.jobs": "commands",
    "workbench.executors": "commands", "workbench.lanes": "commands", "workbench.fleet": "commands",
    "workbench.matrix": "commands", "workbench.certify.cli": "commands", "workbench.events.cli": "commands",
}
"""Module prefix → layer: a module's layer is its longest matching row's (``workbench.events`` covers the event
plane's modules, ``workbench.events.cli`` is a command); the row ``workbench`` is the package's own
``__init__.py`` only, so a new top-level module has no row until it is given one."""


def layer_of(module: str) -> str | None:
    rows = [p for p in LAYER_OF if module == p or (p != "workbench" and module.startswith(p + "."))]
    return LAYER_OF[max(rows, key=len)] if rows else None


def test_every_module_has_a_layer_and_every_row_a_module():
    graph = _import_graph()
    assert set(LAYER_OF.values()) <= set(LAYERS)
    missing = [f"{m} has no row in LAYER_OF (tests/test_imports.py): give it its layer" for m in sorted(graph)
               if layer_of(m) is None]
    stale = [f"LAYER_OF's row {p} names no module" for p in LAYER_OF
             if not any(m == p or m.startswith(p + ".") for m in graph)]
    assert missing + stale == [], "\n".join(missing + stale)


def test_no_import_runs_up_a_layer():
    """Data walks one way (DEVELOPERS.md, "No import up a layer"): no module imports, at module level or inside a
    function, a module of a higher layer. Fix one by moving the code to the layer it belongs to, or by passing what
    it needs in from above (a callable, a value)."""
    graph = _import_graph()
    rank = {m: LAYERS.index(layer_of(m)) for m in graph if layer_of(m)}
    up = [f"{m} ({layer_of(m)}) imports {t} ({layer_of(t)}), a layer above it" for m in sorted(rank)
          for t in sorted(graph[m]) if t in rank and rank[t] > rank[m]]
    assert up == [], "\n".join(up)
