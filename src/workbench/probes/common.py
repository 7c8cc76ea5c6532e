"""Shared probe mechanics: prompts the probe chooses itself, pressure ramps, timing summaries.

Ground truth always comes from token ids chosen here; engine counters, events and timings are
the channels under test.
"""

from __future__ import annotations

import statistics
import time
import uuid
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from ..engine import CELL_SOURCES, Cell, ContextOverflow, Description, Retention, WorkbenchError
from ..models import TOKEN_LO


def block_size(d: Description, nominal: int) -> int:
    """The engine's KV block (1 for llama.cpp) or, where reuse is per token, a nominal block for boundaries."""
    return d.block_tokens if d.block_tokens > 1 else nominal


def token_ids(rng: np.random.Generator, n: int, d: Description) -> list[int]:
    """``n`` random token ids valid for the model (no control or byte tokens)."""
    vocab = d.extra.get("vocab_size")
    hi = int(min(32000 if vocab is None else vocab, 30000))
    if hi <= TOKEN_LO:
        raise WorkbenchError(f"the model's vocabulary has {vocab} tokens, but probes draw prompt tokens above the "
                             f"control and byte tokens (ids {TOKEN_LO} and up): use a model with more than {TOKEN_LO} "
                             "tokens (e.g. synthetic:tiny)")
    return rng.integers(TOKEN_LO, hi, size=n).tolist()


def fresh_salt(tag: str) -> str:
    """A salt no earlier request used: keeps warm-ups from polluting cold measurements."""
    return f"{tag}-{uuid.uuid4().hex}"


def reported_source(prefix_sources: Iterable[str]) -> str | None:
    """The metric source of reuse the cell reported (``PrefixStatus.reused_tokens``) over requests with these
    ``PrefixStatus.source`` values: ``engine`` where every one was the engine's own counter (vLLM's
    ``num_cached_tokens``), ``cell`` where any was bookkeeping (llama.cpp), None where any request came back with
    no count at all (``none``): the value is then missing, never 0."""
    seen = set(prefix_sources)
    if "none" in seen:
        return None
    return "cell" if seen & CELL_SOURCES else "engine"


@dataclass
class Pressure:
    submitted: int = 0  # filler requests sent
    admitted: int = 0
    refused: int = 0  # explicit overflow errors for the newcomer
    tokens: int = 0  # filler tokens admitted


def apply_pressure(cell: Cell, total_tokens: int, filler_tokens: int, slots: Sequence[int],
                   rng: np.random.Generator, d: Description, start: int = 0,
                   retention: Retention | None = None) -> Pressure:
    """Send fillers totalling ``total_tokens``, round-robin over ``slots``, each at ``retention`` (None: the
    cell's own default, which on TensorRT-LLM is its EnsurePrefix pin, not the engine's default priority).

    Each filler is fresh random tokens under its own salt, so it never shares KV with the prefix.
    ``start`` continues the round-robin across calls (a sustained ramp).
    """
    out = Pressure()
    remaining = total_tokens
    i = start
    while remaining > 0:
        n = min(filler_tokens, remaining)
        slot = slots[i % len(slots)]
        i += 1
        out.submitted += 1
        try:
            cell.ensure_prefix(token_ids(rng, n, d), slot=slot, salt=fresh_salt("filler"), retention=retention)
            out.admitted += 1
            out.tokens += n
        except ContextOverflow:
            out.refused += 1
        remaining -= n
    return out


def timed(fn, *args, **kwargs) -> tuple[float, object]:
    t0 = time.perf_counter()
    r = fn(*args, **kwargs)
    return time.perf_counter() - t0, r


def spread(xs: Sequence[float]) -> dict:
    """Median and interquartile range: timing claims report spread, not one number."""
    if not xs:
        return {"median": float("nan"), "q1": float("nan"), "q3": float("nan"), "n": 0}
    q = np.percentile(xs, [25, 50, 75])
    return {"median": float(q[1]), "q1": float(q[0]), "q3": float(q[2]), "n": len(xs)}


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")
