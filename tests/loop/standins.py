"""Stand-ins for the gate: the real llama.cpp cell with one fault each, registered under a test name; and
llama.cpp as its CUDA build reports itself, in-process and served, for the GPU run this machine cannot make.

The faulty ones stand for any subject engine (TensorRT-LLM cannot run here) that does less work than the turn
asked for, or produces other tokens than greedy decoding. The CUDA ones run the real engine on the CPU and add
only what a CUDA build's load log says of offload (llama.cpp ``src/llama-model.cpp``, ``load_tensors``: "offloaded
min(n_gpu_layers, n_layer + 1)/(n_layer + 1) layers to GPU", a negative n_gpu_layers meaning all of them;
llama-server's ``-ngl all`` is -2, ``auto`` -1, ``common/arg.cpp``). They live in tests only; no finding outside a
test comes from them.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from workbench import cells, models
from workbench.cells.llamacpp import served as llama_served
from workbench.cells.llamacpp import LlamaCppCell, LlamaCppOptions
from workbench.cells.llamacpp._internals import offloaded_layers


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


def cuda_offload_line(asked: int | str, n_layer: int) -> str:
    """The line a CUDA build of llama.cpp logs at load for ``n_gpu_layers = asked`` (negative: all; a string: a shell
    expression that computes the count)."""
    of = n_layer + 1  # the repeating layers and the output layer
    done = asked if isinstance(asked, str) else of if asked < 0 else min(asked, of)
    return f"load_tensors: offloaded {done}/{of} layers to GPU"


class CudaLogCell(LlamaCppCell):
    """The in-process cell as a CUDA build loads: the real cell, whose load log also says what it offloaded, read by
    the cell's own parser."""

    def __init__(self, model, o: LlamaCppOptions | None = None) -> None:
        super().__init__(model, o)
        asked = (o or LlamaCppOptions()).gpu_layers
        self._offloaded = offloaded_layers([cuda_offload_line(asked, self._ll.llama_model_n_layer(self._model))])


def cuda_llama_server(folder: Path, model: str) -> Path:
    """A llama-server that logs, before the real one starts, the offload line its CUDA build would for its ``-ngl``
    (``model``'s layers); point ``LLAMA_SERVER_ENV`` at it."""
    real = llama_served.llama_server_binary()
    n_layer = models.gguf_geometry(models.resolve(model).path)[0].layers
    script = folder / "llama-server"
    script.write_text(f"""#!/bin/sh
prev=
for a in "$@"; do
  if [ "$prev" = "-ngl" ]; then
    case "$a" in
      all) echo "{cuda_offload_line(-1, n_layer)}" ;;
      auto) ;;
      *) echo "{cuda_offload_line(f'$(( a < {n_layer + 1} ? a : {n_layer + 1} ))', n_layer)}" ;;
    esac
  fi
  prev=$a
done
exec {real} "$@"
""")
    script.chmod(0o755)
    return script


STANDINS = {"standin-one-token": "loop.standins:OneTokenCell", "standin-sampled": "loop.standins:SampledCell",
            "standin-runner-up": "loop.standins:RunnerUpCell", "standin-near-tie": "loop.standins:NearTieCell",
            "standin-plain": "workbench.cells.llamacpp:LlamaCppCell"}  # the control: no fault


def register(monkeypatch) -> None:
    """Register the stand-ins for one test only (undone after it, so no other test sees them)."""
    for name, target in STANDINS.items():
        monkeypatch.setitem(cells.ENGINES._targets, name, target)
