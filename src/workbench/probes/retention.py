"""retention.pinning_under_pressure — does priority retention pin a prefix, or only order eviction?

Per arm (a fresh cell each, so arms never share KV): pin a prefix at priority P (optionally with
``duration_ms``), then ramp default-priority filler load sized from the engine's own free
capacity, re-requesting the prefix after every step. Survival = reused / baseline reuse of an
unpressured repeat, read from the engine's own KV when the cell can (``kv_readback``), else from
its per-request reuse counters. Channels: those, KV ``removed`` events when the engine has them, and
the re-request's latency. Every arm runs ``repeats`` times, each repeat in a fresh seeded random arm
order: "ordered" needs the order in every repeat, one sample per arm cannot show it.

An engine that never evicts (``Description.absent["eviction"]``, e.g. llama.cpp) cannot pin or
order anything: the probe then shows the absence instead: it pins the prefix, fills the rest of
the cache until the *engine* refuses, and reads the prefix's KV back from the engine. Refused with
the prefix intact gives ``not-applicable`` with that evidence; a prefix lost there is a loss.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..engine import KvEvent, Retention
from . import Decision, Figure, Outcome, Probe, ProbeContext, Support, param, Bound, COUNT, TOKENS, SEED
from .common import apply_pressure, fresh_salt, timed, token_ids


@dataclass(frozen=True)
class Params:
    prefix_tokens: int = param(256, "tokens in the pinned prefix", TOKENS)
    capacity_tokens: int = param(1024, "KV budget of the cell, in tokens (the ramp is sized from the engine's own capacity)", COUNT)
    priorities: tuple[int, ...] = param((35, 60, 100), "retention priorities to sweep", Bound(0, 100))
    pressure: tuple[float, ...] = param((0.25, 0.5, 1.0, 2.0, 4.0, 8.0), "cumulative filler load, × free capacity")
    filler_slots: int = param(8, "concurrent filler sequences (slots)", COUNT)
    filler_fraction: float = param(0.25, "one filler's length as a fraction of free capacity")
    expiry_ms: int = param(200, "duration_ms of the expiry arm (priority 100); 0 skips that arm",
                           Bound(0, 600_000))
    repeats: int = param(3, "runs of every arm, each repeat in a new random arm order; an order or a tie must hold "
                            "in every repeat (engines without retention priorities run one: all arms are alike there)", COUNT)
    seed: int = param(0, "seed for the probe's own token ids and arm orders", SEED)

    def __post_init__(self) -> None:
        if not self.priorities:
            raise ValueError("priorities needs at least one priority")
        if self.prefix_tokens < 2 or self.prefix_tokens >= self.capacity_tokens:
            raise ValueError("prefix_tokens must be at least 2 and below capacity_tokens")
        if not self.pressure or any(r <= 0 for r in self.pressure):
            raise ValueError("pressure ratios must be positive")
        if self.filler_slots * self.filler_fraction <= 1:
            raise ValueError("filler_slots × filler_fraction must exceed 1, or concurrent fillers can never "
                             "exceed free capacity on an engine that keeps them resident")


@dataclass(frozen=True)
class Arm:
    priority: int
    duration_ms: int | None

    @property
    def label(self) -> str:
        return f"p{self.priority}" + (f"+{self.duration_ms}ms" if self.duration_ms else "")


# Fewer repeats than this cannot show that an order (or a tie) between priorities is consistent.
MIN_REPEATS = 2
# TensorRT-LLM's default retention priority (kDefaultRetentionPriority, cpp/include/tensorrt_llm/executor/executor.h):
# what a block gets when its request names none. A cell attaches its own default retention to every request (the
# TensorRT-LLM cell's is its EnsurePrefix pin, 100), so the fillers name this one. And a request that matches
# cached blocks overwrites their priority with the one it names (WindowBlockManager::loadOrAllocateBlocks →
# claimBlock), so every re-request of the prefix names the arm's own retention, or it would re-pin every arm.
DEFAULT_PRIORITY = 35


class PinningUnderPressure(Probe):
    version = "4"
    claims = ("unknown.retention_pressure", "risk.retention_bias")
    _pinned = ((Support("survival_at_max_pressure", ">=", 1.0),),)
    _lost = ((Support("survival_at_max_pressure", "<", 1.0),), (Support("engine_resident_tokens", "<", None),))
    rests = {("*", "confirmed"): _pinned, ("*", "refuted"): _lost,
             # the bias row: a pin that held while lower priorities were lost refutes "only biases"; a loss confirms
             ("risk.retention_bias", "refuted"): _pinned, ("risk.retention_bias", "confirmed"): _lost}
    figures = (Figure("survival", "survival"),
               Figure("timeline", "timeline", {"spans": (("rerequest_s", "re-request"),), "lane": "arm",
                                               "title": "Re-requests of the retained prefix"}))
    Params = Params

    def run(self, ctx: ProbeContext, p: Params) -> Outcome:
        with ctx.open(slots=2, kv_budget_tokens=p.capacity_tokens) as cell:
            d = cell.describe()
            if "eviction" in d.absent:
                return absence(self._absence(cell, d, p), d.absent["eviction"])
            no_priority = d.absent.get("retention_priority")
            default_manager = release_default_manager(d)
        arms = [Arm(pr, None) for pr in sorted(set(p.priorities))]
        if p.expiry_ms:
            arms.append(Arm(100, p.expiry_ms))
        # Without priorities every arm is the same plain-eviction baseline: one repeat shows it.
        repeats = 1 if no_priority else p.repeats
        orders = np.random.default_rng(p.seed)
        rows: list[dict] = []
        for rep in range(repeats):
            for i in orders.permutation(len(arms)):  # arms in a new random order each repeat, a seed per (repeat, arm)
                rows += self._arm(ctx, p, arms[i], rep, np.random.default_rng([p.seed, rep, int(i)]))
        return verdict(rows, p, arms, no_priority, default_manager)

    def _absence(self, cell, d, p: Params) -> list[dict]:
        """Pin the prefix, fill the rest until the engine refuses, read the prefix back from the engine."""
        if not {"capacity", "kv_readback"} <= set(d.observers):
            return []
        prefix = token_ids(np.random.default_rng(p.seed), p.prefix_tokens, d)
        cell.ensure_prefix(prefix, slot=0, salt=fresh_salt("pinned"), retention=Retention(100))
        before = cell.resident_tokens(slot=0)
        taken = cell.measure_capacity(slot=1)
        return [{"prefix_tokens": p.prefix_tokens, "resident_before": before, "filler_taken": taken,
                 "engine_refused": True, "capacity_tokens": d.kv_capacity_tokens,
                 "resident_after": cell.resident_tokens(slot=0)}]

    def _arm(self, ctx: ProbeContext, p: Params, arm: Arm, rep: int, rng: np.random.Generator) -> list[dict]:
        with ctx.open(slots=1 + p.filler_slots, kv_budget_tokens=p.capacity_tokens) as cell:
            d = cell.describe()
            has_events = "kv_events" in d.observers
            readback = "kv_readback" in d.observers
            free = d.kv_capacity_tokens - p.prefix_tokens
            filler = max(1, int(free * p.filler_fraction))
            prefix = token_ids(rng, p.prefix_tokens, d)
            salt, kept, plain = fresh_salt("pinned"), Retention(arm.priority, arm.duration_ms), Retention(DEFAULT_PRIORITY)
            cell.ensure_prefix(prefix, slot=0, salt=salt, retention=kept)
            pinned_hashes = _stored_hashes(cell.drain_kv_events()) if has_events else set()
            base = cell.ensure_prefix(prefix, slot=0, salt=salt, retention=kept)
            # survival reads the engine's own reuse count where it has one, the cell's only where it has none
            counted = base.engine_reused_tokens is not None
            baseline = base.engine_reused_tokens if counted else base.reused_tokens
            if arm.duration_ms:
                time.sleep(2 * arm.duration_ms / 1000)
            rows, sent, start = [], 0.0, 0
            for ratio in sorted(p.pressure):
                load = int(round(ratio * free - sent))
                sent += load
                pr = apply_pressure(cell, load, filler, list(range(1, 1 + p.filler_slots)), rng, d, start, plain)
                start += pr.submitted
                removed = _removed_hashes(cell.drain_kv_events()) if has_events else set()
                held = cell.resident_tokens(slot=0) if readback else None
                elapsed, st = timed(cell.ensure_prefix, prefix, slot=0, salt=salt, retention=kept)
                if has_events:
                    removed |= _removed_hashes(cell.drain_kv_events())
                rows.append({
                    "repeat": rep, "arm": arm.label, "priority": arm.priority, "duration_ms": arm.duration_ms, "pressure": ratio,
                    "free_tokens": free, "filler_tokens": filler, "fillers_sent": pr.submitted,
                    "fillers_refused": pr.refused, "fillers_admitted_tokens": pr.tokens,
                    "baseline_reused": baseline, "reused_tokens": st.reused_tokens, "engine_resident": held,
                    "survival_source": "engine" if readback or counted else "cell",
                    "survival": (held / p.prefix_tokens if readback
                                 else _survival(_reused(st, counted), baseline)),
                    "rerequest_s": elapsed,
                    "removed_blocks": len(removed) if has_events else None,
                    "pinned_blocks_removed": len(removed & pinned_hashes) if has_events else None,
                })
        return rows


def release_default_manager(d) -> str | None:
    """The KV manager the cell ran where it is the release's own default rather than the one the cell pins
    (``Description.extra["kv_cache_manager"]``: TensorRT-LLM 1.4 opened with ``kv_manager="default"`` runs V2);
    None where the cell ran its pinned one, or has no choice of manager."""
    manager = (getattr(d, "extra", None) or {}).get("kv_cache_manager") or {}
    return str(manager["used"]) if manager.get("used") and "default" in str(manager.get("how", "")) else None


def _survival(reused: int | None, baseline: int) -> float:
    """Reuse over the baseline's; NaN (unmeasured, never a loss) without a baseline or without a count."""
    return reused / baseline if baseline and reused is not None else float("nan")


