"""A gateway's consumer of one endpoint: source → sequence check → resync policy → inventory.

It takes the endpoint's lease (:mod:`workbench.events.lease`) unless told it holds none (a probe measuring a
second consumer on purpose), checks every event's sequence number and, on a gap, follows its declared policy
(:data:`workbench.events.inventory.RESYNC`). Everything it does is kept as a timeline for the figures and the
live view."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

from ..engine import KvEvent
from .inventory import RESYNC, Inventory
from .lease import Lease, acquire
from .sequence import Gap, Sequencer
from .sources import EventSource


@dataclass(frozen=True)
class Mark:
    """One thing on the consumer's timeline: ``kind`` is ``events`` (a poll that got some), ``gap``,
    ``replayed`` or ``cleared``."""

    t: float  # seconds since the consumer started
    kind: str
    seq: int | None = None
    count: int = 0
    detail: str = ""
    cause: str = ""  # cleared: why (one of CAUSES)


CAUSES = ("no-replay", "beyond-buffer", "policy", "regression")
"""Why a consumer cleared its inventory on a gap: the source keeps no replay buffer, the buffer no longer reached
back to the gap (both: events the engine lost), the declared policy never asked (the loss is the consumer's own
choice, not the engine's), or the sequence went backwards (engine restart)."""


@dataclass
class Consumer:
    source: EventSource
    inventory: Inventory
    policy: str = "replay"
    start_seq: int | None = 0
    lease: Lease | None = None
    skip: frozenset[int] = frozenset()  # sequence numbers another accounted-for reader took (no gap)
    sequencer: Sequencer = field(init=False)
    timeline: list[Mark] = field(default_factory=list)
    events: int = 0
    removed_blocks: int = 0
    seqs: list[int] = field(default_factory=list)
    _t0: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        if self.policy not in RESYNC:
            raise ValueError(f"resync policy must be one of {', '.join(RESYNC)}, got {self.policy!r}")
        self.sequencer = Sequencer(self.start_seq, self.skip)

    @classmethod
    def open(cls, source: EventSource, inventory: Inventory, *, policy: str = "replay", steal: bool = False,
             start_seq: int | None = 0, skip: frozenset[int] = frozenset()) -> "Consumer":
        """A consumer holding ``source``'s lease (:class:`~workbench.events.lease.LeaseHeld` if another has it)."""
        return cls(source, inventory, policy, start_seq, acquire(source.endpoint, steal=steal), skip)

    def _mark(self, kind: str, seq: int | None = None, count: int = 0, detail: str = "", cause: str = "") -> None:
        self.timeline.append(Mark(time.monotonic() - self._t0, kind, seq, count, detail, cause))

    def pump(self, timeout_s: float = 2.0) -> list[KvEvent]:
        """One poll: every new event applied to the inventory, gaps resolved by the policy."""
        if self.lease is not None:
            self.lease.check()
        got = self.source.poll(timeout_s)
        if got:
            self._mark("events", got[-1].event_id, len(got))
        self.feed(got)
        return got

    def feed(self, events: Sequence[KvEvent]) -> None:
        for e in events:
            gap = self.sequencer.see(e.event_id)
            if gap is not None:
                self._resync(gap)
            self.inventory.apply(e)
            self.events += 1
            self.removed_blocks += len(e.block_hashes) if e.kind == "removed" else 0
            self.seqs.append(e.event_id)

    def _resync(self, gap: Gap) -> None:
        self._mark("gap", gap.got, gap.missing, f"expected {gap.expected}, got {gap.got}")
        if self.policy == "replay" and not gap.regression:
            try:
                replayed = self.source.replay(gap.expected)
            except (TimeoutError, OSError) as e:  # a replay that does not answer recovers nothing: clear, said
                replayed, unanswered = [], f"{type(e).__name__}: {e}"
            else:
                unanswered = ""
            missed = [e for e in replayed or () if gap.expected <= e.event_id < gap.got]
            if missed and missed[0].event_id == gap.expected and {e.event_id for e in missed} == set(
                    range(gap.expected, gap.got)):
                self.inventory.apply_all(missed)
                self.events += len(missed)
                self.seqs.extend(e.event_id for e in missed)
                self._mark("replayed", gap.expected, len(missed), f"replayed {gap.expected}…{gap.got - 1}")
                return
            cause = "no-replay" if replayed is None else "beyond-buffer"
            why = ("the source keeps no replay buffer" if replayed is None else
                   f"the replay did not answer ({unanswered})" if unanswered else
                   f"the replay buffer starts at {min((e.event_id for e in replayed), default='nothing')}")
        else:
            cause = "regression" if gap.regression else "policy"
            why = "the sequence went backwards (engine restart)" if gap.regression else "policy: clear"
        self.inventory.clear()
        self._mark("cleared", gap.got, gap.missing, f"inventory cleared and rebuilt: {why}", cause)

    @property
    def gaps(self) -> list[Gap]:
        return self.sequencer.gaps

    def resyncs(self) -> dict[str, int]:
        """The gaps seen, apart by how each ended: ``recovered`` (the replay held every missed event: the inventory
        stayed whole) or ``cleared`` (it did not, or the source keeps none: the inventory was emptied and rebuilt
        from later events, its predictions low until then)."""
        marks = self.timeline
        causes = Counter(m.cause for m in marks if m.kind == "cleared")
        return {"gaps": sum(m.kind == "gap" for m in marks), "recovered": sum(m.kind == "replayed" for m in marks),
                "cleared": sum(causes.values()), **{f"cleared:{c}": n for c, n in sorted(causes.items())}}

    def close(self) -> None:
        if self.lease is not None:
            self.lease.release()
        self.source.close()
