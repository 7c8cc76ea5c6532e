"""Prompt-lookup speculative decoding on the llama.cpp cell: no second model.

Drafting: the last n tokens of the context (prompt + output so far), for n from ``max_ngram`` down
to ``min_ngram``, are looked up at their latest earlier occurrence; the tokens that followed it
there are the draft (at most ``k``). Agent loops copy a lot (ids, names, tool results echoed
back), which is what this exploits.

Verification: the pending token and the draft go to llama.cpp in one batch with logits for every
position (:meth:`LlamaCppCell.eval_greedy`). The draft's longest prefix that matches the greedy
prediction at each position is accepted, plus the greedy token after it; the rejected tail is
removed from the KV cache. Every output token is therefore the argmax greedy decoding would have
produced, so the output is token-identical to the plain cell's greedy decode (a test checks it on
real llama.cpp).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence


@dataclass(frozen=True)
class Drafter:
    """Prompt-lookup settings. A match shorter than ``min_ngram`` drafts nothing: one-token matches
    mostly draft junk, and on a CPU a rejected draft costs a wider batch for nothing."""

    k: int = 8
    max_ngram: int = 4
    min_ngram: int = 2

    def __post_init__(self) -> None:
        if self.k < 1 or not 1 <= self.min_ngram <= self.max_ngram:
            raise ValueError(f"need k ≥ 1 and 1 ≤ min_ngram ≤ max_ngram, got {self}")


@dataclass
class NgramIndex:
    """Latest start of every n-gram (n in [min, max]) that has a continuation, updated as tokens arrive."""

    drafter: Drafter
    tokens: list[int] = field(default_factory=list)
    _last: dict[tuple[int, ...], int] = field(default_factory=dict)

    def extend(self, new: Sequence[int]) -> None:
        d, toks = self.drafter, self.tokens
        for t in new:
            j = len(toks)  # t is the continuation of every n-gram ending at j - 1
            for n in range(d.min_ngram, d.max_ngram + 1):
                if j >= n:
                    self._last[tuple(toks[j - n:j])] = j - n
            toks.append(t)

    def draft(self, limit: int) -> list[int]:
        """Up to ``min(k, limit)`` tokens that followed the longest matching suffix n-gram."""
        d, toks = self.drafter, self.tokens
        limit = min(limit, d.k)
        if limit < 1:
            return []
        for n in range(min(d.max_ngram, len(toks)), d.min_ngram - 1, -1):
            start = self._last.get(tuple(toks[-n:]))
            if start is not None and start + n < len(toks):
                return toks[start + n:start + n + limit]
        return []


@dataclass
class SpecResult:
    tokens: list[int]
    times: list[float]  # seconds since the reference clock, one per token
    finish: str
    drafted: int = 0
    accepted: int = 0
    steps: int = 0  # verification batches
    drafted_steps: int = 0  # batches that carried a draft


def continue_greedy(cell, context: Sequence[int], first: int, max_tokens: int, drafter: Drafter, *, t0: float,
                    slot: int = 0) -> SpecResult:
    """Continue a greedy decode whose first token ``first`` was sampled (not yet fed) after ``context``.

    Leaves the slot's KV exactly where the plain decode leaves it: context plus every output token
    but the last (or plus all of them when an end-of-generation token stopped it).
    """
    index = NgramIndex(drafter)
    index.extend(context)
    index.extend([first])
    res = SpecResult([first], [time.perf_counter() - t0], "length")
    pending = first
    while len(res.tokens) < max_tokens:
        draft = index.draft(max_tokens - len(res.tokens))
        preds = cell.eval_greedy([pending, *draft], slot=slot)
        now = time.perf_counter() - t0
        m = 0
        while m < len(draft) and draft[m] == preds[m]:
            m += 1
        res.steps += 1
        res.drafted += len(draft)
        res.accepted += m
        res.drafted_steps += bool(draft)
        if len(draft) > m:
            cell.remove_tail(len(draft) - m, slot=slot)
        new = [*draft[:m], preds[m]]
        for i, t in enumerate(new):
            if cell.is_eog(t):
                res.finish = "stop"
                cell.remove_tail(len(new) - 1 - i, slot=slot)  # KV: accepted tokens before the stop
                return res
            res.tokens.append(t)
            res.times.append(now)
            if len(res.tokens) >= max_tokens:
                cell.remove_tail(len(new) - 1 - i, slot=slot)  # the last output token stays unfed
                return res
        index.extend(new)
        pending = new[-1]
    return res


__all__ = ["Drafter", "NgramIndex", "SpecResult", "continue_greedy"]