def _stored_hashes(events: list[KvEvent]) -> set[int]:
    return {h for e in events if e.kind == "stored" for h in e.block_hashes}


def _removed_hashes(events: list[KvEvent]) -> set[int]:
    return {h for e in events if e.kind == "removed" for h in e.block_hashes}


def first_loss(rows: list[dict], label: str) -> float:
    """The lowest pressure at which the arm's prefix was not fully reused (inf if never), over ``rows`` (one
    repeat's)."""
    lost = [r["pressure"] for r in rows if r["arm"] == label and not r["survival"] >= 1.0]  # NaN is not survival
    return min(lost) if lost else math.inf


def _reused(st, counted: bool) -> int | None:
    """Prefix tokens a re-request reused: the engine's count where the baseline read one, else the cell's; None
    where the engine gave this re-request no count (missing, never 0)."""
    return st.engine_reused_tokens if counted else None if st.source == "none" else st.reused_tokens


def by_repeat(rows: list[dict]) -> dict[int, list[dict]]:
    """The rows of each repeat (rows from before repeats existed are one repeat, 0)."""
    out: dict[int, list[dict]] = {}
    for r in rows:
        out.setdefault(int(r.get("repeat", 0)), []).append(r)
    return dict(sorted(out.items()))


def pair_order(rows: list[dict], lower: Arm, higher: Arm) -> str:
    """How the higher-priority arm's survival-vs-pressure curve stands to the lower's in one repeat:
    ``ordered`` (at least as high at every step, higher at one), ``tied`` (equal at every step) or
    ``crossed`` (lower somewhere, or steps that do not match)."""
    lo = {r["pressure"]: r["survival"] for r in rows if r["arm"] == lower.label}
    hi = {r["pressure"]: r["survival"] for r in rows if r["arm"] == higher.label}
    if not lo or lo.keys() != hi.keys():
        return "crossed"
    if all(hi[x] == lo[x] for x in lo):
        return "tied"
    return "ordered" if all(hi[x] >= lo[x] for x in lo) else "crossed"


