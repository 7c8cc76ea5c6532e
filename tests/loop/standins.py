"""Stand-in subjects for the gate: the real llama.cpp cell with one fault each, registered under a test name.

They stand for any subject engine (TensorRT-LLM cannot run here) that does less work than the turn asked
for, or produces other tokens than greedy decoding. They live in tests only; no finding outside a test
comes from them.
"""

from __future__ import annotations

from workbench import cells
from workbench.cells.llamacpp import LlamaCppCell


class OneTokenCell(LlamaCppCell):
    """Decodes one token whatever the turn asked for (finish ``length``): less work, so faster."""

    def decode(self, *, max_tokens: int = 16, **kw):
        return super().decode(max_tokens=1, **kw)


class SampledCell(LlamaCppCell):
    """Decodes every token asked, but sampled at temperature 1: the same work, other tokens."""

    def decode(self, *, max_tokens: int = 16, temperature: float = 0.0, seed: int = 0, **kw):
        return super().decode(max_tokens=max_tokens, temperature=1.0, seed=7, **kw)


STANDINS = {"standin-one-token": "loop.standins:OneTokenCell", "standin-sampled": "loop.standins:SampledCell",
            "standin-plain": "workbench.cells.llamacpp:LlamaCppCell"}  # the control: no fault


def register(monkeypatch) -> None:
    """Register the stand-ins for one test only (undone after it, so no other test sees them)."""
    for name, target in STANDINS.items():
        monkeypatch.setitem(cells.ENGINES._targets, name, target)
