"""Is an arm's output a greedy decode of the model? Read, teacher-forced, from a llama.cpp scorer.

Two engines doing the same greedy work need not emit the same tokens: where two logits nearly tie, another
batch shape or kernel breaks the tie the other way, and the outputs part from there (llama-server against the
in-process cell, measured in ``make run``). Token identity with one reference arm would then bar a fair arm,
and a wide token tolerance would admit an unfair one. The scorer instead evaluates the turn's prompt plus the
arm's own output on a plain llama.cpp cell of the same model and reads, at every position, how far the emitted
token lies below that position's top logit (:meth:`~workbench.cells.llamacpp.LlamaCppCell.greedy_gaps`). A
greedy decode stays within a near-tie margin at every token; a token greedy decoding would not pick (sampling,
unchecked drafts, another model) does not. The scorer's time is outside every arm's timing.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Sequence

from .. import cells


@dataclass(frozen=True)
class Greedy:
    """What the scorer read for one output (gaps in standard deviations of the position's logits)."""

    max_gap_sd: float  # the largest gap between the scorer's top token and the emitted one (0.0: all argmax)
    at: int | None  # the output position of that largest gap (None: empty output)
    stop_gap_sd: float  # after the output: the best end-of-generation token's gap (0.0: greedy would stop there)

    def as_row(self) -> dict:
        """The per-turn row's columns (:func:`.equal.mark` reads them)."""
        return {"greedy_gap_sd": self.max_gap_sd, "greedy_gap_at": self.at, "stop_gap_sd": self.stop_gap_sd}


class Scorer:
    """A plain llama.cpp cell of the loop's model (the one that tokenizes the trace), one slot. Successive
    turns of a session extend each other, so its prefix cache makes each turn's scoring cost about one
    warm arm's prefill plus one batched pass over each distinct output."""

    def __init__(self, model: str, *, context_tokens: int, threads: int) -> None:
        self.cell = cells.open_cell("llamacpp", model, context_tokens=context_tokens, threads=threads)
        self.model, self.threads = self.cell.model, threads
        self.vocab = int(self.cell.describe().extra["vocab_size"])
        self.elapsed_s = 0.0  # wall time spent scoring, outside every arm's timing (recorded in the workload)

    def score(self, prompt: Sequence[int], output: Sequence[int]) -> Greedy:
        """``output`` scored after ``prompt`` (token ids; a prompt has at least two, a BOS and more)."""
        if len(prompt) < 2:
            raise ValueError(f"the scorer needs a prompt of at least 2 tokens, got {len(prompt)}")
        bad = next((i for i, t in enumerate(output) if not 0 <= t < self.vocab), None)
        if bad is not None:  # no model picks a token it does not have: infinitely far from greedy
            return Greedy(math.inf, bad, math.inf)
        t0 = time.perf_counter()
        self.cell.ensure_prefix(list(prompt[:-1]))
        gaps, stop = self.cell.greedy_gaps([prompt[-1], *output])  # gaps[i]: output[i] after prompt + output[:i]
        self.elapsed_s += time.perf_counter() - t0
        if not gaps:
            return Greedy(0.0, None, stop)
        at = max(range(len(gaps)), key=gaps.__getitem__)
        return Greedy(gaps[at], at, stop)

    def describe(self) -> dict:
        return {"engine": "llamacpp", "model": self.model.name, "sha256": self.model.sha256,
                "threads": self.threads, "elapsed_s": self.elapsed_s}

    def close(self) -> None:
        self.cell.close()


__all__ = ["Greedy", "Scorer"]