def repeat_order(rows: list[dict], plain: list[Arm]) -> str:
    """One repeat's order of the priority arms (by priority): ``ordered`` when each curve dominates the one
    below it, ``tied`` when all are equal, ``crossed`` when one falls below a lower priority's, else
    ``partly tied``."""
    pairs = {pair_order(rows, a, b) for a, b in zip(plain, plain[1:])}
    if len(pairs) == 1:
        return next(iter(pairs))
    return "crossed" if "crossed" in pairs else "partly tied"


def absence(rows: list[dict], why: str) -> Outcome:
    """The verdict on an engine that declares it never evicts, from the absence check's one row."""
    notes = [f"the cell declares no eviction: {why}"]
    if not rows:
        return Outcome("inconclusive", "The engine declares it never evicts, but the cell cannot read KV back "
                       "from the engine or fill it until it refuses, so the absence could not be shown.", {}, [], notes)
    r = rows[0]
    lost = r["resident_before"] - r["resident_after"]
    metrics = {"engine_resident_tokens": r["resident_after"], "silent_evictions": lost,
               "engine_refusals": int(r["engine_refused"]), "capacity_tokens": r["capacity_tokens"],
               "measured_capacity_tokens": r["filler_taken"] + r["resident_after"],
               "survival_at_max_pressure": r["resident_after"] / r["prefix_tokens"]}
    if r["filler_taken"] + r["resident_after"] > r["capacity_tokens"]:
        return Outcome("inconclusive", f"The read-back does not add up: the engine took {r['filler_taken']} filler "
                       f"tokens beside {r['resident_after']} prefix tokens said to be held, more than its "
                       f"{r['capacity_tokens']}-token capacity, so the prefix read-back cannot be trusted.",
                       metrics, rows, notes)
    if r["resident_before"] < r["prefix_tokens"]:
        return Outcome("inconclusive", f"The engine held only {r['resident_before']} of the {r['prefix_tokens']} "
                       "prefix tokens right after they were ensured; the check cannot start.", metrics, rows, notes)
    if lost:
        return Outcome("refuted", f"The engine lost {lost} of the {r['prefix_tokens']} pinned prefix tokens (read back "
                       f"from the engine) while the rest of the cache was filled, although the cell declares that it "
                       "never evicts: the prefix was not retained.", metrics, rows, notes,
                       {"risk.retention_bias": "inconclusive"},
                       rests_on=(Support("engine_resident_tokens", "<", r["prefix_tokens"]),))
    return Outcome("not-applicable", f"The engine has no eviction to pin against: with the {r['prefix_tokens']}-token "
                   f"prefix resident it took {r['filler_taken']} more tokens and then refused the next batch itself, "
                   f"and all {r['resident_after']} prefix tokens were still held (read back from the engine). "
                   "Retention priorities have nothing to act on.", metrics, rows, notes,
                   {"risk.retention_bias": "not-applicable"})


