"""Engine registry: cells are registered by name and imported only when opened.

``import workbench`` never imports an engine; ``open_cell("llamacpp", …)`` imports llama_cpp,
``open_cell("trtllm", …)`` imports tensorrt_llm and ``open_cell("vllm", …)`` imports vllm (or
raises EngineUnavailable with the reason).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..contract import Cell, EngineUnavailable
from ..registry import Registry

ENGINES: Registry = Registry("engine", requires=("open", "availability"))
ENGINES.register("llamacpp", "workbench.cells.llamacpp:LlamaCppCell")
ENGINES.register("trtllm", "workbench.cells.trtllm:TrtLlmCell")
ENGINES.register("vllm", "workbench.cells.vllm:VllmCell")


@dataclass(frozen=True)
class Availability:
    engine: str
    available: bool
    version: str | None
    reason: str | None = None
    details: dict = field(default_factory=dict)


def register(name: str, target: str) -> None:
    """Register an engine as ``"module:Class"``; resolved lazily on first use."""
    ENGINES.register(name, target)


def engines() -> list[str]:
    return ENGINES.names()


def cell_class(engine: str) -> Any:
    return ENGINES.get(engine)


def availability(engine: str) -> Availability:
    """Whether ``engine`` can run here, without opening a model. Never raises for a known engine."""
    return cell_class(engine).availability()


def open_cell(engine: str, model: str, **options: Any) -> Cell:
    """Open a context-managed cell of ``engine`` on ``model`` (a spec for :func:`workbench.models.resolve`)."""
    cls = cell_class(engine)
    avail = cls.availability()
    if not avail.available:
        raise EngineUnavailable(engine, avail.reason or "unknown reason")
    return cls.open(model, **options)


__all__ = ["Availability", "availability", "cell_class", "engines", "open_cell", "register"]
