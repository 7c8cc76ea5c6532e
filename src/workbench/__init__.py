"""workbench: settles, by measurement, whether an inference engine honours modeld's KV-cache contract.

Importing the package never imports an engine: cells and probes are registered by name and
resolved lazily (``workbench.cells.open_cell``, ``workbench.probes.run``).
"""

from .engine import (
    Cell,
    ContextOverflow,
    EngineUnavailable,
    ManifestMismatch,
    UnsupportedFeature,
    WorkbenchError,
)
from .cells import open_cell

__version__ = "0.1.0"

__all__ = [
    "Cell",
    "ContextOverflow",
    "EngineUnavailable",
    "ManifestMismatch",
    "UnsupportedFeature",
    "WorkbenchError",
    "open_cell",
    "__version__",
]