@dataclass(frozen=True)
class Ramp:
    """What the pinning rule reads, summarised from the ramp's rows: the top arm's survival per repeat, the load
    the engine admitted, each arm's first loss and each repeat's order of the priority arms."""

    top: Arm
    arms: tuple[Arm, ...]
    plain: tuple[Arm, ...]  # the arms without expiry, by priority
    repeats: int
    max_ratio: float  # the highest requested load, × free capacity
    has_top: bool  # the top arm has rows
    refused: int  # top-priority fillers the engine refused, over every repeat
    admitted: float  # load the engine admitted, × free capacity, in the weakest repeat
    unmeasured: int  # pressure steps whose survival could not be measured
    survival_max: float  # the top arm's survival at the highest pressure, in the worst repeat
    survival_tag: str  # survival_at_max_pressure (engine-read) or reported_survival_at_max_pressure
    held_upto: float  # the highest pressure the top arm fully held in every repeat
    silent_evictions: int
    capacity_tokens: int | None
    losses: Mapping[int, Mapping[str, float]]  # repeat → arm label → first-loss pressure (inf: never lost)
    top_lost: tuple[int, ...]  # repeats in which the top arm was lost
    orders: Mapping[int, str]  # repeat → the priority arms' order there (none with one priority arm)
    lower_lost: bool  # in every repeat some lower priority was lost
    no_priority: str | None = None  # why the cell has no retention priorities

    @property
    def consistent(self) -> bool:
        return self.repeats >= MIN_REPEATS and len(set(self.orders.values())) == 1

    @property
    def ordered(self) -> bool:
        return self.consistent and set(self.orders.values()) == {"ordered"}

    @property
    def tied(self) -> bool:
        return self.consistent and set(self.orders.values()) == {"tied"}

    @property
    def survived(self) -> bool:
        return self.has_top and not self.top_lost

    def where(self, k: int, a: Arm) -> str:
        loss = self.losses[k][a.label]
        return "survives all" if math.isinf(loss) else f"lost from {loss:g}×"


