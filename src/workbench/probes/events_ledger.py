"""events.ledger_closure — does the event ledger close: stored − removed equals what the engine holds?

Users of every engine with an event stream report the same class of bug, which no public tool checks: a block that
leaves the cache with no ``removed`` event (TensorRT-LLM PR #16335: descendants of an evicted block detach silently;
SGLang #29750), stale index entries after a clear or a lost endpoint (llm-d #593), a removal of one physical copy
invalidating a hash still cached (vLLM #48933). A router's mirror then leaks hashes forever, or forgets live ones.

A gateway consumer subscribed from the engine's start keeps the ledger (:class:`workbench.events.inventory.Inventory`,
which counts copies). An eviction ramp (a few shared prefixes, a fresh suffix each, a pool of a few blocks) runs,
then the last prompts are asked again. The ledger predicts a request's reuse by walking its blocks from the root by
their tokens (every ``stored`` event carries them) under the engine's own hashes, so no hash is recomputed and the
check holds whatever algorithm the engine hashes with. What the engine holds is read three ways:

* **the event ledger**: the blocks stored minus the blocks removed (copies counted), against the pool the engine
  itself reported (``created`` / its block count): a ledger holding more blocks than the pool has leaked;
* **the engine's own reuse counts**: each read-back request's cached tokens, against the ledger's prediction for it
  (the blocks it still holds, root first);
* **an offline replay of the same requests** through a pool of the same size that evicts least recently used
  blocks, a request's blocks released last block first: computed by the workbench, shown beside, never a support.

Then the engine's cache is cleared (``reset_prefix_cache`` where the cell has it) or the engine restarted (the
cell's ``switch``): the inventory must empty and the next request miss, on the engine and in the prediction. Beside
the ledger runs a naive twin that forgets a hash at its first removal (copies not counted): a read-back where the
engine hit a hash the twin had forgotten is a duplicate copy whose removal did not invalidate the hash.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..engine import Cell, KvEvent
from ..events.consumer import Consumer
from ..events.inventory import Inventory
from ..params import check_hash_seed
from . import Decision, Outcome, Probe, ProbeContext, Support, param, COUNT, SEED, TOKENS
from .events_common import evicting_workload, kept_out, new_consumer, on_stream


@dataclass(frozen=True)
class Params:
    requests: int = param(24, "requests in the eviction ramp", COUNT)
    prefixes: int = param(4, "shared prefixes the ramp's requests draw from (Zipf-like)", COUNT)
    prefix_tokens: int = param(64, "tokens per shared prefix", TOKENS)
    suffix_tokens: int = param(32, "fresh tokens after the prefix", TOKENS)
    readback: int = param(8, "the ramp's last distinct prompts asked again, newest first", COUNT)
    budget_blocks: int = param(8, "KV pool of the cell, in blocks (small: the ramp evicts)", COUNT)
    context_tokens: int = param(128, "the cell's context", TOKENS)
    reset: bool = param(True, "clear the engine's cache (restart it where it has no clear) and check that the "
                              "inventory empties and the next request misses")
    hash_seed: str = param("0", "PYTHONHASHSEED the engine starts with", check=check_hash_seed)
    seed: int = param(0, "seed for the token ids", SEED)


class NaiveInventory(Inventory):
    """A mirror that keeps one entry per hash: the first ``removed`` of a hash forgets it, however many copies the
    engine still holds (the mirror vLLM #48933 fixes with ``remaining_copy_counts``)."""

    def _add(self, h: int, parent: int | None, toks: tuple, medium: str | None) -> None:
        super()._add(h, parent, toks, medium)
        self.blocks[h].copies = 1


def reusable(n_tokens: int, block: int) -> int:
    """Whole blocks of an ``n_tokens`` prompt an engine can reuse: never the last token (vLLM recomputes it,
    TensorRT-LLM's ``addSequence`` matches ``inputLength − 1`` tokens)."""
    return max(n_tokens - 1, 0) // block


def predict(inv: Inventory, tokens: Sequence[int], block: int) -> int:
    """Cached tokens the ledger predicts for ``tokens``: its blocks walked from the root by their tokens, under the
    engine's own hashes (each block's parent as its events gave it)."""
    children: dict[int | None, dict[tuple, int]] = {}
    for h, b in inv.blocks.items():
        children.setdefault(b.parent, {})[tuple(b.tokens)] = h
    parent: int | None = None
    for i in range(reusable(len(tokens), block)):
        h = children.get(parent, {}).get(tuple(tokens[i * block:(i + 1) * block]))
        if h is None:
            return i * block
        parent = h
    return reusable(len(tokens), block) * block


@dataclass
class Replay:
    """The offline replay: the same requests through ``capacity`` blocks that evict the least recently used full
    block, each request's blocks released last block first (vLLM's ``free_blocks`` order, TensorRT-LLM's
    ``releaseBlocks``), a block keyed by its whole prefix. Computed here: a reading beside the engine's, never one."""

    block: int
    capacity: int
    pool: OrderedDict = field(default_factory=OrderedDict)  # block key → None, least recently used first

    def request(self, tokens: Sequence[int]) -> int:
        """The cached tokens this replay predicts for ``tokens``; then the request's full blocks are held."""
        keys = [tuple(tokens[:(i + 1) * self.block]) for i in range(len(tokens) // self.block)]
        hit = 0
        for k in keys[:reusable(len(tokens), self.block)]:
            if k not in self.pool:
                break
            hit += 1
        for k in reversed(keys):  # released last block first: the head is the most recently used
            self.pool.pop(k, None)
            self.pool[k] = None
            while len(self.pool) > self.capacity:
                self.pool.popitem(last=False)
        return hit * self.block


@dataclass
class Ledger:
    """The consumer's running account, event by event: blocks stored and removed, and removals of a hash that kept
    another copy (its own count of copies, so a removal and a store in one poll are taken in their order)."""

    stored: int = 0
    removed: int = 0
    duplicate_removals: int = 0
    cleared: int = 0
    copies: dict = field(default_factory=dict)

    def see(self, events: Sequence[KvEvent]) -> None:
        for e in events:
            if e.kind == "stored":
                self.stored += len(e.block_hashes)
                for h in e.block_hashes:
                    self.copies[h] = self.copies.get(h, 0) + 1
            elif e.kind == "removed":
                self.removed += len(e.block_hashes)
                for h in e.block_hashes:
                    held = self.copies.pop(h, 0)
                    if held > 1:
                        self.duplicate_removals += 1
                        self.copies[h] = held - 1
            elif e.kind in ("cleared", "created"):
                self.cleared += 1
                self.copies.clear()


class LedgerClosure(Probe):
    version = "1"
    claims = ("gateway.ledger",)
    outcome_params = ("reset",)  # without the clear check the claim's third part is never put to the test
    _seen = (Support("engine_evicted_blocks", ">", 0), Support("engine_reused_tokens", ">", 0))
    _closed = (*_seen, Support("ledger_overflow_blocks", "<=", 0), Support("ledger_exact_fraction", ">=", 1.0))
    rests = {("*", "confirmed"): (_closed, (*_closed, Support("reset_inventory_blocks", "<=", 0),
                                             Support("reset_engine_reused_tokens", "<=", 0))),
             ("*", "partial"): ((*_closed, Support("reset_inventory_blocks", ">", 0),
                                 Support("reset_clear_events", ">", 0)),),
             ("*", "refuted"): ((Support("engine_evicted_blocks", ">", 0), Support("ledger_overflow_blocks", ">", 0)),
                                (*_seen, Support("ledger_exact_fraction", "<", 1.0)),
                                (Support("reset_inventory_blocks", ">", 0), Support("reset_clear_events", "<=", 0)))}
    Params = Params

    def run(self, ctx: ProbeContext, p: Params) -> Outcome:
        return on_stream(ctx, p, self._measure, budget_tokens=p.budget_blocks * 32, context_tokens=p.context_tokens)

    def _measure(self, ctx: ProbeContext, p: Params, cell: Cell, rng: np.random.Generator) -> Outcome:
        with cell:
            d = cell.describe()
            capacity = d.kv_capacity_tokens // d.block_tokens
            w = evicting_workload(rng, d, prefixes=p.prefixes, prefix_tokens=p.prefix_tokens,
                                  suffix_tokens=p.suffix_tokens, requests=p.requests)
            # keyed by the engine's own hashes, walked by tokens: the inventories never recompute a hash
            gateway = Consumer.open(new_consumer(cell), Inventory(None), policy="replay", skip=kept_out(cell))
            run = _Run(cell, gateway, NaiveInventory(None), Replay(d.block_tokens, capacity), d.block_tokens)
            try:
                for prompt in w.prompts:
                    run.ask("ramp", prompt)
                distinct = list(dict.fromkeys(tuple(x) for x in reversed(w.prompts)))[:p.readback]
                for prompt in distinct:
                    run.ask("readback", list(prompt))
                run.pump()
                account = run.account(capacity)
                reset = run.reset(list(distinct[0])) if p.reset else None
            finally:
                gateway.close()
        return verdict(run.rows, account, reset)


@dataclass
class _Run:
    cell: Any
    gateway: Consumer
    naive: NaiveInventory
    replay: Replay
    block: int
    ledger: Ledger = field(default_factory=Ledger)
    rows: list[dict] = field(default_factory=list)

    def pump(self, wait_s: float = 0.3) -> None:
        got = self.gateway.pump(wait_s)
        self.ledger.see(got)
        self.naive.apply_all(got)

    def ask(self, phase: str, prompt: list[int]) -> None:
        # the ramp's events may trail a request (a late one arrives at the next poll); the read-back's must be in
        self.pump(0.3 if phase == "readback" else 0.05)
        inv = self.gateway.inventory
        predicted, naive = predict(inv, prompt, self.block), predict(self.naive, prompt, self.block)
        replayed = self.replay.request(prompt)
        st = self.cell.ensure_prefix(prompt)
        reported = st.engine_reused_tokens
        self.rows.append({"phase": phase, "request": len(self.rows), "prompt_tokens": len(prompt),
                          "predicted": predicted, "naive_predicted": naive, "replayed": replayed,
                          # whole blocks: an engine that counts exactly (a partial match) says more than blocks hold
                          "reported": None if reported is None else reported // self.block * self.block,
                          "reported_tokens": reported, "ledger_blocks": sum(b.copies for b in inv.blocks.values()),
                          "inventory_hashes": len(inv)})

    def account(self, capacity: int) -> dict:
        inv = self.gateway.inventory
        resident = sum(b.copies for b in inv.blocks.values())
        return {"stored": self.ledger.stored, "removed": self.ledger.removed, "resident": resident,
                "capacity": capacity, "duplicate_removals": self.ledger.duplicate_removals,
                "replay_resident": len(self.replay.pool), "unknown_removals": inv.unknown_removals,
                "orphans": sum(1 for b in inv.blocks.values() if b.parent is not None and b.parent not in inv.blocks)}

    def reset(self, prompt: list[int]) -> dict:
        """Clear the engine's cache (or restart it), then: what the inventory holds before the next request, that
        request's reuse as predicted and as the engine counted it, and the clear events seen once it has run."""
        clear = getattr(self.cell, "reset_prefix_cache", None)
        cleared = self.ledger.cleared + self._resyncs()
        done = bool(clear()) if clear is not None else False
        how = "reset_prefix_cache"
        if not done:  # no clear in the engine's API, or it refused (vllm serve without its dev routes): restart
            how = "restart (switch)" if clear is None else "restart (switch; reset_prefix_cache was refused)"
            done = self.cell.switch() is not None
        self.pump()
        self.pump()
        held = sum(b.copies for b in self.gateway.inventory.blocks.values())
        predicted = predict(self.gateway.inventory, prompt, self.block)
        st = self.cell.ensure_prefix(prompt)
        self.pump()
        return {"how": how, "engine_said": bool(done), "inventory_blocks": held, "predicted": predicted,
                "reported": st.engine_reused_tokens, "clear_events": self.ledger.cleared + self._resyncs() - cleared}

    def _resyncs(self) -> int:
        """Times the gateway emptied its inventory on its own: a sequence that went backwards (a restarted engine) or
        a gap it could not replay."""
        return sum(m.kind == "cleared" for m in self.gateway.timeline)


@dataclass(frozen=True)
class Closure:
    """What the closure rule reads, summarised from the rows and the account."""

    evicted: int
    reused: int  # the engine's reuse over the read-back
    overflow: int  # ledger blocks beyond the pool the engine reported (> 0: leaked)
    exact: float  # read-back requests where the engine's count equals the ledger's prediction
    counted: int  # read-back requests with an engine count
    asked: int
    replay_exact: float
    duplicate_hits: int  # read-backs where the engine hit beyond what the naive twin predicted
    reset: dict | None


def summarise(rows: Sequence[dict], account: dict, reset: dict | None) -> Closure:
    back = [r for r in rows if r["phase"] == "readback"]
    counted = [r for r in back if r["reported"] is not None]
    every = [r for r in rows if r["reported"] is not None]
    return Closure(
        evicted=account["removed"], reused=sum(r["reported"] for r in counted),
        overflow=account["resident"] - account["capacity"],
        exact=sum(r["predicted"] == r["reported"] for r in counted) / len(counted) if counted else float("nan"),
        counted=len(counted), asked=len(back),
        replay_exact=sum(r["replayed"] == r["reported"] for r in every) / len(every) if every else float("nan"),
        duplicate_hits=sum(r["reported"] > r["naive_predicted"] for r in counted), reset=reset)


def decide(s: Closure) -> Decision:
    """The ladder: a leak the pool proves → a clear no event told → a read-back to compare → eviction and reuse seen
    → the ledger's predictions against the engine's counts → the clear reaching the gateway before the next request
    → the engine's miss after it."""
    if s.evicted > 0 and s.overflow > 0:
        return Decision("refuted", "leak", rests_on=(Support("engine_evicted_blocks", ">", 0),
                                                     Support("ledger_overflow_blocks", ">", 0)))
    if s.reset is not None and s.reset["clear_events"] <= 0 and s.reset["inventory_blocks"] > 0:
        return Decision("refuted", "stale", rests_on=(Support("reset_inventory_blocks", ">", 0),
                                                      Support("reset_clear_events", "<=", 0)))
    if s.counted < s.asked or not s.asked:
        return Decision("inconclusive", "uncounted")
    if s.evicted == 0 or s.reused == 0:
        return Decision("inconclusive", "untested")
    seen = (Support("engine_evicted_blocks", ">", 0), Support("engine_reused_tokens", ">", 0))
    if s.exact < 1.0:
        return Decision("refuted", "mismatch", rests_on=(*seen, Support("ledger_exact_fraction", "<", 1.0)))
    closed = (*seen, Support("ledger_overflow_blocks", "<=", 0), Support("ledger_exact_fraction", ">=", 1.0))
    if s.reset is None:
        return Decision("confirmed", "closed", rests_on=closed)
    if s.reset["reported"] is None or s.reset["reported"] > 0:
        return Decision("inconclusive", "not-cleared")
    if s.reset["inventory_blocks"] > 0:
        return Decision("partial", "late", rests_on=(*closed, Support("reset_inventory_blocks", ">", 0),
                                                     Support("reset_clear_events", ">", 0)))
    return Decision("confirmed", "closed", rests_on=(*closed, Support("reset_inventory_blocks", "<=", 0),
                                                     Support("reset_engine_reused_tokens", "<=", 0)))


def explain(d: Decision, s: Closure, account: dict) -> str:
    ledger = (f"{account['stored']} blocks stored − {account['removed']} removed = {account['resident']} in the "
              f"ledger against the engine's pool of {account['capacity']}")
    if d.case == "leak":
        return (f"The ledger leaked: {ledger}, {s.overflow} more than the pool can hold: blocks left the cache with "
                "no removed event (TensorRT-LLM PR #16335's detach), so a mirror keeps them forever.")
    if d.case == "stale":
        return (f"After {s.reset['how']} the inventory still held {s.reset['inventory_blocks']} blocks, and no clear "
                "event came even after the next request: nothing told the gateway its index was gone (llm-d #593's "
                "stale entries).")
    if d.case == "uncounted":
        return "The engine gave no cached-token count on some read-back request, so the ledger has nothing to meet."
    if d.case == "untested":
        what = "evicted nothing" if s.evicted == 0 else "reused nothing on the read-back"
        return f"The ramp {what}, so it cannot show the ledger closing; shrink the pool or add requests."
    if d.case == "mismatch":
        return (f"The ledger's predictions met the engine's own counts on {s.exact:.0%} of {s.counted} read-back "
                f"requests ({ledger}): what the events say is held is not what the engine serves.")
    if d.case == "late":
        return (f"The ledger closed ({ledger}; every one of {s.counted} read-back requests as it predicted), but after "
                f"{s.reset['how']} the inventory still held {s.reset['inventory_blocks']} blocks until the engine's next "
                f"step published the clear: the request right after it was predicted {s.reset['predicted']} cached "
                f"tokens and the engine reported {s.reset['reported']}.")
    if d.case == "not-cleared":
        return (f"The ledger closed ({ledger}), but after {s.reset['how']} the engine still reported "
                f"{s.reset['reported']} cached tokens: the clear did not clear, so misses did not follow.")
    reset = (f"; after {s.reset['how']} the inventory emptied and the next request missed on the engine and in the "
             "prediction" if s.reset else "")
    dup = (f"; {account['duplicate_removals']} removal(s) took one copy of a hash still held, and the engine hit past "
           f"a mirror that forgets a hash at its first removal on {s.duplicate_hits} read-back(s)"
           if account["duplicate_removals"] else "")
    return (f"The event ledger closed: {ledger}, and every one of {s.counted} read-back requests got exactly the "
            f"cached tokens the ledger predicted{dup}{reset}.")


def verdict(rows: Sequence[dict], account: dict, reset: dict | None = None) -> Outcome:
    """Confirmed: eviction and reuse seen, the ledger within the engine's pool, every read-back as the ledger
    predicted, and (where run) the clear emptying the inventory with a miss after. Refuted: a ledger larger than the
    pool (a leak: blocks gone with no ``removed``), an inventory still holding blocks after the clear, or a read-back
    the ledger mispredicted. The offline replay is shown beside, never a support."""
    s = summarise(rows, account, reset)
    d = decide(s)
    metrics = {"ledger_stored_blocks": account["stored"], "ledger_removed_blocks": account["removed"],
               "ledger_resident_blocks": account["resident"], "engine_capacity_blocks": account["capacity"],
               "ledger_overflow_blocks": s.overflow, "engine_evicted_blocks": s.evicted,
               "engine_reused_tokens": s.reused, "ledger_exact_fraction": s.exact,
               "replay_resident_blocks": account["replay_resident"], "replay_exact_fraction": s.replay_exact,
               "duplicate_copy_removals": account["duplicate_removals"]}
    if reset is not None:
        metrics["reset_inventory_blocks"] = reset["inventory_blocks"]
        metrics["reset_clear_events"] = reset["clear_events"]
        if reset["reported"] is not None:
            metrics["reset_engine_reused_tokens"] = reset["reported"]
    notes = [f"three readings of what the engine holds: the ledger {account['resident']} blocks (stored − removed, "
             f"copies counted) within a pool of {account['capacity']}; the engine's own counts on the read-back "
             f"({s.exact:.0%} as the ledger predicted); the offline replay {account['replay_resident']} blocks "
             f"({s.replay_exact:.0%} of requests as the engine counted; computed, not a reading of the engine)",
             f"blocks in the ledger whose parent it no longer holds: {account['orphans']}; removals of a hash never "
             f"stored: {account['unknown_removals']}"]
    if reset is not None:
        notes.append(f"after {reset['how']}: the inventory held {reset['inventory_blocks']} blocks, the next request "
                     f"was predicted {reset['predicted']} cached tokens and the engine reported {reset['reported']}; "
                     f"clear events (cleared, created) seen by the time it had run: {reset['clear_events']}")
    else:
        notes.append("the clear/restart check was not run (reset=false)")
    if account["duplicate_removals"]:
        notes.append(f"duplicate copies: {account['duplicate_removals']} removal(s) took one copy of a hash the engine "
                     f"still held; a mirror that forgets a hash at its first removal would have missed the engine's "
                     f"hits on {s.duplicate_hits} read-back request(s) (vLLM #48933), the ledger (copies counted) on none"
                     if s.exact == 1.0 else f"duplicate copies: {account['duplicate_removals']} removal(s) took one "
                     "copy of a hash the engine still held")
    else:
        notes.append("no removal took one copy of a hash still held: duplicate copies were not exercised")
    return Outcome(d.verdict, explain(d, s, account), metrics, list(rows) + ([{"phase": "reset", **reset}] if reset else []),
                   notes, rests_on=d.rests_on)
