"""Engine registry: cells are registered by name and imported only when opened.

``import workbench`` never imports an engine; ``open_cell("llamacpp", …)`` imports llama_cpp,
``open_cell("trtllm", …)`` imports tensorrt_llm and ``open_cell("vllm", …)`` imports vllm (or
raises EngineUnavailable with the reason). The served engines (``llamacpp-server``, ``vllm-server``,
``trtllm-serve``) start a server process and talk HTTP to it, or attach to one (``endpoint=URL``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from ..contract import Cell, EngineUnavailable, observer_mismatches
from ..registry import Registry

ENGINES: Registry = Registry("engine", requires=("open", "availability"))
ENGINES.register("llamacpp", "workbench.cells.llamacpp:LlamaCppCell")
ENGINES.register("trtllm", "workbench.cells.trtllm.cell:TrtLlmCell")
ENGINES.register("vllm", "workbench.cells.vllm.cell:VllmCell")
# Served engines: the same contract over each server's HTTP API (each wing's served.py, workbench.serve).
ENGINES.register("llamacpp-server", "workbench.cells.llamacpp.served:LlamaServerCell")
ENGINES.register("vllm-server", "workbench.cells.vllm.served:VllmServerCell")
ENGINES.register("trtllm-serve", "workbench.cells.trtllm.served:TrtllmServeCell")
SERVED = {"llamacpp-server": "llamacpp", "vllm-server": "vllm", "trtllm-serve": "trtllm"}
"""Each served engine and the in-process engine its server runs."""


def runs(engine: str) -> str:
    """The engine that does the work behind ``engine``: a served engine's in-process twin, else ``engine`` itself
    (a claim about TensorRT-LLM is answered by ``trtllm`` and ``trtllm-serve`` alike)."""
    return SERVED.get(engine, engine)


@dataclass(frozen=True)
class Availability:
    engine: str
    available: bool
    version: str | None
    reason: str | None = None
    details: dict = field(default_factory=dict)


def known_options(cls: type, engine: str, options: Mapping[str, Any]) -> dict:
    """``options`` as a dict, refused with the valid names when one is not a field of the options dataclass ``cls``."""
    names = {f.name for f in fields(cls)}
    if unknown := sorted(set(options) - names):
        raise TypeError(f"unknown {engine} cell option(s) {', '.join(unknown)}; valid: {', '.join(sorted(names))}")
    return dict(options)


def register(name: str, target: str) -> None:
    """Register an engine as ``"module:Class"``; resolved lazily on first use."""
    ENGINES.register(name, target)


def engines(*, served: bool = True) -> list[str]:
    """Every registered engine; ``served=False``: the in-process ones only (a report's empty panels)."""
    return [e for e in ENGINES.names() if served or e not in SERVED]


def cell_class(engine: str) -> Any:
    return ENGINES.get(engine)


def preload(engine: str) -> tuple[str, ...]:
    """The modules a child working ``engine`` imports anyway (its cell's module and the cell's ``preload``), for
    :func:`workbench.isolate.call`; none for an engine whose cell cannot be imported here."""
    try:
        cls = cell_class(engine)
    except Exception:  # noqa: BLE001 - an unknown or broken engine is reported by the call itself
        return ()
    return (cls.__module__, *getattr(cls, "preload", ()))


def availability(engine: str) -> Availability:
    """Whether ``engine`` can run here, without opening a model. Never raises for a known engine."""
    return cell_class(engine).availability()


def open_cell(engine: str, model: str, **options: Any) -> Cell:
    """Open a context-managed cell of ``engine`` on ``model`` (a spec for :func:`workbench.models.resolve`)."""
    cls = cell_class(engine)
    avail = cls.availability()
    if not avail.available:
        raise EngineUnavailable(engine, avail.reason or "unknown reason")
    cell = cls.open(model, **options)
    try:
        _check_observers(engine, cls, cell)
    except BaseException:
        cell.close()
        raise
    return cell


_CHECKED: set[tuple[type, tuple[str, ...]]] = set()  # (cell class, observers it announced) already checked


def _check_observers(engine: str, cls: type, cell: Cell) -> None:
    """Check the observers a cell announces against their Protocols once per class and announced set (as pluggy
    checks a hook implementation at ``register()``), so a drifted method fails at open, not inside a probe."""
    announced = tuple(cell.describe().observers)
    if (cls, announced) in _CHECKED:
        return
    problems = observer_mismatches(cell, announced)
    if problems:
        raise TypeError(f"the {engine} cell ({cls.__qualname__}) announces observers it does not implement as "
                        f"declared in workbench.contract: {'; '.join(problems)}")
    _CHECKED.add((cls, announced))


__all__ = ["SERVED", "Availability", "availability", "cell_class", "known_options", "engines", "open_cell", "register",
           "runs"]
