"""prefix.warmup_materialization — does an EnsurePrefix warm-up materialize the whole prefix?

For prefix lengths at block boundaries (k·B−1, k·B, k·B+1) and rising filler pressure between the
warm-up and the follow-up, measure the fraction of the prefix a follow-up request (prefix + a new
suffix) reuses. Each (length, pressure) pair runs under a fresh salt on a fresh cell.

An engine without ``max_tokens=1`` warm-up semantics (``Description.absent["partial_warmup"]``,
e.g. llama.cpp, whose decode evaluates every token before it returns) cannot show the risk: the
probe then reads back from the engine that each warmed prefix is wholly resident the moment the
warm-up returns, and answers ``not-applicable`` with that evidence (``confirmed`` if it is not).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import Figure, Outcome, Probe, ProbeContext, Support, param, COUNT, TOKENS
from .common import apply_pressure, block_size, fresh_salt, timed, token_ids


@dataclass(frozen=True)
class Params:
    blocks: tuple[int, ...] = param((2, 4), "k values: prefixes of k·B−1, k·B and k·B+1 tokens", COUNT)
    nominal_block: int = param(32, "block for boundaries when the engine reuses per token", TOKENS)
    suffix_tokens: int = param(8, "new tokens the follow-up appends", TOKENS)
    pressure: tuple[float, ...] = param((0.0, 1.0, 2.0), "filler load between warm-up and follow-up, × free capacity")
    capacity_tokens: int = param(1024, "KV budget of the cell, in tokens", COUNT)
    filler_slots: int = param(4, "filler sequences (slots)", COUNT)
    seed: int = param(0, "seed for the probe's own token ids")

    def __post_init__(self) -> None:
        if not self.blocks:
            raise ValueError("blocks needs at least one k")
        if not self.pressure:
            raise ValueError("pressure needs at least one ratio (0 for no pressure)")
        if any(r < 0 for r in self.pressure):
            raise ValueError("pressure ratios must be ≥ 0")


class WarmupMaterialization(Probe):
    version = "4"
    claims = ("risk.warmup", "contract.ensure_prefix")
    _short = ((Support("engine_resident_tokens", "<", None),), (Support("engine_reuse_fraction", "<", 1.0),))
    _whole = ((Support("engine_reuse_fraction", ">=", 1.0),),)
    rests = {("*", "confirmed"): _short, ("*", "refuted"): _whole, ("contract.ensure_prefix", "refuted"): _short,
             ("contract.ensure_prefix", "confirmed"): _whole,
             ("contract.ensure_prefix", "partial"): ((Support("engine_reuse_fraction", "<", 1.0),),)}
    figures = (Figure("warmup", "warmup"),
               Figure("timeline", "timeline", {"spans": (("t_warmup_s", "warm-up"), ("t_followup_s", "follow-up")),
                                               "lane": "boundary", "title": "Warm-up and follow-up requests"}))
    Params = Params

    def run(self, ctx: ProbeContext, p: Params) -> Outcome:
        rows = []
        rng = np.random.default_rng(p.seed)
        with ctx.open(kv_budget_tokens=p.capacity_tokens) as cell:
            d = cell.describe()
            why = d.absent.get("partial_warmup")
            if why and "kv_readback" in d.observers:
                B = block_size(d, p.nominal_block)
                for n in sorted({n for k in p.blocks for n in (k * B - 1, k * B, k * B + 1) if n >= 2}):
                    if n > d.kv_capacity_tokens:
                        raise ValueError(f"prefix of {n} tokens does not fit capacity {d.kv_capacity_tokens}")
                    warm = cell.ensure_prefix(token_ids(rng, n, d), salt=fresh_salt("warmup"))
                    rows.append({"prefix_tokens": n, "boundary": _boundary(n, B), "warmup_computed": warm.computed_tokens,
                                 "engine_resident": cell.resident_tokens()})
                return absence(rows, why)
        for ratio in sorted(set(p.pressure)):
            with ctx.open(slots=1 + p.filler_slots, kv_budget_tokens=p.capacity_tokens) as cell:
                d = cell.describe()
                B = block_size(d, p.nominal_block)
                lengths = sorted({n for k in p.blocks for n in (k * B - 1, k * B, k * B + 1) if n >= 2})
                if max(lengths) + p.suffix_tokens > d.kv_capacity_tokens:
                    raise ValueError(f"longest prefix {max(lengths)} does not fit capacity {d.kv_capacity_tokens}")
                for n in lengths:
                    prefix = token_ids(rng, n, d)
                    salt = fresh_salt("warmup")
                    t_warm, warm = timed(cell.ensure_prefix, prefix, salt=salt)
                    free = d.kv_capacity_tokens - n - p.suffix_tokens  # room the follow-up itself needs
                    pr = apply_pressure(cell, int(ratio * free), max(1, free // 4),
                                        list(range(1, 1 + p.filler_slots)), rng, d)
                    t_follow, follow = timed(cell.ensure_prefix, prefix + token_ids(rng, p.suffix_tokens, d), salt=salt)
                    rows.append({
                        "prefix_tokens": n, "boundary": _boundary(n, B), "pressure": ratio,
                        "warmup_computed": warm.computed_tokens, "fillers_sent": pr.submitted,
                        "fillers_refused": pr.refused,
                        "followup_reused": None if follow.source == "none" else follow.reused_tokens,
                        "block_tokens": d.block_tokens, "exact": follow.exact,
                        "from_engine": follow.engine_reused_tokens is not None,
                        "t_warmup_s": t_warm, "t_followup_s": t_follow,
                    })
        return _verdict(rows)


def _boundary(n: int, B: int) -> str:
    k, r = divmod(n, B)
    return f"{k}·B" if r == 0 else (f"{k + 1}·B−1" if r == B - 1 else f"{k}·B+{r}")


def absence(rows: list[dict], why: str) -> Outcome:
    """Verdict for an engine without max_tokens=1 warm-up semantics, from the engine's read-back KV."""
    notes = [f"the cell declares no max_tokens=1 warm-up: {why}"]
    short = [r for r in rows if r["engine_resident"] < r["prefix_tokens"]]
    metrics = {"engine_resident_tokens": min((r["engine_resident"] for r in rows), default=0),
               "engine_reuse_fraction": min((r["engine_resident"] / r["prefix_tokens"] for r in rows), default=0.0)}
    if not rows:
        return Outcome("inconclusive", "No prefix was warmed, so nothing was read back.", metrics, rows, notes)
    if short:
        r = short[0]
        return Outcome("confirmed", f"Right after the warm-up returned, the engine held only {r['engine_resident']} of "
                       f"{r['prefix_tokens']} prefix tokens ({r['boundary']}): the warm-up does not materialize the "
                       "whole prefix.", metrics, rows, notes, {"contract.ensure_prefix": "refuted"},
                       rests_on=(Support("engine_resident_tokens", "<", r["prefix_tokens"]),))
    return Outcome("not-applicable", f"This engine has no max_tokens=1 warm-up to fall short: the moment each warm-up "
                   f"returned, the engine held every prefix token ({', '.join(r['boundary'] for r in rows)}; read back "
                   "from the engine), so the risk cannot occur here.", metrics, rows, notes,
                   {"contract.ensure_prefix": "not-applicable"})