def summarise(rows: list[dict], p: Params, arms: list[Arm], no_priority: str | None = None) -> Ramp:
    top = Arm(100, None) if 100 in p.priorities else Arm(max(p.priorities), None)
    reps = by_repeat(rows)
    top_rows = {k: sorted((r for r in v if r["arm"] == top.label), key=lambda r: r["pressure"])
                for k, v in reps.items()}
    top_rows = {k: v for k, v in top_rows.items() if v}
    every_top = [r for v in top_rows.values() for r in v]
    losses = {k: {a.label: first_loss(v, a.label) for a in arms} for k, v in reps.items()}
    plain = tuple(sorted((a for a in arms if a.duration_ms is None), key=lambda a: a.priority))
    from_engine = bool(every_top) and all(r.get("survival_source") == "engine" for r in every_top)
    return Ramp(
        top=top, arms=tuple(arms), plain=plain, repeats=len(reps), max_ratio=max(p.pressure), has_top=bool(every_top),
        refused=sum(r["fillers_refused"] for r in every_top),
        admitted=min((sum(r.get("fillers_admitted_tokens", 0) for r in v) / v[0]["free_tokens"]
                      if v[0]["free_tokens"] else 0.0 for v in top_rows.values()), default=0.0),
        unmeasured=sum(1 for r in rows if not math.isfinite(r["survival"])),
        survival_max=min((v[-1]["survival"] for v in top_rows.values()), default=float("nan")),
        survival_tag="survival_at_max_pressure" if from_engine else "reported_survival_at_max_pressure",
        held_upto=min((max((r["pressure"] for r in v if r["pressure"] < losses[k][top.label] and r["survival"] >= 1.0),
                           default=0.0) for k, v in top_rows.items()), default=0.0),
        silent_evictions=max((round(r["baseline_reused"] * (1 - r["survival"])) for r in every_top
                              if math.isfinite(r["survival"])), default=0),
        capacity_tokens=every_top[0]["free_tokens"] + p.prefix_tokens if every_top else None,
        losses=losses, top_lost=tuple(k for k in top_rows if not math.isinf(losses[k][top.label])),
        orders={k: repeat_order(v, list(plain)) for k, v in reps.items()} if len(plain) > 1 else {},
        lower_lost=all(any(not math.isinf(losses[k][a.label]) for a in plain if a != top) for k in reps),
        no_priority=no_priority)


