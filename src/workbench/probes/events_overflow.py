"""events.overflow_resync — a bounded buffer loses events; can the consumer tell, and resynchronise?

The engine keeps ``buffer_steps`` batches for replay. A consumer joins after ``before`` requests have been
published, expecting the stream from 0: the missed batches are a gap. Its policy (``replay``) asks for them; what
the buffer no longer holds is lost, and the consumer clears and rebuilds. Afterwards each new request's prediction
is compared with the engine's count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..params import check_hash_seed
from . import absence_again, Figure, Outcome, Probe, ProbeContext, Support, param, COUNT, TOKENS, SEED
from ..engine import Cell
from ..events.consumer import Consumer
from ..events.inventory import Inventory
from .common import token_ids
from .events_common import hasher_for, kept_out, new_consumer, on_stream, salt_of


@dataclass(frozen=True)
class Params:
    buffer_steps: int = param(3, "batches the engine keeps for replay (KVEventsConfig.buffer_steps)", COUNT)
    before: int = param(8, "requests published before the consumer joins", COUNT)
    after: int = param(6, "requests after it joined: an early prompt, then fresh ones, each sent twice", COUNT)
    prompt_tokens: int = param(70, "tokens per request", TOKENS)
    hash_seed: str = param("0", "PYTHONHASHSEED the engine starts with", check=check_hash_seed)
    policy: str = param("replay", "the consumer's resync policy: replay or clear")
    seed: int = param(0, "seed for the token ids", SEED)


class OverflowResync(Probe):
    version = "2"
    claims = ("gateway.overflow",)
    rests = {("*", "refuted"): ((Support("engine_lost_events", ">", 0), Support("inventory_exact_fraction", "<", 1.0)),),
             ("*", "confirmed"): ((Support("engine_lost_events", ">", 0), Support("inventory_exact_fraction", ">=", 1.0),
                                   Support("engine_reused_tokens", ">", 0)),)}
    figures = (Figure("timeline", "events_timeline"),)
    Params = Params
    measures = ("before", "after", "prompt_tokens", "seed")  # buffer_steps, policy, hash_seed: exploratory

    def from_evidence(self, evidence, p) -> Outcome:
        """The timeline it recorded: the consumer's marks, then the requests (``mark: request``)."""
        if (absent := absence_again(evidence)) is not None:
            return absent
        rows = evidence["rows"]
        requests = [{k: v for k, v in r.items() if k != "mark"} for r in rows if r.get("mark") == "request"]
        return verdict(requests, [r for r in rows if r.get("mark") != "request"])

    def run(self, ctx: ProbeContext, p: Params) -> Outcome:
        return on_stream(ctx, p, self._measure, buffer_steps=p.buffer_steps, budget_tokens=64 * 32)

    def _measure(self, ctx: ProbeContext, p: Params, cell: Cell, rng: np.random.Generator) -> Outcome:
        rows = []
        with cell:
            d = cell.describe()
            early = [token_ids(rng, p.prompt_tokens, d) for _ in range(p.before)]
            for prompt in early:
                cell.ensure_prefix(prompt)
            c = Consumer.open(new_consumer(cell), Inventory(hasher_for(d, seed=p.hash_seed)), policy=p.policy,
                              skip=kept_out(cell))
            try:
                fresh = [token_ids(rng, p.prompt_tokens, d) for _ in range(p.after // 2)]
                # an early prompt (cached before the consumer joined), then each fresh prompt twice (a hit)
                for i, prompt in enumerate([early[-1], *(f for f in fresh for _ in (0, 1))]):
                    c.pump(0.3)
                    predicted = c.inventory.predict(prompt, salt=salt_of(cell, None))
                    st = cell.ensure_prefix(prompt)
                    rows.append({"request": p.before + i, "predicted": predicted, "reported": st.engine_reused_tokens})
                c.pump(0.3)
            finally:
                c.close()
        marks = [{"t_s": m.t, "mark": m.kind, "seq": m.seq, "count": m.count, "detail": m.detail, "cause": m.cause}
                 for m in c.timeline]
        return verdict(rows, marks)


def verdict(rows: list[dict], marks: list[dict]) -> Outcome:
    """Confirmed when the engine itself lost events (its buffer kept none, or no longer reached back to the gap),
    the consumer saw the gap, and the rebuilt inventory then predicted every later request, hits included. A
    clear the consumer chose without asking the buffer shows no loss of the engine's."""
    gaps = [m for m in marks if m["mark"] == "gap"]
    replayed = sum(m["count"] for m in marks if m["mark"] == "replayed")
    cleared = [m for m in marks if m["mark"] == "cleared"]
    lost = sum(m["count"] for m in cleared if m.get("cause") in ("no-replay", "beyond-buffer"))
    after = rows[1:]  # fresh prompts after the resync
    counted = [r for r in after if r["reported"] is not None]
    exact = sum(r["predicted"] == r["reported"] for r in counted) / len(counted) if counted else float("nan")
    rebuilt_hits = sum(r["reported"] for r in counted if r["predicted"] == r["reported"])
    metrics = {"engine_lost_events": lost, "inventory_exact_fraction": exact, "engine_reused_tokens":
               sum(r["reported"] for r in counted)}
    timeline = marks + [{"mark": "request", **r} for r in rows]
    notes = [m["detail"] for m in marks if m["mark"] != "events"]
    if not gaps:
        return Outcome("inconclusive", "The consumer saw no gap: nothing was missed, so loss and resync were not "
                       "exercised.", metrics, timeline, notes)
    if not lost and cleared:
        return Outcome("inconclusive", f"The consumer missed {sum(m['count'] for m in gaps)} batches and cleared "
                       "without asking the engine's buffer (its policy), so whether the engine lost them is not "
                       "shown; use the replay policy.", metrics, timeline, notes)
    if not lost:
        return Outcome("inconclusive", f"The consumer missed {sum(m['count'] for m in gaps)} batches and the engine's "
                       f"buffer replayed all {replayed}: nothing overflowed, so no loss could be shown.",
                       metrics, timeline, notes)
    if len(counted) < len(after) or not after:
        return Outcome("inconclusive", "The engine returned no cached-token count for the requests after the "
                       "resync, so the rebuilt inventory has nothing to be compared with.", metrics, timeline, notes)
    if exact < 1.0:
        return Outcome("refuted", f"{lost} batches were lost past the buffer and the gap was seen, but after the "
                       "resync the inventory still mispredicted new requests.", metrics, timeline, notes,
                       rests_on=(Support("engine_lost_events", ">", 0), Support("inventory_exact_fraction", "<", 1.0)))
    if not rebuilt_hits:
        return Outcome("inconclusive", f"{lost} batches were lost and the gap was seen, but no request after the "
                       "resync hit the cache, so the rebuilt inventory was never put to the test (an empty one "
                       "predicts the same zeros).", metrics, timeline, notes)
    first = rows[0]
    return Outcome("confirmed", f"The bounded buffer dropped {lost} batches; the consumer saw the gap, cleared and "
                   f"rebuilt, and then predicted every new request exactly ({rebuilt_hits} cached tokens; the first, "
                   f"an early prompt, was predicted {first['predicted']} against the engine's {first['reported']}).",
                   metrics, timeline, notes,
                   rests_on=(Support("engine_lost_events", ">", 0), Support("inventory_exact_fraction", ">=", 1.0),
                             Support("engine_reused_tokens", ">", 0)))
