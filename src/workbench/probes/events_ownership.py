"""events.one_consumer — does a second consumer take events from the first?

The gateway's consumer holds the endpoint's lease; a second consumer is refused by the lease (recorded) and then
subscribes anyway, as an unmanaged monitoring job would. After a burst of requests each consumer's sequence
numbers are compared with the stream's: a destructive drain splits them (disjoint, each with gaps), a fan-out
stream gives each consumer all of them. The loss curve: the fraction each of 1…N consumers received.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..params import check_hash_seed
from . import absence_again, Figure, Outcome, Probe, ProbeContext, Support, param, Bound, COUNT, TOKENS, SEED
from ..engine import Cell
from ..events.consumer import Consumer
from ..events.inventory import Inventory
from ..events.lease import LeaseHeld, acquire
from .common import token_ids
from .events_common import hasher_for, kept_out, new_consumer, on_stream


@dataclass(frozen=True)
class Params:
    consumers: int = param(2, "consumers on the one endpoint (the first holds the lease)", Bound(2, 64))
    requests: int = param(6, "requests in the burst", COUNT)
    prompt_tokens: int = param(70, "tokens per request", TOKENS)
    hash_seed: str = param("0", "PYTHONHASHSEED the engine starts with", check=check_hash_seed)
    seed: int = param(0, "seed for the token ids", SEED)


class OneConsumer(Probe):
    version = "2"
    claims = ("gateway.one_consumer",)
    rests = {("*", "confirmed"): ((Support("consumer_overlap_fraction", "<=", 0.0),
                                   Support("lease_holder_seen_fraction", "<", 1.0)),),
             ("*", "refuted"): ((Support("consumer_seen_fraction_min", ">=", 1.0),),),
             ("*", "partial"): ((Support("consumer_seen_fraction_min", "<", 1.0),),)}
    figures = (Figure("loss_curve", "events_loss_curve"),)
    Params = Params
    measures = ("consumers", "requests", "prompt_tokens", "seed")

    def from_evidence(self, evidence, p) -> Outcome:
        given = evidence["inputs"]
        return absence_again(evidence) or verdict(evidence["rows"], given["refused"], frozenset(given["skip"]))

    def run(self, ctx: ProbeContext, p: Params) -> Outcome:
        return on_stream(ctx, p, self._measure)

    def _measure(self, ctx: ProbeContext, p: Params, cell: Cell, rng: np.random.Generator) -> Outcome:
        with cell:
            d = cell.describe()
            sources = [new_consumer(cell, joined=i > 0) for i in range(p.consumers)]
            skip = kept_out(cell)
            first = Consumer.open(sources[0], Inventory(hasher_for(d, seed=p.hash_seed)), skip=skip)
            refused = []
            for _ in range(p.consumers - 1):
                try:
                    acquire(first.source.endpoint).release()
                except LeaseHeld as e:
                    refused.append(str(e))
            everyone = [first, *(Consumer(s, Inventory(hasher_for(d, seed=p.hash_seed)), skip=skip)
                                 for s in sources[1:])]
            try:
                for c in everyone:
                    c.pump(0.3)
                for i in range(p.requests):
                    cell.ensure_prefix(token_ids(rng, p.prompt_tokens, d))
                    # each request's events are first offered to another consumer: a destructive drain then splits
                    # them, whatever order the consumers happen to poll in
                    for c in everyone[i % len(everyone):] + everyone[:i % len(everyone)]:
                        c.pump(0.3)
            finally:
                for c in everyone:
                    c.close()
        rows = [{"consumer": i + 1, "lease": "held" if i == 0 else "refused" if i - 1 < len(refused) else "taken",
                 "seqs": sorted(set(c.seqs)), "gaps": len(c.gaps)} for i, c in enumerate(everyone)]
        out = verdict(rows, refused, skip)
        out.inputs = {"refused": refused, "skip": sorted(skip)}
        return out


def verdict(rows: list[dict], refused: list[str], skip: frozenset[int] = frozenset()) -> Outcome:
    """Rows: each consumer's received sequence numbers, the lease holder first. The stream is every number up to
    the highest seen. Confirmed only when the others took numbers the lease holder never received: consumers
    that received nothing show no taking (a fan-out they never joined, or a drain polled too late)."""
    rows = [dict(r) for r in rows]  # the rows as recorded keep each consumer's numbers, so the rule reads them again
    seen = [set(r["seqs"]) for r in rows]
    union = set().union(*seen)
    notes = [f"the lease refused consumer {i + 2}: {why}" for i, why in enumerate(refused)]
    if not union:
        return Outcome("inconclusive", "No consumer received any event.", rows=rows, notes=notes)
    numbers = [n for n in range(max(union) + 1) if n not in skip]  # skip: taken by the cell itself, not a consumer
    stream = len(numbers)
    shared = sum(sum(n in s for s in seen) > 1 for n in numbers) / stream
    least = min(len(s) for s in seen) / stream
    taken = len(union - seen[0])
    for r, s in zip(rows, seen):
        r["seen_fraction"] = len(s) / stream
    metrics = {"consumer_seen_fraction_min": least, "consumer_overlap_fraction": shared,
               "lease_holder_seen_fraction": len(seen[0]) / stream}
    if shared == 0.0 and union >= set(numbers) and taken:
        return Outcome("confirmed", f"The {len(rows)} consumers split the stream's {stream} events between them "
                       f"(none shared; the others took {taken} the lease holder never received): a second consumer "
                       "takes events from the first.", metrics, rows, notes,
                       rests_on=(Support("consumer_overlap_fraction", "<=", 0.0),
                                 Support("lease_holder_seen_fraction", "<", 1.0)))
    if least == 1.0:
        return Outcome("refuted", f"Every one of {len(rows)} consumers received all {stream} events: the stream fans "
                       "out, so a second consumer takes nothing from the first (the lease still names who owns it).",
                       metrics, rows, notes, rests_on=(Support("consumer_seen_fraction_min", ">=", 1.0),))
    if not taken:
        return Outcome("inconclusive", f"The lease holder received {len(seen[0])} of the stream's {stream} events "
                       f"and the other consumers took none of what it missed (the least saw {least:.0%}): nothing "
                       "shows one consumer taking events from another.", metrics, rows, notes)
    return Outcome("partial", f"Consumers shared {shared:.0%} of the stream's {stream} events and the least saw "
                   f"{least:.0%}: events were both duplicated and lost.", metrics, rows, notes,
                   rests_on=(Support("consumer_seen_fraction_min", "<", 1.0),))
