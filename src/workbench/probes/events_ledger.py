"""events.ledger_closure — does the event ledger close: stored − removed equals what the engine holds?

Users of every engine with an event stream report the same class of bug, which no public tool checks: a block that
leaves the cache with no ``removed`` event (TensorRT-LLM PR #16335: a block whose ancestor was evicted first leaves,
at its own reclaim, unannounced;
SGLang #29750), stale index entries after a clear or a lost endpoint (llm-d #593), a removal of one physical copy
invalidating a hash still cached (vLLM #48933). A router's mirror then leaks hashes forever, or forgets live ones.

A gateway consumer subscribed from the engine's start keeps the ledger (:class:`workbench.events.inventory.Inventory`,
which counts copies). An eviction ramp (a few shared prefixes, a fresh suffix each, a pool of a few blocks) runs,
then the last prompts are asked again. The ledger predicts a request's reuse by walking its blocks from the root by
their tokens (every ``stored`` event carries them) under the engine's own hashes, so no hash is recomputed and the
check holds whatever algorithm the engine hashes with. What the engine holds is read three ways:

* **the event ledger**: the blocks stored minus the blocks removed (copies counted), against the pool the engine
  itself reported (``created`` / its block count): a ledger holding more blocks than the pool has leaked, whether
  or not any ``removed`` came; and, where the engine can say what it holds (the ``cached_blocks`` observer: vLLM's
  block pool in-process), against that count, which it must equal;
* **the engine's own reuse counts**: each read-back request's cached tokens, against the ledger's prediction for it
  (the blocks it still holds, root first);
* **an offline replay of the same requests** through a pool of the same size that evicts the lowest priority,
  then the least recently released block, a request's blocks released last block first: computed by the
  workbench, shown beside, never a support.

Where the engine takes retention priorities, every other ramp request asks a low one: a shared prefix then sits at
the priority of whichever request claimed it last, so an ancestor can be evicted while its descendants stay, the
path on which TensorRT-LLM PR #16335's blocks leave with no event (under one priority a chain's leaf always goes
first, and the bug never shows).

Then the engine's cache is cleared (``reset_prefix_cache`` where the cell has it) or the engine restarted (the
cell's ``switch``): the engine's own stream must say so (a clear event, or event ids numbered afresh) before the
next request, and that request must miss, on the engine and in the prediction (the gateway's inventory is the
workbench's own bookkeeping: shown, never rested on). Beside the ledger runs a naive twin that forgets a hash at its first removal (copies not counted): a read-back where the
engine hit a hash the twin had forgotten is a duplicate copy whose removal did not invalidate the hash.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..engine import Cell, KvEvent, Retention
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
    mixed_priority: bool = param(True, "where the engine takes retention priorities, every other ramp request at a "
                                       "low one, so an ancestor can be evicted before its descendants (the path "
                                       "PR #16335's detach takes)")
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


PRIORITIES = (Retention(priority=100), Retention(priority=10))
"""The ramp's retention priorities, alternating (``mixed_priority``): a prefix a low request claims drops below the
suffixes high requests stored under it."""


@dataclass
class Replay:
    """The offline replay: the same requests through ``capacity`` blocks that evict the lowest priority first, then
    the least recently released full block, each request's blocks released last block first (vLLM's
    ``free_blocks`` order, TensorRT-LLM's ``releaseBlocks``) at the priority of the request that claimed them last,
    a block keyed by its whole prefix. Computed here: a reading beside the engine's, never one."""

    block: int
    capacity: int
    pool: dict = field(default_factory=dict)  # block key → (priority, release order)
    released: int = 0

    def request(self, tokens: Sequence[int], priority: int = 100) -> int:
        """The cached tokens this replay predicts for ``tokens``; then the request's full blocks are held."""
        keys = [tuple(tokens[:(i + 1) * self.block]) for i in range(len(tokens) // self.block)]
        hit = 0
        for k in keys[:reusable(len(tokens), self.block)]:
            if k not in self.pool:
                break
            hit += 1
        for k in keys:  # claimed while the request runs: out of reach of its own evictions
            self.pool.pop(k, None)
        for k in keys:
            if len(self.pool) >= self.capacity and self.pool:
                del self.pool[min(self.pool, key=self.pool.get)]
            self.pool[k] = (priority, float("inf"))
        for k in reversed(keys):  # released last block first: the head is the most recently used
            self.released += 1
            self.pool[k] = (priority, self.released)
        while len(self.pool) > self.capacity:
            del self.pool[min(self.pool, key=self.pool.get)]
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


_SEEN = (Support("engine_evicted_min_blocks", ">", 0), Support("engine_reused_tokens", ">", 0))
_CLOSED = (*_SEEN, Support("ledger_overflow_blocks", "<=", 0), Support("ledger_exact_fraction", ">=", 1.0))
_EQUAL = (Support("ledger_held_gap_blocks", "==", 0),)  # where the engine says what it holds
_FORGOT = Support("reset_engine_reused_tokens", "<=", 0)
_TOLD = (_FORGOT, Support("reset_engine_clear_signals_early", ">", 0))
_LATE = (_FORGOT, Support("reset_engine_clear_signals_early", "<=", 0), Support("reset_engine_clear_signals", ">", 0))
LEAK = (Support("ledger_overflow_blocks", ">", 0),)
UNEQUAL = (Support("ledger_held_gap_blocks", "!=", 0),)
STALE = (_FORGOT, Support("reset_engine_clear_signals", "<=", 0))
OVERCLAIMED = (Support("ledger_overclaimed_requests", ">", 0),)
MISMATCH = (*_SEEN, Support("ledger_exact_fraction", "<", 1.0))


def _closed(*more: Support) -> tuple[tuple[Support, ...], ...]:
    """The closure's supports followed by ``more``, without and with the engine's own count of what it holds."""
    return ((*_CLOSED, *more), (*_CLOSED, *_EQUAL, *more))


class LedgerClosure(Probe):
    version = "2"
    claims = ("gateway.ledger",)
    # without the clear check the claim's third part is never put to the test; under one priority a chain's leaf
    # always goes first, so the path on which PR #16335's blocks leave unannounced is never taken
    outcome_params = ("reset", "mixed_priority")
    rests = {("*", "confirmed"): (*_closed(), *_closed(*_TOLD)),
             ("*", "partial"): _closed(*_LATE),
             ("*", "refuted"): (LEAK, UNEQUAL, STALE, OVERCLAIMED, MISMATCH)}
    Params = Params

    def run(self, ctx: ProbeContext, p: Params) -> Outcome:
        return on_stream(ctx, p, self._measure, budget_tokens=p.budget_blocks * 32, context_tokens=p.context_tokens)

    def _measure(self, ctx: ProbeContext, p: Params, cell: Cell, rng: np.random.Generator) -> Outcome:
        with cell:
            d = cell.describe()
            capacity = d.kv_capacity_tokens // d.block_tokens
            w = evicting_workload(rng, d, prefixes=p.prefixes, prefix_tokens=p.prefix_tokens,
                                  suffix_tokens=p.suffix_tokens, requests=p.requests)
            mixed = p.mixed_priority and "retention_priority" not in d.absent
            # keyed by the engine's own hashes, walked by tokens: the inventories never recompute a hash
            gateway = Consumer.open(new_consumer(cell), Inventory(None), policy="replay", skip=kept_out(cell))
            run = _Run(cell, gateway, NaiveInventory(None), Replay(d.block_tokens, capacity), d.block_tokens,
                       "cached_blocks" in d.observers)
            try:
                for i, prompt in enumerate(w.prompts):
                    run.ask("ramp", prompt, PRIORITIES[i % 2] if mixed else None)
                distinct = list(dict.fromkeys(tuple(x) for x in reversed(w.prompts)))[:p.readback]
                for prompt in distinct:
                    run.ask("readback", list(prompt))
                run.pump()
                account = run.account(capacity) | {"priorities": [r.priority for r in PRIORITIES] if mixed else None}
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
    reads_held: bool = False  # the cell announces ``cached_blocks``: the engine says what it holds
    ledger: Ledger = field(default_factory=Ledger)
    rows: list[dict] = field(default_factory=list)

    def pump(self, wait_s: float = 0.3) -> None:
        got = self.gateway.pump(wait_s)
        self.ledger.see(got)
        self.naive.apply_all(got)

    def ask(self, phase: str, prompt: list[int], retention: Retention | None = None) -> None:
        # the ramp's events may trail a request (a late one arrives at the next poll); the read-back's must be in
        self.pump(0.3 if phase == "readback" else 0.05)
        inv = self.gateway.inventory
        predicted, naive = predict(inv, prompt, self.block), predict(self.naive, prompt, self.block)
        replayed = self.replay.request(prompt, (retention or PRIORITIES[0]).priority)
        st = self.cell.ensure_prefix(prompt, retention=retention)
        reported = st.engine_reused_tokens
        self.rows.append({"phase": phase, "request": len(self.rows), "prompt_tokens": len(prompt),
                          "priority": None if retention is None else retention.priority,
                          "predicted": predicted, "naive_predicted": naive, "replayed": replayed,
                          # whole blocks: an engine that counts exactly (a partial match) says more than blocks hold
                          "reported": None if reported is None else reported // self.block * self.block,
                          "reported_tokens": reported, "ledger_blocks": sum(b.copies for b in inv.blocks.values()),
                          "inventory_hashes": len(inv)})

    def account(self, capacity: int) -> dict:
        inv = self.gateway.inventory
        resident = sum(b.copies for b in inv.blocks.values())
        return {"stored": self.ledger.stored, "removed": self.ledger.removed, "resident": resident,
                "capacity": capacity, "held": self.cell.cached_blocks() if self.reads_held else None,
                "duplicate_removals": self.ledger.duplicate_removals,
                "replay_resident": len(self.replay.pool), "unknown_removals": inv.unknown_removals,
                "orphans": sum(1 for b in inv.blocks.values() if b.parent is not None and b.parent not in inv.blocks)}

    def reset(self, prompt: list[int]) -> dict:
        """Clear the engine's cache (or restart it), then: what the inventory holds before the next request, that
        request's reuse as predicted and as the engine counted it, and the clear signals the engine's own stream
        carried before that request was sent and by the time it had run (beside them, every time the gateway
        emptied its inventory, its own resyncs included)."""
        clear = getattr(self.cell, "reset_prefix_cache", None)
        signals, emptied = self._signals(), self.ledger.cleared + self._resyncs()
        done = bool(clear()) if clear is not None else False
        how = "reset_prefix_cache"
        if not done:  # no clear in the engine's API, or it refused (vllm serve without its dev routes): restart
            how = "restart (switch)" if clear is None else "restart (switch; reset_prefix_cache was refused)"
            done = self.cell.switch() is not None
        self.pump()
        self.pump()
        early = self._signals() - signals
        held = sum(b.copies for b in self.gateway.inventory.blocks.values())
        predicted = predict(self.gateway.inventory, prompt, self.block)
        st = self.cell.ensure_prefix(prompt)
        self.pump()
        return {"how": how, "engine_said": bool(done), "inventory_blocks": held, "predicted": predicted,
                "reported": st.engine_reused_tokens, "engine_signals_early": early,
                "engine_signals": self._signals() - signals,
                "clear_events": self.ledger.cleared + self._resyncs() - emptied}

    def _signals(self) -> int:
        """Clear signals in the engine's own stream so far: its clear events (vLLM AllBlocksCleared, TensorRT-LLM a
        new pool's created) and the times its event ids started again (a restarted engine numbers afresh)."""
        return self.ledger.cleared + sum(m.kind == "cleared" and m.cause == "regression" for m in self.gateway.timeline)

    def _resyncs(self) -> int:
        """Times the gateway emptied its inventory on its own: a sequence that went backwards (a restarted engine) or
        a gap it could not replay."""
        return sum(m.kind == "cleared" for m in self.gateway.timeline)


@dataclass(frozen=True)
class Closure:
    """What the closure rule reads, summarised from the rows and the account."""

    evicted: int  # at least: the engine's removed blocks, or the blocks it stored beyond its pool
    reused: int  # the engine's reuse over the read-back
    overflow: int  # ledger blocks beyond the pool the engine reported (> 0: leaked)
    gap: int | None  # ledger blocks − the blocks the engine says it holds (None: it cannot say)
    exact: float  # read-back requests where the engine's count equals the ledger's prediction
    overclaimed: int  # read-back requests the ledger predicted more for than the engine served
    counted: int  # read-back requests with an engine count
    asked: int
    replay_exact: float
    duplicate_hits: int  # read-backs where the engine hit beyond what the naive twin predicted
    reset: dict | None


def summarise(rows: Sequence[dict], account: dict, reset: dict | None) -> Closure:
    back = [r for r in rows if r["phase"] == "readback"]
    counted = [r for r in back if r["reported"] is not None]
    every = [r for r in rows if r["reported"] is not None]
    held = account.get("held")
    return Closure(
        evicted=max(account["removed"], account["stored"] - account["capacity"]),
        reused=sum(r["reported"] for r in counted), overflow=account["resident"] - account["capacity"],
        gap=None if held is None else account["resident"] - held,
        exact=sum(r["predicted"] == r["reported"] for r in counted) / len(counted) if counted else float("nan"),
        overclaimed=sum(r["predicted"] > r["reported"] for r in counted), counted=len(counted), asked=len(back),
        replay_exact=sum(r["replayed"] == r["reported"] for r in every) / len(every) if every else float("nan"),
        duplicate_hits=sum(r["reported"] > r["naive_predicted"] for r in counted), reset=reset)


def decide(s: Closure) -> Decision:
    """The ladder: a leak the pool proves, a ledger unequal to what the engine says it holds, a clear the engine
    never announced, a read-back the ledger claims more for than the engine served (each refutes outright) → a
    read-back to compare → eviction and reuse seen → the ledger's predictions against the engine's counts → the
    engine's miss after the clear and its announcement before the next request."""
    outright = _refuted_outright(s)
    if outright is not None:
        return outright
    if s.counted < s.asked or not s.asked:
        return Decision("inconclusive", "uncounted")
    if s.evicted == 0 or s.reused == 0:
        return Decision("inconclusive", "untested")
    if s.exact < 1.0:
        return Decision("refuted", "mismatch", rests_on=MISMATCH)
    closed = (*_CLOSED, *(_EQUAL if s.gap is not None else ()))
    if s.reset is None:
        return Decision("confirmed", "closed", rests_on=closed)
    return _after_reset(s.reset, closed)


def _refuted_outright(s: Closure) -> Decision | None:
    """What refutes whatever else the run saw: more blocks in the ledger than the pool holds (blocks left with no
    ``removed``, whether any other came or not), a ledger unequal to the engine's own count, a clear the engine
    forgot and never announced, or a read-back the ledger predicted more for than the engine served."""
    if s.overflow > 0:
        return Decision("refuted", "leak", rests_on=LEAK)
    if s.gap:
        return Decision("refuted", "unequal", rests_on=UNEQUAL)
    r = s.reset
    if r is not None and r["reported"] == 0 and r["inventory_blocks"] > 0 and r["engine_signals"] <= 0:
        return Decision("refuted", "stale", rests_on=STALE)
    if s.overclaimed:
        return Decision("refuted", "overclaimed", rests_on=OVERCLAIMED)
    return None


def _after_reset(r: dict, closed: tuple[Support, ...]) -> Decision:
    """The closed ledger's clear: the engine's miss after it, and its signal (a clear event or a restarted stream)
    before the next request (partial: only with it, so the gateway predicted the old index for that request)."""
    if r["reported"] is None or r["reported"] > 0:
        return Decision("inconclusive", "not-cleared")
    if r["inventory_blocks"] > 0 and r["engine_signals_early"] <= 0:
        return Decision("partial", "late", rests_on=(*closed, *_LATE))
    if r["inventory_blocks"] > 0 or r["engine_signals_early"] <= 0:
        return Decision("inconclusive", "unheard")
    return Decision("confirmed", "closed", rests_on=(*closed, *_TOLD))


def explain(d: Decision, s: Closure, account: dict) -> str:
    ledger = (f"{account['stored']} blocks stored − {account['removed']} removed = {account['resident']} in the "
              f"ledger against the engine's pool of {account['capacity']}"
              + ("" if s.gap is None else f", the engine saying it holds {account['held']}"))
    return _WORDS[d.case](s, ledger, account)


def _closed_words(s: Closure, ledger: str, account: dict) -> str:
    reset = (f"; after {s.reset['how']} the engine said so before the next request, the inventory emptied and that "
             "request missed on the engine and in the prediction" if s.reset else "")
    dup = (f"; {account['duplicate_removals']} removal(s) took one copy of a hash still held, and the engine hit past "
           f"a mirror that forgets a hash at its first removal on {s.duplicate_hits} read-back(s)"
           if account["duplicate_removals"] else "")
    return (f"The event ledger closed: {ledger}, and every one of {s.counted} read-back requests got exactly the "
            f"cached tokens the ledger predicted{dup}{reset}.")


def _unheard(s: Closure, ledger: str, account: dict) -> str:
    r = s.reset
    if r["inventory_blocks"] > 0:
        return (f"The ledger closed ({ledger}), and the engine announced {r['how']} before the next request, yet the "
                f"gateway's inventory still held {r['inventory_blocks']} blocks: the workbench's consumer, not the "
                "engine, kept the old index.")
    return (f"The ledger closed ({ledger}), and after {r['how']} the inventory emptied, but on the consumer's own "
            "resync (a gap it could not replay), not on anything the engine's stream said before the next request.")


_WORDS = {
    "leak": lambda s, ledger, a: (
        f"The ledger leaked: {ledger}, {s.overflow} more than the pool can hold: blocks left the cache with no removed "
        "event (TensorRT-LLM PR #16335's detach), so a mirror keeps them forever"
        + (" (no removed event came at all)." if not a["removed"] else ".")),
    "unequal": lambda s, ledger, a: (
        f"The ledger is not what the engine holds: {ledger}, {abs(s.gap)} "
        + ("more: blocks left with no removed event." if s.gap > 0 else "fewer: blocks held that no stored event "
                                                                         "announced.")),
    "stale": lambda s, ledger, a: (
        f"After {s.reset['how']} the engine served the next request from nothing, but its stream said nothing (no clear "
        f"event, no restarted numbering) even after that request, and the inventory still held "
        f"{s.reset['inventory_blocks']} blocks: nothing told the gateway its index was gone (llm-d #593's stale "
        "entries)."),
    "overclaimed": lambda s, ledger, a: (
        f"The ledger claimed blocks the engine no longer serves: on {s.overclaimed} of {s.counted} read-back requests "
        f"it predicted more cached tokens than the engine reported ({ledger}): blocks gone with no removed event."),
    "uncounted": lambda s, ledger, a:
        "The engine gave no cached-token count on some read-back request, so the ledger has nothing to meet.",
    "untested": lambda s, ledger, a: (
        f"The ramp {'evicted nothing' if s.evicted == 0 else 'reused nothing on the read-back'}, so it cannot show the "
        "ledger closing; shrink the pool or add requests."),
    "mismatch": lambda s, ledger, a: (
        f"The ledger's predictions met the engine's own counts on {s.exact:.0%} of {s.counted} read-back requests "
        f"({ledger}): what the events say is held is not what the engine serves."),
    "late": lambda s, ledger, a: (
        f"The ledger closed ({ledger}; every one of {s.counted} read-back requests as it predicted), but after "
        f"{s.reset['how']} the engine's stream announced it only once its next step had run: the inventory still held "
        f"{s.reset['inventory_blocks']} blocks, the request right after it was predicted {s.reset['predicted']} cached "
        f"tokens and the engine reported {s.reset['reported']}."),
    "not-cleared": lambda s, ledger, a: (
        f"The ledger closed ({ledger}), but after {s.reset['how']} the engine still reported "
        f"{s.reset['reported']} cached tokens: the clear did not clear, so misses did not follow."),
    "unheard": _unheard,
    "closed": _closed_words,
}


def verdict(rows: Sequence[dict], account: dict, reset: dict | None = None) -> Outcome:
    """Confirmed: eviction and reuse seen, the ledger within the engine's pool (and equal to what it says it holds,
    where it can), every read-back as the ledger predicted, and (where run) the engine announcing the clear before
    the next request, which missed. Refuted: a ledger larger than the pool (a leak: blocks gone with no ``removed``,
    whether or not any came), unequal to the engine's own count, a clear the engine never announced, or a
    read-back the ledger mispredicted (one it predicted more for refutes even when the engine reused nothing).
    The offline replay is shown beside, never a support."""
    s = summarise(rows, account, reset)
    d = decide(s)
    metrics = {"ledger_stored_blocks": account["stored"], "ledger_removed_blocks": account["removed"],
               "ledger_resident_blocks": account["resident"], "engine_capacity_blocks": account["capacity"],
               "ledger_overflow_blocks": s.overflow, "engine_evicted_min_blocks": s.evicted,
               "engine_reused_tokens": s.reused, "ledger_exact_fraction": s.exact,
               "ledger_overclaimed_requests": s.overclaimed,
               "replay_resident_blocks": account["replay_resident"], "replay_exact_fraction": s.replay_exact,
               "duplicate_copy_removals": account["duplicate_removals"]}
    if s.gap is not None:
        metrics |= {"engine_held_blocks": account["held"], "ledger_held_gap_blocks": s.gap}
    if reset is not None:
        metrics |= {"reset_inventory_blocks": reset["inventory_blocks"], "reset_clear_events": reset["clear_events"],
                    "reset_engine_clear_signals": reset["engine_signals"],
                    "reset_engine_clear_signals_early": reset["engine_signals_early"]}
        if reset["reported"] is not None:
            metrics["reset_engine_reused_tokens"] = reset["reported"]
    return Outcome(d.verdict, explain(d, s, account), metrics,
                   list(rows) + ([{"phase": "reset", **reset}] if reset else []), _notes(s, account, reset),
                   rests_on=d.rests_on)


def _notes(s: Closure, account: dict, reset: dict | None) -> list[str]:
    held = ("the engine cannot say what it holds (no cached_blocks observer), so only the pool bounds it" if s.gap is None
            else f"the engine's own index holds {account['held']} ({'equal' if not s.gap else f'{s.gap:+d} apart'})")
    notes = [f"three readings of what the engine holds: the ledger {account['resident']} blocks (stored − removed, "
             f"copies counted) within a pool of {account['capacity']}, and {held}; the engine's own counts on the "
             f"read-back ({s.exact:.0%} as the ledger predicted); the offline replay {account['replay_resident']} "
             f"blocks ({s.replay_exact:.0%} of requests as the engine counted; computed, not a reading of the "
             "engine)",
             f"blocks in the ledger whose parent it no longer holds: {account['orphans']}; removals of a hash never "
             f"stored: {account['unknown_removals']}",
             "ramp priorities: " + (f"alternating {' and '.join(map(str, account['priorities']))} (retention), so a "
                                    "prefix can fall below the suffixes stored under it"
                                    if account.get("priorities") else "one (the engine takes no retention priority, "
                                    "or mixed_priority=false): a chain's leaf always goes first")]
    if reset is not None:
        notes.append(f"after {reset['how']}: the inventory held {reset['inventory_blocks']} blocks, the next request "
                     f"was predicted {reset['predicted']} cached tokens and the engine reported {reset['reported']}; "
                     f"the engine's clear signals (clear events, a restarted numbering): {reset['engine_signals_early']} "
                     f"before that request, {reset['engine_signals']} by the time it had run; times the gateway "
                     f"emptied its inventory (its own resyncs too): {reset['clear_events']}")
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
    return notes
