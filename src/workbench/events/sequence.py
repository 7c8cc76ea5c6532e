"""Sequence numbers and the gaps in them: the only way a consumer learns it lost events.

vLLM numbers each published batch (``seq``, from 0 per publisher process; every event of a batch shares it);
TensorRT-LLM numbers each event (``event_id``, from 0 per ``KVCacheEventManager``). Either way a number more
than one past the last seen means events were lost (dropped on overflow, or taken by another consumer), and
a number below it means the engine restarted."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Gap:
    """Sequence numbers ``expected`` … ``got − 1`` never arrived (``regression``: ``got`` went backwards)."""

    expected: int
    got: int

    @property
    def regression(self) -> bool:
        return self.got < self.expected

    @property
    def missing(self) -> int:
        return 0 if self.regression else self.got - self.expected


class Sequencer:
    """Tracks the last sequence number seen. ``start``: the number the stream must begin at (0 for a consumer
    that was there from the engine's start), or None to take the first one seen as the start."""

    def __init__(self, start: int | None = 0, skip: frozenset[int] = frozenset()) -> None:
        self.next: int | None = start
        self.skip = skip  # numbers known to be taken by someone accounted for (a cell's own open request)
        self.gaps: list[Gap] = []

    def see(self, seq: int) -> Gap | None:
        """Record ``seq``; the gap before it, if any. A repeat of the last number (one vLLM batch) is no gap,
        and neither is a run of skipped numbers."""
        if self.next is not None and seq == self.next - 1:
            return None
        gap = Gap(self.next, seq) if self.next is not None and seq != self.next else None
        if gap and not gap.regression and set(range(gap.expected, gap.got)) <= self.skip:
            gap = None
        self.next = seq + 1
        if gap:
            self.gaps.append(gap)
        return gap