def expected_reuse(n: int, block_tokens: int) -> int:
    """What a follow-up can reuse of an n-token prefix that was wholly materialized: the whole blocks of it
    (floor(n/B)·B with the engine's block size; n where reuse is per token). Block rounding is no loss."""
    return n // block_tokens * block_tokens


def _verdict(rows: list[dict]) -> Outcome:
    """Each row's fraction is the reuse over what a wholly materialized prefix would give (:func:`expected_reuse`);
    prefixes shorter than one block cannot show anything and are left out."""
    uncounted = [r for r in rows if r["followup_reused"] is None]
    if uncounted:
        return Outcome("inconclusive", f"The engine returned no reuse count on {len(uncounted)} of {len(rows)} "
                       "follow-ups, so what the warm-up left behind cannot be read (missing, not 0).", rows=rows)
    for r in rows:
        expected = expected_reuse(r["prefix_tokens"], r.get("block_tokens", 1))
        r["expected_reused"] = expected
        r["fraction"] = min(r["followup_reused"], expected) / expected if expected else None
    rows = [r for r in rows if r["fraction"] is not None]
    if not rows:
        return Outcome("inconclusive", "Every prefix was shorter than one KV block, so no reuse could be expected.")
    calm = [r for r in rows if r["pressure"] == 0]
    pressed = [r for r in rows if r["pressure"] > 0]
    min_calm = min((r["fraction"] for r in calm), default=float("nan"))
    min_all = min(r["fraction"] for r in rows)
    worst = min(rows, key=lambda r: r["fraction"])
    fraction = "engine_reuse_fraction" if all(r.get("from_engine") for r in rows) else "reuse_fraction"
    metrics = {fraction: min_all, "overflow_errors": sum(r["fillers_refused"] for r in rows)}
    notes = [f"worst case: {worst['prefix_tokens']} tokens ({worst['boundary']}) at {worst['pressure']:g}× pressure "
             f"reused {worst['followup_reused']}"]
    if min_all >= 1.0:
        return Outcome("refuted", f"The warm-up materialized and retained the whole prefix at every length "
                       f"({', '.join(sorted({r['boundary'] for r in rows}))}) and pressure up to "
                       f"{max(r['pressure'] for r in rows):g}× free capacity: the risk did not occur.",
                       metrics, rows, notes, {"contract.ensure_prefix": "confirmed"},
                       rests_on=(Support(fraction, ">=", 1.0),))
    if calm and min_calm >= 1.0:
        return Outcome("confirmed", f"Without pressure the warm-up materialized the whole prefix, but under pressure "
                       f"the follow-up reused as little as {min(r['fraction'] for r in pressed):.0%}: the prefix is "
                       "not retained.", metrics, rows, notes, {"contract.ensure_prefix": "partial"},
                       rests_on=(Support(fraction, "<", 1.0),))
    return Outcome("confirmed", f"Even without pressure the follow-up reused only {min_calm:.0%} of some prefixes "
                   f"(worst at {worst['boundary']}): the warm-up does not materialize the whole prefix.",
                   metrics, rows, notes, {"contract.ensure_prefix": "refuted"}, rests_on=(Support(fraction, "<", 1.0),))
