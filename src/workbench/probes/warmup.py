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

from . import Decision, Figure, Outcome, Probe, ProbeContext, Support, param, COUNT, TOKENS, SEED
from .common import apply_pressure, block_size, fresh_salt, timed, token_ids


@dataclass(frozen=True)
class Params:
    blocks: tuple[int, ...] = param((2, 4), "k values: prefixes of k·B−1, k·B and k·B+1 tokens", COUNT)
    nominal_block: int = param(32, "block for boundaries when the engine reuses per token", TOKENS)
    suffix_tokens: int = param(8, "new tokens the follow-up appends", TOKENS)
    pressure: tuple[float, ...] = param((0.0, 1.0, 2.0), "filler load between warm-up and follow-up, × free capacity")
    capacity_tokens: int = param(1024, "KV budget of the cell, in tokens", COUNT)
    filler_slots: int = param(4, "filler sequences (slots)", COUNT)
    seed: int = param(0, "seed for the probe's own token ids", SEED)

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
    measures = ("blocks", "nominal_block", "suffix_tokens", "pressure", "capacity_tokens", "filler_slots", "seed")

    def from_evidence(self, evidence, p) -> Outcome:
        given = evidence.get("inputs") or {}
        return absence(evidence["rows"], given["absence"]) if "absence" in given else verdict(evidence["rows"])

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
                out = absence(rows, why)
                out.inputs = {"absence": why}
                return out
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
        return verdict(rows)


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


@dataclass(frozen=True)
class FollowUps:
    """What the warm-up rule reads, summarised from the follow-up rows: each graded row's reuse over what a wholly
    materialized prefix gives (:func:`expected_reuse`), the least of it without pressure, under pressure and over
    all, and where that least was."""

    rows: tuple[dict, ...]  # the graded rows (fraction and expected_reused added), or every row when uncounted
    uncounted: int  # follow-ups the engine returned no reuse count for
    calm: bool = False  # some graded row had no pressure
    min_calm: float = float("nan")
    min_pressed: float = float("nan")
    min_all: float = float("nan")
    worst: dict | None = None
    fraction_tag: str = "reuse_fraction"  # engine_reuse_fraction where every count is the engine's


def summarise(rows: list[dict]) -> FollowUps:
    """Prefixes shorter than one block cannot show anything and are left out."""
    uncounted = sum(1 for r in rows if r["followup_reused"] is None)
    if uncounted:
        return FollowUps(tuple(rows), uncounted)
    for r in rows:
        expected = expected_reuse(r["prefix_tokens"], r.get("block_tokens", 1))
        r["expected_reused"] = expected
        r["fraction"] = min(r["followup_reused"], expected) / expected if expected else None
    graded = [r for r in rows if r["fraction"] is not None]
    if not graded:
        return FollowUps((), 0)
    calm = [r["fraction"] for r in graded if r["pressure"] == 0]
    return FollowUps(tuple(graded), 0, bool(calm), min(calm, default=float("nan")),
                     min((r["fraction"] for r in graded if r["pressure"] > 0), default=float("nan")),
                     min(r["fraction"] for r in graded), min(graded, key=lambda r: r["fraction"]),
                     "engine_reuse_fraction" if all(r.get("from_engine") for r in graded) else "reuse_fraction")


def decide(s: FollowUps) -> Decision:
    """The ladder: every follow-up counted → one prefix at least a block long → whole everywhere → whole without
    pressure only → short even without it."""
    if s.uncounted:
        return Decision("inconclusive", "uncounted")
    if not s.rows:
        return Decision("inconclusive", "sub-block")
    if s.min_all >= 1.0:
        return Decision("refuted", "whole", {"contract.ensure_prefix": "confirmed"},
                        (Support(s.fraction_tag, ">=", 1.0),))
    if s.calm and s.min_calm >= 1.0:
        return Decision("confirmed", "lost", {"contract.ensure_prefix": "partial"}, (Support(s.fraction_tag, "<", 1.0),))
    return Decision("confirmed", "short", {"contract.ensure_prefix": "refuted"}, (Support(s.fraction_tag, "<", 1.0),))


def explain(d: Decision, s: FollowUps) -> str:
    """The verdict's summary in words."""
    if d.case == "uncounted":
        return (f"The engine returned no reuse count on {s.uncounted} of {len(s.rows)} follow-ups, so what the warm-up "
                "left behind cannot be read (missing, not 0).")
    if d.case == "sub-block":
        return "Every prefix was shorter than one KV block, so no reuse could be expected."
    if d.case == "whole":
        return (f"The warm-up materialized and retained the whole prefix at every length "
                f"({', '.join(sorted({r['boundary'] for r in s.rows}))}) and pressure up to "
                f"{max(r['pressure'] for r in s.rows):g}× free capacity: the risk did not occur.")
    if d.case == "lost":
        return (f"Without pressure the warm-up materialized the whole prefix, but under pressure the follow-up reused "
                f"as little as {s.min_pressed:.0%}: the prefix is not retained.")
    return (f"Even without pressure the follow-up reused only {s.min_calm:.0%} of some prefixes (worst at "
            f"{s.worst['boundary']}): the warm-up does not materialize the whole prefix.")


def verdict(rows: list[dict]) -> Outcome:
    """Each row's fraction is the reuse over what a wholly materialized prefix would give (:func:`expected_reuse`)."""
    s = summarise(rows)
    d = decide(s)
    if s.worst is None:  # nothing graded: no metrics, no notes
        return Outcome(d.verdict, explain(d, s), rows=list(s.rows))
    w = s.worst
    metrics = {s.fraction_tag: s.min_all, "overflow_errors": sum(r["fillers_refused"] for r in s.rows)}
    notes = [f"worst case: {w['prefix_tokens']} tokens ({w['boundary']}) at {w['pressure']:g}× pressure "
             f"reused {w['followup_reused']}"]
    return Outcome(d.verdict, explain(d, s), metrics, list(s.rows), notes, dict(d.claim_verdicts), rests_on=d.rests_on,
                   claim_reasons=_row_reason(d, s))


def _row_reason(d: Decision, s: FollowUps) -> dict[str, str]:
    """The EnsurePrefix row's own reason: the mechanism the risk row is about, read the other way round."""
    said = {"whole": "The warm-up left the whole prefix reusable at every length and pressure: EnsurePrefix holds.",
            "lost": (f"The warm-up materializes the whole prefix, but it is not retained under pressure (a follow-up "
                     f"reused as little as {s.min_pressed:.0%}): EnsurePrefix holds only without pressure."),
            "short": (f"Even without pressure a follow-up reused only {s.min_calm:.0%} of some prefixes (worst at "
                      f"{s.worst['boundary'] if s.worst else '—'}): the warm-up does not materialize the prefix.")}
    return {"contract.ensure_prefix": said[d.case]} if d.case in said else {}
