"""What the static probes share: they read the installed engine package and take no parameters."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from .. import cells
from . import NotRunnable


@dataclass(frozen=True)
class NoParams:
    pass


def package_dir(engine: str) -> Path:
    """The engine package's installed directory (the cell's ``package``), found without importing it. A served
    engine's is the package of the engine its server runs (``vllm serve`` is vllm, ``trtllm-serve`` is
    tensorrt_llm; llama-server is built from the llama.cpp that llama_cpp vendors)."""
    name = cells.cell_class(cells.runs(engine)).package
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise NotRunnable(f"{name} is not installed; this static survey needs the package (not a GPU)")
    return Path(next(iter(spec.submodule_search_locations)))
