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

from .. import cells, models


SCORING = ("decode-like: the prompt prefilled as an arm prefills it, then each output token evaluated alone on the "
           "KV cache, as greedy decoding evaluates it (teacher forcing in one batch takes other kernels, whose "
           "logits part from decode's by more than a near-tie)")


@dataclass(frozen=True)
class Greedy:
    """What the scorer read for one output (gaps in standard deviations of the position's logits)."""

    max_gap_sd: float  # the largest gap between the scorer's top token and the emitted one (0.0: all argmax)
    at: int | None  # the output position of that largest gap (None: empty output)
    stop_gap_sd: float  # after the output: the best end-of-generation token's gap (0.0: greedy would stop there)

    def as_row(self) -> dict:
        """The per-turn row's columns (:func:`.equal.mark` reads them)."""
        return {"greedy_gap_sd": self.max_gap_sd, "greedy_gap_at": self.at, "stop_gap_sd": self.stop_gap_sd}


@dataclass(frozen=True)
class ScorerModel:
    """The model the scorer runs, and why (stated in every finding)."""

    spec: str
    chosen_by: str


def scorer_model(model: str, subject: str, subject_model: str | None, given: str | None = None) -> ScorerModel:
    """The scorer runs the subject's model at the subject's precision: a scorer of another precision reads other
    logits, and bars fair arms (an F16 arm against a Q4_0 scorer: 9 turns of 10). ``given`` (``--scorer-model``)
    wins; else the subject's own GGUF, or its Hugging Face checkpoint converted at its dtype
    (:func:`workbench.models.gguf_of`, which says what to supply where it cannot); else the loop's ``model``,
    which the subject then runs too."""
    if given is not None:
        return ScorerModel(given, "--scorer-model")
    if subject_model is None:
        return ScorerModel(model, f"the loop's model, which the subject ({subject}) runs too")
    resolved = models.resolve(subject_model)
    if resolved.is_gguf:
        return ScorerModel(subject_model, f"the subject's ({subject}) own file")
    return ScorerModel(str(models.gguf_of(resolved)),
                       f"the subject's ({subject}) checkpoint as a GGUF at its own precision")


class Scorer:
    """A plain llama.cpp cell of the model the subject runs, at its precision (:func:`scorer_model`; it
    tokenizes the trace too), one slot. Successive turns of a session extend each other, so its prefix cache
    makes each turn's scoring cost about one warm arm's prefill plus one decode-like pass over each distinct
    output (:meth:`~workbench.cells.llamacpp.LlamaCppCell.greedy_gaps`)."""

    def __init__(self, model: ScorerModel, *, context_tokens: int, threads: int) -> None:
        self.cell = cells.open_cell("llamacpp", model.spec, context_tokens=context_tokens, threads=threads)
        self.model, self.threads, self.chosen_by = self.cell.model, threads, model.chosen_by
        self.weights = self.cell.describe().extra["weights"]
        self.vocab = int(self.cell.describe().extra["vocab_size"])
        self.elapsed_s = 0.0  # wall time spent scoring, outside every arm's timing (recorded in the workload)

    def score(self, prompt: Sequence[int], output: Sequence[int]) -> Greedy:
        """``output`` scored after ``prompt`` (token ids)."""
        bad = next((i for i, t in enumerate(output) if not 0 <= t < self.vocab), None)
        if bad is not None:  # no model picks a token it does not have: infinitely far from greedy
            return Greedy(math.inf, bad, math.inf)
        t0 = time.perf_counter()
        self.cell.ensure_prefix(list(prompt))  # as an arm serves the turn, then decode-like, one token at a time
        gaps, stop = self.cell.greedy_gaps(output)  # gaps[i]: output[i] after prompt + output[:i]
        self.elapsed_s += time.perf_counter() - t0
        if not gaps:
            return Greedy(0.0, None, stop)
        at = max(range(len(gaps)), key=gaps.__getitem__)
        return Greedy(gaps[at], at, stop)

    def describe(self) -> dict:
        return {"engine": "llamacpp", "model": self.model.name, "sha256": self.model.sha256, "weights": self.weights,
                "chosen_by": self.chosen_by, "scoring": SCORING, "threads": self.threads, "elapsed_s": self.elapsed_s}

    def close(self) -> None:
        self.cell.close()


__all__ = ["SCORING", "Greedy", "Scorer", "ScorerModel", "scorer_model"]
