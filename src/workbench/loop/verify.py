"""Is an arm's output a greedy decode of the model? Read, teacher-forced, from a llama.cpp scorer.

Two engines doing the same greedy work need not emit the same tokens: where two logits nearly tie, another
batch shape or kernel breaks the tie the other way, and the outputs part from there (llama-server against the
in-process cell, measured in ``make run``). Token identity with one reference arm would then bar a fair arm,
and a wide token tolerance would admit an unfair one. The scorer instead evaluates the turn's prompt plus the
arm's own output on a plain llama.cpp cell of the same model and reads, at every position, how far the emitted
token lies below that position's top logit (:meth:`~workbench.cells.llamacpp.LlamaCppCell.greedy_gaps`). A
greedy decode stays within a near-tie margin at every token; a token greedy decoding would not pick (sampling,
unchecked drafts, another model) does not. The scorer's time is outside every arm's timing.

The scorer reads decode-like (one token at a time, as greedy decoding evaluates them), so a plain llama.cpp arm's
tokens read 0.000 σ. A prompt-lookup arm's tokens were chosen in verification batches, whose kernels part from
sequential decode's by more than a near-tie (0.26–0.28 σ on taubench with synthetic:tiny); the scorer reads that
arm's tokens again in the very batches it fed and measures the difference (:meth:`Scorer.numeric_gap`), which
widens that arm's margin (:func:`.equal.margin`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Sequence

from .. import cells, models
from ..engine import common_prefix
from .spec import Drafter, continue_greedy


SCORING = ("decode-like: the prompt prefilled as an arm prefills it, then each output token evaluated alone on the "
           "KV cache, as greedy decoding evaluates it (teacher forcing in one batch takes other kernels, whose "
           "logits part from decode's by more than a near-tie)")


@dataclass(frozen=True)
class Greedy:
    """What the scorer read for one output (gaps in standard deviations of the position's logits)."""

    max_gap_sd: float  # the largest gap between the scorer's top token and the emitted one (0.0: all argmax)
    at: int | None  # the output position of that largest gap (None: empty output)
    stop_gap_sd: float  # after the output: the best end-of-generation token's gap (0.0: greedy would stop there)
    gaps: tuple[float, ...] = ()  # every output position's gap (what :meth:`Scorer.numeric_gap` compares against)

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


class _TeacherForced:
    """The scorer's cell as :func:`.spec.continue_greedy` sees an arm's: each verification batch is evaluated in one
    batch, as the arm evaluated it, and predicts the arm's own next tokens, so the drafts, and so the batches, are the
    ones the arm fed. Keeps the gap each output token read in its batch (output position → σ)."""

    STOP = -1  # predicted past the output's end: the arm stopped there (or reached the length asked)

    def __init__(self, cell: Any, output: Sequence[int]) -> None:  # a llama.cpp cell (batch_gaps)
        self.cell, self.output, self.fed = cell, list(output), 0  # fed: output tokens in the cell's KV
        self.gaps: dict[int, float] = {}

    def eval_greedy(self, tokens: Sequence[int], *, slot: int = 0) -> list[int]:
        start = self.fed + 1  # tokens[0] is output[fed], the rest a draft; row i predicts output[start + i]
        want = self.output[start:start + len(tokens)]
        scored = want[:common_prefix(tokens[1:], want) + 1]  # the rows the arm accepted, and the token after them
        self.gaps |= {start + i: g for i, g in enumerate(self.cell.batch_gaps(tokens, scored, slot=slot))}
        self.fed += len(tokens)
        return want + [self.STOP] * (len(tokens) - len(want))

    def remove_tail(self, n: int, *, slot: int = 0) -> int:
        self.fed -= n
        return self.cell.remove_tail(n, slot=slot)

    def is_eog(self, token: int) -> bool:
        return token == self.STOP


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
        return Greedy(gaps[at], at, stop, tuple(gaps))

    def numeric_gap(self, prompt: Sequence[int], output: Sequence[int], max_tokens: int, drafter: Drafter,
                    sequential: Greedy) -> float | None:
        """How far an arm's batch numerics part from sequential decode's on its own ``output``: the output read
        again in the verification batches prompt-lookup speculation fed it (:class:`_TeacherForced`: the same
        drafts, so the same batches, on the same model, engine and threads), the largest difference from the
        ``sequential`` gaps (σ). Both are llama.cpp's logits, so the gap is the engine's, never a parameter. None
        where it cannot be read (a token outside the vocabulary); 0.0 where no output token came from a batch."""
        if not math.isfinite(sequential.max_gap_sd):
            return None
        if len(output) < 2:  # the first token is decoded alone (spec.continue_greedy), as the scorer reads it
            return 0.0
        t0 = time.perf_counter()
        self.cell.ensure_prefix(list(prompt))
        self.cell.decode(max_tokens=1)  # as the arm starts: the first token decoded alone, left unfed
        forced = _TeacherForced(self.cell, output)
        continue_greedy(forced, prompt, output[0], max_tokens, drafter, t0=t0)
        self.elapsed_s += time.perf_counter() - t0
        return max((abs(g - sequential.gaps[i]) for i, g in forced.gaps.items()), default=0.0)

    def describe(self) -> dict:
        return {"engine": "llamacpp", "model": self.model.name, "sha256": self.model.sha256, "weights": self.weights,
                "chosen_by": self.chosen_by, "scoring": SCORING, "threads": self.threads, "elapsed_s": self.elapsed_s}

    def close(self) -> None:
        self.cell.close()


__all__ = ["SCORING", "Greedy", "Scorer", "ScorerModel", "scorer_model"]
