"""Stand-in subjects for the gate: the real llama.cpp cell with one fault each, registered under a test name.

They stand for any subject engine (TensorRT-LLM cannot run here) that does less work than the turn asked
for, or produces other tokens than greedy decoding. They live in tests only; no finding outside a test
comes from them.
"""

from __future__ import annotations

import dataclasses
import time

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


class RunnerUpCell(LlamaCppCell):
    """Emits the runner-up as its first token, then decodes greedily from there: the same work but other tokens
    where the two logits nearly tie (``max_gap`` σ: another engine's arithmetic breaking the tie the other way,
    as llama-server does against the in-process cell), a token greedy decoding would not pick where they do not."""

    max_gap = float("inf")

    def decode(self, *, slot: int = 0, max_tokens: int = 16, **kw):
        import numpy as np

        logits = np.asarray(self.last_logits(slot=slot))
        top, second = (int(t) for t in np.argsort(logits)[::-1][:2])
        if max_tokens < 2 or self.is_eog(second) or (logits[top] - logits[second]) / logits.std() > self.max_gap:
            return super().decode(slot=slot, max_tokens=max_tokens, **kw)
        t0 = time.perf_counter()
        self.prefill_suffix([second], slot=slot)
        first = time.perf_counter() - t0
        rest = super().decode(slot=slot, max_tokens=max_tokens - 1, **kw)
        return dataclasses.replace(rest, tokens=[second, *rest.tokens], ttft_s=first,
                                   token_times_s=[first, *(first + t for t in rest.token_times_s)])


class NearTieCell(RunnerUpCell):
    """The runner-up only where it lies within 0.2 σ of the top logit (the loop's margin is 0.25 σ)."""

    max_gap = 0.2


STANDINS = {"standin-one-token": "loop.standins:OneTokenCell", "standin-sampled": "loop.standins:SampledCell",
            "standin-runner-up": "loop.standins:RunnerUpCell", "standin-near-tie": "loop.standins:NearTieCell",
            "standin-plain": "workbench.cells.llamacpp:LlamaCppCell"}  # the control: no fault


def register(monkeypatch) -> None:
    """Register the stand-ins for one test only (undone after it, so no other test sees them)."""
    for name, target in STANDINS.items():
        monkeypatch.setitem(cells.ENGINES._targets, name, target)
