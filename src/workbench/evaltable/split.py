"""Cold and cached TTFT: a cell's requests split by whether the request found its prompt in the server's cache.

Where the server reports cached prompt tokens per request (``usage.prompt_tokens_details.cached_tokens``:
llama-server, ``vllm serve --enable-prompt-tokens-details``), the split is the engine's: a request is *cached*
when the server says it read at least half of the prompt it counted from its cache (the shared 1K prefix of
``prefix-1k`` is most of each prompt; a chat template's few shared tokens are not), else *cold*. Where a response
carries no count, the split is the workbench's own guess by position: the first ``concurrency`` requests of the
run (sent before any could find a prefix the run computed) are cold, the rest cached; its source says so.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence

from .exports import Request

HIT_FRACTION = 0.5  # cached tokens / prompt tokens at which a request counts as served from the cache

ENGINE = "engine"  # split by the server's own cached tokens
POSITION = "workbench"  # split by the request's position in its run: computed here, not read from the server


@dataclass(frozen=True)
class Split:
    """A cell's cold and cached requests' TTFTs (seconds, in the order they were sent) and how they were split."""

    cold: tuple[float, ...]
    cached: tuple[float, ...]
    source: str  # ENGINE | POSITION

    def p50(self, which: str) -> float | None:
        """The median TTFT of the ``cold`` or ``cached`` requests; None where there are none."""
        values = getattr(self, which)
        return statistics.median(values) if values else None


def hit(r: Request) -> bool | None:
    """Whether the server said it read at least :data:`HIT_FRACTION` of ``r``'s prompt from its cache; None where
    it did not say."""
    if r.cached_tokens is None or not r.prompt_tokens:
        return None
    return r.cached_tokens >= HIT_FRACTION * r.prompt_tokens


def split(requests: Sequence[Request], concurrency: int) -> Split:
    """``requests`` (in the order sent) split by the engine's counts where every one has them, else by position: the
    first ``concurrency`` cold (0: none, a phase after the one that computed the prefix)."""
    hits = [hit(r) for r in requests]
    if requests and all(h is not None for h in hits):
        return Split(tuple(r.ttft_s for r, h in zip(requests, hits) if not h),
                     tuple(r.ttft_s for r, h in zip(requests, hits) if h), ENGINE)
    return Split(tuple(r.ttft_s for r in requests[:concurrency]), tuple(r.ttft_s for r in requests[concurrency:]),
                 POSITION)