def decide(s: Ramp) -> Decision:
    """The ladder: pressure sustained → survival measured → priorities exist → load admitted → pinned or lost."""
    if not s.has_top or s.max_ratio <= 1.0:
        return Decision("inconclusive", "no-pressure")
    if s.unmeasured:
        return Decision("inconclusive", "unmeasured")
    if s.no_priority:
        return Decision("not-applicable", "no-priority", {"risk.retention_bias": "not-applicable"})
    if s.admitted <= 1.0:
        return Decision("inconclusive", "not-admitted")
    if s.survived:
        bias = "refuted" if len(s.plain) > 1 and s.lower_lost else "inconclusive"
        return Decision("confirmed", "pinned", {"risk.retention_bias": bias}, (Support(s.survival_tag, ">=", 1.0),))
    bias = "confirmed" if s.ordered or s.tied else "inconclusive"
    return Decision("refuted", "lost", {"risk.retention_bias": bias}, (Support(s.survival_tag, "<", 1.0),))


def explain(d: Decision, s: Ramp, p: Params) -> str:
    """The verdict's summary in words."""
    repeats = f"{s.repeats} repeat{'s' if s.repeats > 1 else ''}"
    if d.case == "no-pressure":
        return (f"The ramp never exceeded free capacity (max {s.max_ratio:g}×), so pressure was not sustained; "
                "raise `pressure`.")
    if d.case == "unmeasured":
        return (f"Survival could not be measured at {s.unmeasured} pressure step(s) (no baseline reuse and no "
                "read-back), and an unmeasured prefix is not a surviving one.")
    if d.case == "no-priority":
        held = ("held at every step" if s.survived
                else f"lost from {min(s.losses[k][s.top.label] for k in s.losses):g}×")
        return (f"The engine has no retention priority to pin or order with ({s.no_priority}); as a reference, the "
                f"prefix under plain eviction was {held} ({s.admitted:.2f}× free capacity admitted).")
    if d.case == "not-admitted":
        return (f"Requested load reached {s.max_ratio:g}× free capacity, but the engine admitted only "
                f"{s.admitted:.2f}× ({s.refused} filler(s) refused): the prefix was never under pressure beyond free "
                "capacity, so its survival says nothing about pinning.")
    if d.case == "pinned":
        how = (f"{s.refused} filler request(s) beyond capacity were refused with an explicit overflow error"
               if s.refused else "no filler was refused")
        effect = ("" if len(s.plain) < 2 or s.lower_lost else
                  (" In some repeat no lower priority was lost either, so the ramp did not show what priority "
                   "adds over plain eviction."))
        return (f"Priority-{s.top.priority} prefix ({p.prefix_tokens} tokens) was fully held at every pressure in "
                f"all {repeats}, with at least {s.admitted:.2f}× free capacity of filler admitted; {how}.{effect}")
    first = min(s.losses[k][s.top.label] for k in s.top_lost)
    lost_in = (f"in {len(s.top_lost)} of {repeats}" if len(s.top_lost) < s.repeats
               else f"in every one of {repeats}" if s.repeats > 1 else "in its one repeat")
    return (f"Priority-{s.top.priority} prefix was lost {lost_in} (from {first:g}× free capacity at the earliest; "
            f"{s.survival_max:.0%} held at {s.max_ratio:g}× in the worst repeat), {_order_words(s, repeats)}: "
            "retention " + ("orders eviction, it does not pin." if s.ordered else "neither pins nor orders."
                            if s.tied else "does not pin."))


def _order_words(s: Ramp, repeats: str) -> str:
    if len(s.plain) < 2:
        return "with one priority arm only, so no order is shown"
    if s.ordered:
        return f"and each higher priority's survival curve dominated the lower's in all {repeats}"
    if s.tied:
        return (f"and every priority ({', '.join(a.label for a in s.plain)}) fell alike in all {repeats}: "
                "no effect of priority")
    if s.repeats < MIN_REPEATS:
        return (f"and one repeat ({s.orders[next(iter(s.orders))]}) cannot show a consistent order between "
                f"priorities; raise `repeats` to at least {MIN_REPEATS}")
    return ("and the priorities were in no consistent order across the repeats ("
            + ", ".join(s.orders[k] for k in s.losses) + "): no order shown")


