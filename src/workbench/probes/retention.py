"""retention.pinning_under_pressure — does priority retention pin a prefix, or only order eviction?

Per arm (a fresh cell each, so arms never share KV): pin a prefix at priority P (optionally with
``duration_ms``), then ramp default-priority filler load sized from the engine's own free
capacity, re-requesting the prefix after every step. Survival = reused / baseline reuse of an
unpressured repeat, read from the engine's own KV when the cell can (``kv_readback``), else from
its per-request reuse counters. Channels: those, KV ``removed`` events when the engine has them, and
the re-request's latency.

An engine that never evicts (``Description.absent["eviction"]``, e.g. llama.cpp) cannot pin or
order anything: the probe then shows the absence instead: it pins the prefix, fills the rest of
the cache until the *engine* refuses, and reads the prefix's KV back from the engine. Refused with
the prefix intact gives ``not-applicable`` with that evidence; a prefix lost there is a loss.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ..contract import KvEvent, Retention
from . import Figure, Outcome, Probe, ProbeContext, param
from .common import apply_pressure, fresh_salt, timed, token_ids


@dataclass(frozen=True)
class Params:
    prefix_tokens: int = param(256, "tokens in the pinned prefix")
    capacity_tokens: int = param(1024, "KV budget of the cell, in tokens (the ramp is sized from the engine's own capacity)")
    priorities: tuple[int, ...] = param((35, 60, 100), "retention priorities to sweep (0–100)")
    pressure: tuple[float, ...] = param((0.25, 0.5, 1.0, 2.0, 4.0, 8.0), "cumulative filler load, × free capacity")
    filler_slots: int = param(8, "concurrent filler sequences (slots)")
    filler_fraction: float = param(0.25, "one filler's length as a fraction of free capacity")
    expiry_ms: int = param(200, "duration_ms of the expiry arm (priority 100); 0 skips that arm")
    seed: int = param(0, "seed for the probe's own token ids")

    def __post_init__(self) -> None:
        if not self.priorities or any(not 0 <= p <= 100 for p in self.priorities):
            raise ValueError("priorities must be in [0, 100]")
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


class PinningUnderPressure(Probe):
    version = "3"
    claims = ("unknown.retention_pressure", "risk.retention_bias")
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
        arms = [Arm(pr, None) for pr in sorted(set(p.priorities))]
        if p.expiry_ms:
            arms.append(Arm(100, p.expiry_ms))
        order = np.random.default_rng(p.seed).permutation(len(arms))  # arms in random order, seeds per arm
        rows: list[dict] = []
        for i in order:
            rows += self._arm(ctx, p, arms[i], np.random.default_rng(p.seed + int(i)))
        return verdict(rows, p, arms, no_priority)

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

    def _arm(self, ctx: ProbeContext, p: Params, arm: Arm, rng: np.random.Generator) -> list[dict]:
        with ctx.open(slots=1 + p.filler_slots, kv_budget_tokens=p.capacity_tokens) as cell:
            d = cell.describe()
            has_events = "kv_events" in d.observers
            readback = "kv_readback" in d.observers
            free = d.kv_capacity_tokens - p.prefix_tokens
            filler = max(1, int(free * p.filler_fraction))
            prefix = token_ids(rng, p.prefix_tokens, d)
            salt = fresh_salt("pinned")
            cell.ensure_prefix(prefix, slot=0, salt=salt, retention=Retention(arm.priority, arm.duration_ms))
            pinned_hashes = _stored_hashes(cell.drain_kv_events()) if has_events else set()
            baseline = cell.ensure_prefix(prefix, slot=0, salt=salt).reused_tokens
            if arm.duration_ms:
                time.sleep(2 * arm.duration_ms / 1000)
            rows, sent, start = [], 0.0, 0
            for ratio in sorted(p.pressure):
                load = int(round(ratio * free - sent))
                sent += load
                pr = apply_pressure(cell, load, filler, list(range(1, 1 + p.filler_slots)), rng, d, start)
                start += pr.submitted
                removed = _removed_hashes(cell.drain_kv_events()) if has_events else set()
                held = cell.resident_tokens(slot=0) if readback else None
                elapsed, st = timed(cell.ensure_prefix, prefix, slot=0, salt=salt)
                if has_events:
                    removed |= _removed_hashes(cell.drain_kv_events())
                rows.append({
                    "arm": arm.label, "priority": arm.priority, "duration_ms": arm.duration_ms, "pressure": ratio,
                    "free_tokens": free, "filler_tokens": filler, "fillers_sent": pr.submitted,
                    "fillers_refused": pr.refused, "fillers_admitted_tokens": pr.tokens,
                    "baseline_reused": baseline, "reused_tokens": st.reused_tokens, "engine_resident": held,
                    "survival_source": "engine" if readback or st.engine_reused_tokens is not None else "cell",
                    "survival": (held / p.prefix_tokens if readback
                                 else st.reused_tokens / baseline if baseline else float("nan")),
                    "rerequest_s": elapsed,
                    "removed_blocks": len(removed) if has_events else None,
                    "pinned_blocks_removed": len(removed & pinned_hashes) if has_events else None,
                })
        return rows


def _stored_hashes(events: list[KvEvent]) -> set[int]:
    return {h for e in events if e.kind == "stored" for h in e.block_hashes}


def _removed_hashes(events: list[KvEvent]) -> set[int]:
    return {h for e in events if e.kind == "removed" for h in e.block_hashes}


def first_loss(rows: list[dict], label: str) -> float:
    """The lowest pressure at which the arm's prefix was not fully reused (inf if never)."""
    lost = [r["pressure"] for r in rows if r["arm"] == label and not r["survival"] >= 1.0]  # NaN is not survival
    return min(lost) if lost else math.inf


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
                       {"risk.retention_bias": "inconclusive"}, rests_on=("engine_resident_tokens",))
    return Outcome("not-applicable", f"The engine has no eviction to pin against: with the {r['prefix_tokens']}-token "
                   f"prefix resident it took {r['filler_taken']} more tokens and then refused the next batch itself, "
                   f"and all {r['resident_after']} prefix tokens were still held (read back from the engine). "
                   "Retention priorities have nothing to act on.", metrics, rows, notes,
                   {"risk.retention_bias": "not-applicable"})


