"""The llama.cpp cell, split the way llama-cpp-python splits itself.

* :mod:`._internals` — the one ``import llama_cpp``, its log captured, model parameters, the one batch fill;
* :mod:`.state` — the one reader of a sequence's state blob (KV cell positions and row sizes);
* :mod:`.llama_chat_format` — chat messages through the model's own template;
* :mod:`.surface` — the C functions each contract row is served by (``surface.*`` probes);
* :mod:`.llama` — :class:`LlamaCppCell`, the contract on one ``llama_context``.

Importing this package never imports llama_cpp: :func:`._internals.lib` does, when a cell opens.
"""

from __future__ import annotations

from ._internals import decide_extra_buffers, model_params
from .llama import ABSENT, ENGINE, LlamaCppCell, LlamaCppOptions
from .surface import C_SIGNATURES, EXPECTED_AGAINST, SURFACE, surface_rows

__all__ = ["ABSENT", "C_SIGNATURES", "ENGINE", "EXPECTED_AGAINST", "LlamaCppCell", "LlamaCppOptions", "SURFACE",
           "decide_extra_buffers", "model_params", "surface_rows"]
