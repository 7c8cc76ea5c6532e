"""Engine registry: cells are registered by name and imported only when opened.

``import workbench`` never imports an engine; ``open_cell("llamacpp", …)`` imports llama_cpp,
``open_cell("trtllm", …)`` imports tensorrt_llm and ``open_cell("vllm", …)`` imports vllm (or
raises EngineUnavailable with the reason).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from ..contract import Cell, EngineUnavailable

_REGISTRY: dict[str, str] = {
    "llamacpp": "workbench.cells.llamacpp:LlamaCppCell",
    "trtllm": "workbench.cells.trtllm:TrtLlmCell",
    "vllm": "workbench.cells.vllm:VllmCell",
}


@dataclass(frozen=True)
class Availability:
    engine: str
    available: bool
    version: str | None
    reason: str | None = None
    details: dict = field(default_factory=dict)


def register(name: str, target: str) -> None:
    """Register an engine as ``"module:Class"``; resolved lazily on first use."""
    if name in _REGISTRY and _REGISTRY[name] != target:
        raise ValueError(f"engine {name!r} is already registered as {_REGISTRY[name]}")
    _REGISTRY[name] = target


def engines() -> list[str]:
    return sorted(_REGISTRY)


def cell_class(engine: str) -> Any:
    try:
        target = _REGISTRY[engine]
    except KeyError:
        raise ValueError(f"unknown engine {engine!r}; valid engines: {', '.join(engines())}") from None
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)


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