def verdict(rows: list[dict], p: Params, arms: list[Arm], no_priority: str | None = None) -> Outcome:
    """Pins: the top priority survives the whole ramp. Orders: every arm is lost, strictly later the
    higher its priority. Arms lost at the same pressure show no effect of priority, never an order; one
    arm alone shows no order at all. The ramp counts as pressure only by the load the engine admitted
    (a refused filler adds none), and survival that could not be measured (NaN) is no survival. An
    engine without retention priorities (``no_priority``) is not-applicable to the priority claims."""
    top = Arm(100, None) if 100 in p.priorities else Arm(max(p.priorities), None)
    top_rows = sorted((r for r in rows if r["arm"] == top.label), key=lambda r: r["pressure"])
    max_ratio = max(p.pressure)
    refused = sum(r["fillers_refused"] for r in top_rows)
    free = top_rows[0]["free_tokens"] if top_rows else 0
    admitted = sum(r.get("fillers_admitted_tokens", 0) for r in top_rows) / free if free else 0.0
    unmeasured = [r for r in top_rows if not math.isfinite(r["survival"])]
    lost = [round(r["baseline_reused"] * (1 - r["survival"])) for r in top_rows if math.isfinite(r["survival"])]
    survival_max = top_rows[-1]["survival"] if top_rows else float("nan")
    from_engine = bool(top_rows) and all(r.get("survival_source") == "engine" for r in top_rows)
    losses = {a.label: first_loss(rows, a.label) for a in arms}
    plain = [a for a in arms if a.duration_ms is None]
    firsts = [losses[a.label] for a in plain]
    tied = len(plain) > 1 and len(set(firsts)) == 1
    ordered = len(plain) > 1 and all(x < y for x, y in zip(firsts, firsts[1:]))
    survived = math.isinf(losses[top.label])
    survival_tag = "survival_at_max_pressure" if from_engine else "reported_survival_at_max_pressure"
    metrics = {
        "pinned_survival_max_pressure": max((r["pressure"] for r in top_rows if r["survival"] >= 1.0), default=0.0),
        survival_tag: survival_max,
        "admitted_load": admitted,
        "overflow_errors": refused,
        "silent_evictions": max(lost, default=0),
        "capacity_tokens": free + p.prefix_tokens if top_rows else None,
    }
    rests = (survival_tag,)
    curve = "; ".join(f"{a.label}: " + ("survives all" if math.isinf(losses[a.label]) else f"lost from {losses[a.label]:g}×")
                      for a in arms)
    notes = [f"first-loss pressure per arm (cumulative filler load sent, × free capacity): {curve}",
             f"load the engine admitted over the ramp: {admitted:.2f}× free capacity ({refused} filler(s) refused)"]
    expiry = [a for a in arms if a.duration_ms]
    if expiry:
        e = expiry[0]
        notes.append(f"expiry arm {e.label}: " + (
            "never lost, so expiry is not observable on this engine" if math.isinf(losses[e.label])
            else f"lost from {losses[e.label]:g}× (priority-100 without expiry: "
                 f"{'never' if survived else f'{losses[top.label]:g}×'})"))
    if not top_rows or max_ratio <= 1.0:
        return Outcome("inconclusive", f"The ramp never exceeded free capacity (max {max_ratio:g}×), so pressure "
                       "was not sustained; raise `pressure`.", metrics, rows, notes)
    if unmeasured:
        return Outcome("inconclusive", f"Survival could not be measured at {len(unmeasured)} pressure step(s) (no "
                       "baseline reuse and no read-back), and an unmeasured prefix is not a surviving one.",
                       metrics, rows, notes)
    if no_priority:
        notes.insert(0, f"the cell declares no retention priority: {no_priority}")
        held = "held at every step" if survived else f"lost from {losses[top.label]:g}×"
        return Outcome("not-applicable", f"The engine has no retention priority to pin or order with ({no_priority}); "
                       f"as a reference, the prefix under plain eviction was {held} ({admitted:.2f}× free capacity "
                       "admitted).", metrics, rows, notes, {"risk.retention_bias": "not-applicable"})
    if admitted <= 1.0:
        return Outcome("inconclusive", f"Requested load reached {max_ratio:g}× free capacity, but the engine admitted "
                       f"only {admitted:.2f}× ({refused} filler(s) refused): the prefix was never under pressure "
                       "beyond free capacity, so its survival says nothing about pinning.", metrics, rows, notes)
    if survived:
        how = (f"{refused} filler request(s) beyond capacity were refused with an explicit overflow error"
               if refused else "no filler was refused")
        effect = "" if len(plain) < 2 or not tied else " Every priority survived alike, so this shows no effect of priority."
        summary = (f"Priority-{top.priority} prefix ({p.prefix_tokens} tokens) was fully held at every pressure, "
                   f"with {admitted:.2f}× free capacity of filler admitted; {how}.{effect}")
        return Outcome("confirmed", summary, metrics, rows, notes,
                       {"risk.retention_bias": "inconclusive" if tied or len(plain) < 2 else "refuted"},
                       rests_on=rests)
    if tied:
        summary = (f"Every priority ({', '.join(a.label for a in plain)}) was lost at the same pressure "
                   f"({losses[top.label]:g}× free capacity): no effect of priority; retention neither pins nor orders.")
        return Outcome("refuted", summary, metrics, rows, notes, {"risk.retention_bias": "confirmed"}, rests_on=rests)
    order = ("strictly after every lower priority" if ordered else "with one priority arm only, so no order is shown"
             if len(plain) < 2 else "not in priority order")
    summary = (f"Priority-{top.priority} prefix survived only up to {metrics['pinned_survival_max_pressure']:g}× free "
               f"capacity and was lost from {losses[top.label]:g}× ({survival_max:.0%} held at {max_ratio:g}×), "
               f"{order}: retention " + ("orders eviction, it does not pin." if ordered else "does not pin."))
    return Outcome("refuted", summary, metrics, rows, notes,
                   {"risk.retention_bias": "confirmed" if ordered else "inconclusive" if len(plain) < 2 else "partial"},
                   rests_on=rests)