def _notes(d: Decision, s: Ramp) -> list[str]:
    notes = [f"repeat {k}: first-loss pressure per arm (cumulative filler load sent, × free capacity): "
             + "; ".join(f"{a.label}: {s.where(k, a)}" for a in s.arms)
             + (f" → priorities {s.orders[k]}" if s.orders else "") for k in s.losses]
    notes.append(f"load the engine admitted over the ramp: {s.admitted:.2f}× free capacity in the weakest of "
                 f"{s.repeats} repeat(s) ({s.refused} top-priority filler(s) refused in all)")
    expiry = [a for a in s.arms if a.duration_ms]
    if expiry:
        e = expiry[0]
        notes.append(f"expiry arm {e.label}, per repeat: " + "; ".join(
            f"{s.where(k, e)} (priority-100 without expiry: {s.where(k, s.top)})" for k in s.losses)
            + (" — never lost, so expiry is not observable on this engine"
               if all(math.isinf(s.losses[k][e.label]) for k in s.losses) else ""))
    if d.case == "no-priority":
        notes.insert(0, f"the cell declares no retention priority: {s.no_priority}")
    return notes


def verdict(rows: list[dict], p: Params, arms: list[Arm], no_priority: str | None = None,
            default_manager: str | None = None) -> Outcome:
    """Pins: the top priority survives the whole ramp in every repeat. Orders: the top priority is lost, and
    in every one of at least :data:`MIN_REPEATS` repeats each priority's survival curve dominates the one
    below it. Curves equal in every repeat show no effect of priority, never an order; curves that cross,
    or an order or tie seen in fewer repeats, show no consistent order (inconclusive on the bias risk);
    one arm alone shows no order at all. The ramp counts as pressure only by the load the engine admitted
    (a refused filler adds none; the weakest repeat counts), and survival that could not be measured (NaN)
    is no survival. An engine without retention priorities (``no_priority``) is not-applicable to the
    priority claims."""
    s = summarise(rows, p, arms, no_priority)
    d = decide(s)
    metrics = {"pinned_survival_max_pressure": s.held_upto, s.survival_tag: s.survival_max,
               "admitted_load": s.admitted, "overflow_errors": s.refused, "silent_evictions": s.silent_evictions,
               "capacity_tokens": s.capacity_tokens}
    summary, notes = explain(d, s, p), _notes(d, s)
    if default_manager:  # the release's default manager, not the cell's pinned one: its own finding
        honoured = d.case == "pinned" or (d.case == "lost" and s.ordered)
        said = f"{default_manager} default: retention {'honoured' if honoured else 'not honoured'}"
        if d.case in ("pinned", "lost"):
            summary = f"{said} — {summary}"
        notes.insert(0, f"the cell ran the release's default KV manager ({default_manager}), not the one it pins: "
                     "a finding beside the claim's run (settle: exploratory)")
    return Outcome(d.verdict, summary, metrics, rows, notes, dict(d.claim_verdicts),
                   rests_on=d.rests_on, claim_reasons=_bias_reason(d, s))


def _bias_reason(d: Decision, s: Ramp) -> dict[str, str]:
    """The bias risk's own reason ("priority retention may only bias LRU rather than pin"), from the same ramp."""
    bias = d.claim_verdicts.get("risk.retention_bias")
    if d.case == "pinned":
        return {"risk.retention_bias": (
            f"Priority {s.top.priority} pinned its prefix through the ramp while lower priorities were lost: retention "
            "does more than bias LRU." if bias == "refuted" else
            f"Priority {s.top.priority} held its prefix, but with one priority arm, or no lower one lost, the ramp "
            "cannot tell pinning from a bias.")}
    if d.case == "lost":
        return {"risk.retention_bias": (
            f"Priority {s.top.priority} was lost under pressure and the priorities "
            + ("ordered eviction: retention biases LRU, it does not pin." if s.ordered else
               "fell alike: retention neither pins nor orders eviction." if s.tied else
               "were in no consistent order, so whether retention biases LRU cannot be told."))}
    return {}
