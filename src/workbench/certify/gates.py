"""The step-function gates G1–G3 as rules, each a pure function of measured rows (G4 is the loop's gate,
:mod:`workbench.loop.gate`).

The source (contenox/runtime ``2bfdc1f5``,
``docs/development/blueprints/modeld/effective-context/specialization-cells-blueprint.md``, "Step-Function Gates"):
"Keep a candidate cell only if it delivers at least one: context tier that otherwise cannot run; at least 2x usable
context at the same latency budget; at least 3x prefill/first-output improvement at 32k+ context; materially better
end-to-end agent turn time at the same quality." Each gate here is its own claim (``gate.context_tier``,
``gate.usable_context``, ``gate.prefill_32k``) and its own rule, summarise → decide → explain:

- **G1** (:func:`decide_tier`): under one memory budget (the capacity policy: every arm's KV pool is the same bytes),
  the largest tier of the ladder each arm served, a real request of that many tokens that decoded. Confirmed when the
  candidate served a tier the best llama.cpp profile did not, each llama.cpp profile's limit read from its engine
  (:func:`refusal`: a request or an open the engine refused; the pool an engine sized from the budget itself; or the
  KV buffer the engine states it allocates for the next tier, above the budget); a capacity the workbench computed
  (the budget over the engine's bytes per token) is labelled so and never a refusal. Refuted when the candidate's
  own limit was read so and the baseline serves every tier it does; inconclusive where both served the ladder's top
  (no limit found).
- **G2** (:func:`decide_usable`): at a stated latency budget (first output and turn time, each as the p95 over the
  runs), the largest tier within it. Usable context is known to a bracket of the ladder (the largest tier within
  the budget, below the smallest beyond it), so the ratio's interval is ``[candidate's low / baseline's high,
  candidate's high / baseline's low]``: confirmed when its lower bound reaches 2, refuted when its upper bound is at
  most 2.
- **G3** (:func:`decide_prefill`): prefill and first-output time at each tier of 32k or more, cold. The ratio is the
  baseline's time over the candidate's, paired by run (the arms take each run one after another, so a pair shares
  the machine's state): the median of the per-run ratios, its interval the percentile bootstrap over the runs
  (:mod:`workbench.loop.stats`; over 3 runs it spans the runs' own ratios): confirmed when the lower bound reaches 3
  at some tier, refuted when the upper bound is below 3 at every tier measured.

Every rule refuses a verdict where the same-model rule fails (:func:`.integrity.comparable`: "not comparable" with the
difference named), where fewer runs than its ``min_runs`` back a figure, where the baseline is not the strongest the
product could run (G2: llama.cpp's own speculation on a workload that copies, ``scripts/bench-served-spec-copy``), or
where the quality smoke of the candidate's or the chosen baseline's cell did not pass (benchmark integrity: "throughput
claims require quality-smoke status"; :func:`smoke_problem`: G1 reads each serve cell's own A2, G2 and G3 the timed
cells'). G2's turn counts only where the arm delivered the whole output cap (a reply cut short by its end-of-sequence
token is a shorter turn, not the claim's). A
rule that moves a claim's number, either way, is exploratory (:func:`workbench.loop.gate.departures`): measured and
reported, never the claim's verdict. Whether a verdict settles the claim is :mod:`workbench.settle`'s: only the
subject (TensorRT-LLM) on target hardware; a run between llama.cpp and vLLM on a CPU is a reference beside it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

from ..loop.gate import departures
from .integrity import Percentiles

G1, G2, G3 = "gate.context_tier", "gate.usable_context", "gate.prefill_32k"
CANDIDATE, BASELINE = "candidate", "baseline"
TIER_MIN_32K = 32768  # "at 32k+ context": 32 Ki tokens, the ladder's 32k tier
COPY_HEAVY = 0.5  # share of the baseline's output 4-grams found in its prompt at or above which the workload copies


@dataclass(frozen=True)
class GateVerdict:
    """What a gate's rule says: the verdict, its reason in words, and the measured ratio with its interval (None
    where there is none), carried whatever the verdict."""

    verdict: str  # confirmed | refuted | inconclusive | not-run
    summary: str
    ratio: Mapping[str, float] | None = None  # {"value", "low", "high"}
    figures: Mapping[str, Any] = field(default_factory=dict)  # what the rule read, for the finding's metrics


def _ratio_text(r: Mapping[str, float] | None) -> str:
    if not r:
        return "no ratio"

    def show(x: float) -> str:
        return "∞" if math.isinf(x) else f"{x:.3g}"

    if math.isnan(r["low"]) or math.isnan(r["high"]):
        return f"{show(r['value'])}× (no interval)"
    return f"{show(r['value'])}× [{show(r['low'])}, {show(r['high'])}]"


def _runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"


class _Rule:
    """A gate's rule: its fields, the claim's values, and where a rule moves from them (exploratory)."""

    CLAIM_VALUES: Mapping[str, Any] = {}

    @property
    def exploratory(self) -> str | None:
        return departures(self, self.CLAIM_VALUES)

    def as_dict(self) -> dict:
        return asdict(self) | {"exploratory": self.exploratory}


def _sides(rows: Sequence[Mapping[str, Any]]) -> tuple[list, list]:
    return ([r for r in rows if r.get("role") == CANDIDATE], [r for r in rows if r.get("role") == BASELINE])


def _arms(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    return list(dict.fromkeys(r["arm"] for r in rows))


def smoke_status(rows: Sequence[Mapping[str, Any]], arm: str, kind: str) -> str:
    """The quality smoke of ``arm``'s cell behind its ``kind`` rows: ``serve`` (G1's cells under the budget) reads
    the serve row's own A2 (``quality``), ``timed`` (G2, G3) the arm's A2 rows (``kind == "a2"``, run on its timed
    cell); passed only where every one passed, failed where one failed, else not-run."""
    if kind == "serve":
        got = [r.get("quality") for r in rows if r.get("kind") == "serve" and r.get("arm") == arm]
    else:
        got = [r.get("status") for r in rows if r.get("kind") == "a2" and r.get("arm") == arm]
    got = [g for g in got if g]
    if "failed" in got:
        return "failed"
    return "passed" if got and all(g == "passed" for g in got) else "not-run"


def smoke_problem(rows: Sequence[Mapping[str, Any]], arms: Sequence[str], kind: str) -> str | None:
    """Why a verdict resting on ``arms``' cells makes no throughput claim (a quality smoke not passed), or None."""
    bad = [f"{a}: {s}" for a in dict.fromkeys(arms) if (s := smoke_status(rows, a, kind)) != "passed"]
    return (f"the quality smoke did not pass on the cell behind it ({', '.join(bad)}): no throughput claim stands"
            if bad else None)


def _held(out: GateVerdict, problem: str | None) -> GateVerdict:
    """``out``, or inconclusive where a verdict would rest on something that cannot carry it (``problem``)."""
    if problem is None or out.verdict not in ("confirmed", "refuted"):
        return out
    return GateVerdict("inconclusive", f"{out.summary}; but {problem}, so not a verdict (would be {out.verdict})",
                       out.ratio, out.figures)


# --------------------------------------------------------------------------- G1: context tier


BUDGET_RULE = "half the ladder's top tier at 16-bit KV of the model"
"""The claim's memory budget (the capacity policy): one that binds, so each engine's KV bytes per token decide the
tier it holds; a budget given by hand builds the outcome (exploratory)."""


@dataclass(frozen=True)
class TierRule(_Rule):
    """G1 has no number: any tier the baseline cannot run. ``budget_bytes`` is the one memory budget every arm's KV
    pool gets (the capacity policy), recorded with the rule and the rule that sized it (``budget_rule``)."""

    budget_bytes: int = 0
    budget_rule: str = BUDGET_RULE
    CLAIM_VALUES = {"budget_rule": BUDGET_RULE}


def _served_top(rows: Sequence[Mapping[str, Any]], arm: str) -> int:
    """The largest tier ``arm`` served (0: none), its serve rows' own."""
    return max((int(r["tier"]) for r in rows if r["arm"] == arm and r.get("served") is True), default=0)


def refusal(rows: Sequence[Mapping[str, Any]], arm: str, tier: int) -> str | None:
    """How ``arm``'s engine said it cannot hold ``tier`` tokens under the budget, or None where it did not: a request
    (or an open) of a tier no larger that the engine refused; the KV pool an engine sized from the budget itself
    (``capacity_from == "engine"``: vLLM's ``num_gpu_blocks``) below it; or the KV buffer the engine states it
    allocates for a context of a tier no larger (``next_tier_kv_bytes``: llama.cpp's "KV buffer size"), above the
    budget. A capacity the workbench computed (the budget over the engine's bytes per token) is none of these."""
    for r in (r for r in rows if r["arm"] == arm):
        if int(r["tier"]) <= tier and r.get("served") is False and r.get("refused_by") == "engine":
            return f"its engine refused {r['tier']} tokens ({r.get('error') or 'no reason given'})"
        cap = r.get("engine_capacity_tokens")
        if r.get("capacity_from") == "engine" and cap is not None and int(cap) < tier:
            return f"its engine sized its pool from the budget to {cap} tokens"
        need, at = r.get("next_tier_kv_bytes"), r.get("next_tier")
        if need is not None and at is not None and int(at) <= tier and int(need) > int(r.get("budget_bytes") or 0):
            return (f"its engine states a KV buffer of {int(need) / 2**20:.4g} MiB for {at} tokens, over the budget "
                    f"({r.get('next_tier_kv_bytes_from') or 'its own statement'})")
    return None


def decide_tier(rule: TierRule, rows: Sequence[Mapping[str, Any]], ladder: Sequence[int],
                not_comparable: str | None = None) -> GateVerdict:
    """G1 from the serve rows (``kind == "serve"``): see the module's words."""
    rows = [r for r in rows if r.get("kind") == "serve"]
    cand, base = _sides(rows)
    if not cand:
        return GateVerdict("not-run", "the candidate served no request under the budget")
    if not base:
        return GateVerdict("inconclusive", "no llama.cpp baseline ran, so there is nothing to run beyond")
    if not_comparable:
        return GateVerdict("inconclusive", f"not comparable: {not_comparable}")
    top = max(ladder)
    c_arm = _arms(cand)[0]
    c_top = _served_top(cand, c_arm)
    tops = {a: _served_top(base, a) for a in _arms(base)}
    best = max(tops, key=lambda a: tops[a])
    b_top = tops[best]
    figures = {"candidate_tier_tokens": c_top, "baseline_tier_tokens": b_top}
    skipped = {r["arm"]: int(r["tier"]) for r in base if r.get("served") is None and r.get("skipped")}
    shown = ", ".join(f"{a}: {t}" if t or a not in skipped else f"{a}: {skipped[a]} fits, not served" for a, t in tops.items())
    said = (f"under {rule.budget_bytes / 2**20:.4g} MiB of KV the candidate served "
            f"{f'up to {c_top} tokens' if c_top else 'no tier'}, the best llama.cpp ({best}) "
            f"{f'up to {b_top}' if b_top else 'no tier'} ({shown})")
    if c_top == 0 and b_top == 0:
        return GateVerdict("inconclusive", f"{said}: neither served the ladder's smallest tier ({min(ladder)})",
                           figures=figures)
    if c_top > b_top:
        beyond = min(t for t in ladder if b_top < t <= c_top)
        why = {a: refusal(base, a, beyond) for a in tops}
        unread = [a for a, w in why.items() if w is None]
        if unread:
            return GateVerdict("inconclusive", f"{said}, but no refusal of {beyond} tokens was read from "
                               f"{', '.join(unread)}'s engine (a capacity computed from its bytes per token is no "
                               "refusal)", figures=figures)
        out = GateVerdict("confirmed", f"{said}: the candidate runs {c_top} tokens, a tier no llama.cpp profile "
                          f"could hold in the same memory ({'; '.join(f'{a}: {w}' for a, w in why.items())})",
                          figures=figures)
        return _held(out, smoke_problem(rows, [c_arm], "serve"))
    if c_top == top:
        return GateVerdict("inconclusive", f"{said}: both served the ladder's top tier ({top}), so no limit was "
                           "found; raise the ladder or lower the budget", figures=figures)
    above = min(t for t in ladder if t > c_top)
    why_not = refusal(cand, c_arm, above)
    if why_not is None:
        return GateVerdict("inconclusive", f"{said}, but the candidate's engine did not say it cannot hold {above} "
                           "tokens (no refusal, no capacity or KV buffer it stated): its limit is not found",
                           figures=figures)
    out = GateVerdict("refuted", f"{said}: the candidate cannot hold {above} tokens in that memory ({why_not}), and "
                      "it serves no tier the baseline cannot", figures=figures)
    return _held(out, smoke_problem(rows, [c_arm, best], "serve"))


# --------------------------------------------------------------------------- G2: usable context


CLAIM_USABLE_RATIO = 2.0  # "at least 2x usable context at the same latency budget": the source's number
CLAIM_FIRST_OUTPUT_S = 2.0  # the workbench's stated first-output budget (the source states none)
CLAIM_TURN_S = 10.0  # … and its turn-time budget (first output plus the output cap's decode)
CLAIM_MIN_RUNS = 3  # runs of the whole ladder below which a p95 or a range is no basis for a verdict


@dataclass(frozen=True)
class UsableRule(_Rule):
    """G2's rule: the ratio, the stated latency budget (each read as the p95 over the runs) and the runs it needs."""

    min_ratio: float = CLAIM_USABLE_RATIO
    first_output_s: float = CLAIM_FIRST_OUTPUT_S
    turn_s: float = CLAIM_TURN_S
    min_runs: int = CLAIM_MIN_RUNS
    CLAIM_VALUES = {"min_ratio": CLAIM_USABLE_RATIO, "first_output_s": CLAIM_FIRST_OUTPUT_S, "turn_s": CLAIM_TURN_S,
                    "min_runs": CLAIM_MIN_RUNS}

    def describe(self) -> str:
        return (f"at least {self.min_ratio:g}× usable context, usable meaning p95 first output ≤ "
                f"{self.first_output_s:g} s and p95 turn ≤ {self.turn_s:g} s over at least {self.min_runs} runs "
                "(the budget is the workbench's own: the source states none)")


def _p95(rows: Sequence[Mapping[str, Any]], column: str) -> Percentiles | None:
    return Percentiles.of(r.get(column) for r in rows)


def usable_bracket(rows: Sequence[Mapping[str, Any]], arm: str, rule: UsableRule) -> tuple[int, float, list[str]]:
    """``arm``'s usable context as a bracket of its timed tiers (``kind == "timed"``): the largest tier within the
    budget with every smaller one within it too (0: none), the smallest tier beyond it (inf: none measured beyond),
    and why a tier could not be read (too few runs; a turn that did not deliver its output cap, so is not the
    budget's turn: a shorter reply is a shorter turn)."""
    timed = [r for r in rows if r["arm"] == arm and r.get("kind") == "timed"]
    low, high, short = 0, math.inf, []
    for tier in sorted({int(r["tier"]) for r in timed}):
        mine = [r for r in timed if int(r["tier"]) == tier]
        ok = [r for r in mine if r.get("served") is True]
        if len(ok) < len(mine):  # a run the engine could not serve at this tier: beyond it, whatever the time
            high = tier
            break
        first = _p95(ok, "first_output_s")
        if first is None or first.runs < rule.min_runs:
            short.append(f"{arm} at {tier}: {_runs(first.runs if first else 0)}")
            high = tier
            break
        if first.p95 > rule.first_output_s:  # beyond on its first output, whatever its replies' length
            high = tier
            break
        cut = [r for r in ok if not r.get("output_cap") or r.get("decode_tokens") != r.get("output_cap")]
        if cut:
            short.append(f"{arm} at {tier}: {len(cut)} of {_runs(len(ok))} delivered fewer tokens than the output "
                         f"cap ({', '.join(str(r.get('decode_tokens')) for r in cut)} of {cut[0].get('output_cap')})")
            high = tier
            break
        turn = _p95(ok, "turn_s")
        if turn is not None and turn.p95 <= rule.turn_s:
            low = tier
        else:
            high = tier
            break
    return low, high, short


def decide_usable(rule: UsableRule, rows: Sequence[Mapping[str, Any]], not_comparable: str | None = None,
                  copies: float | None = None) -> GateVerdict:
    """G2 from the timed rows: see the module's words. ``copies``: the share of the baseline's output 4-grams in
    its prompt (None: not measured); where the workload copies, the baseline must include llama.cpp's own
    speculation (an arm with ``speculation == "engine"``)."""
    timed = [r for r in rows if r.get("kind") == "timed"]
    cand, base = _sides(timed)
    if not cand:
        return GateVerdict("not-run", "the candidate ran no timed request")
    if not base:
        return GateVerdict("inconclusive", "no llama.cpp baseline ran")
    if not_comparable:
        return GateVerdict("inconclusive", f"not comparable: {not_comparable}")
    c_arm = _arms(cand)[0]
    c_low, c_high, c_short = usable_bracket(cand, c_arm, rule)
    brackets = {a: usable_bracket(base, a, rule) for a in _arms(base)}
    best = max(brackets, key=lambda a: (brackets[a][0], brackets[a][1]))
    b_low, b_high, b_short = brackets[best]
    low = c_low / b_high if b_high else math.inf
    high = c_high / b_low if b_low else math.inf
    value = c_low / b_low if b_low else math.inf
    ratio = {"value": value, "low": low, "high": high}
    figures = {"candidate_usable_tokens": c_low, "baseline_usable_tokens": b_low}

    def bracket(lo: int, hi: float) -> str:
        return f"[{lo}, {'∞' if math.isinf(hi) else int(hi)})"

    said = (f"usable context (p95 first output ≤ {rule.first_output_s:g} s, p95 turn ≤ {rule.turn_s:g} s): candidate "
            f"{bracket(c_low, c_high)}, best llama.cpp ({best}) {bracket(b_low, b_high)} tokens; ratio {_ratio_text(ratio)}")
    if c_short or b_short:
        return GateVerdict("inconclusive", f"{said}; a tier not read ({'; '.join(c_short + b_short)}; the rule needs "
                           f"{rule.min_runs} runs of whole turns)", ratio, figures)
    specs = [a for a in _arms(base) if any(r.get("speculation") == "engine" for r in base if r["arm"] == a)]
    if copies is not None and copies >= COPY_HEAVY and not specs:
        return GateVerdict("inconclusive", f"{said}; but the workload copies ({copies:.0%} of the baseline's output "
                           "4-grams are in its prompt) and no llama.cpp arm ran its own speculation, so the baseline is "
                           "not the strongest the product could run", ratio, figures)
    problem = smoke_problem(rows, [c_arm, best], "timed")
    if low >= rule.min_ratio:
        return _held(GateVerdict("confirmed", f"{said}: at least {rule.min_ratio:g}×", ratio, figures), problem)
    if high <= rule.min_ratio:
        return _held(GateVerdict("refuted", f"{said}: at most {rule.min_ratio:g}×", ratio, figures), problem)
    return GateVerdict("inconclusive", f"{said}: the interval straddles {rule.min_ratio:g}× (the ladder's steps "
                       "are too coarse, or the budget lies beyond its top)", ratio, figures)


# --------------------------------------------------------------------------- G3: long-context prefill


CLAIM_PREFILL_RATIO = 3.0  # "at least 3x prefill/first-output improvement at 32k+ context": the source's number
PREFILL_METRICS = ("prefill_s", "first_output_s")


@dataclass(frozen=True)
class PrefillRule(_Rule):
    """G3's rule: the ratio on the lower bound of its interval, at tiers from ``min_tier``, over ``min_runs`` paired
    runs."""

    min_ratio: float = CLAIM_PREFILL_RATIO
    min_tier: int = TIER_MIN_32K
    min_runs: int = CLAIM_MIN_RUNS
    CLAIM_VALUES = {"min_ratio": CLAIM_PREFILL_RATIO, "min_tier": TIER_MIN_32K, "min_runs": CLAIM_MIN_RUNS}

    def describe(self) -> str:
        return (f"at least {self.min_ratio:g}× prefill or first-output improvement at {self.min_tier}+ tokens on the "
                f"lower bound of its interval (the median of per-run ratios, its bootstrap interval over at least "
                f"{self.min_runs} paired runs)")


def speedup(base: Sequence[Mapping[str, Any]], cand: Sequence[Mapping[str, Any]], metric: str) -> dict | None:
    """The baseline's time over the candidate's, paired by run (the arms ran each run one after another, so a pair
    shared the machine's state): the median of the per-run ratios and its percentile bootstrap interval over the runs
    (:func:`workbench.loop.stats.bootstrap`; over 3 runs it spans the runs' own ratios). None without a pair."""
    from ..loop import stats

    b = {int(r["run"]): r[metric] for r in base if r.get(metric) is not None and r[metric] > 0}
    c = {int(r["run"]): r[metric] for r in cand if r.get(metric) is not None and r[metric] > 0}
    runs = sorted(set(b) & set(c))
    if not runs:
        return None
    est = stats.bootstrap([[b[i] for i in runs], [c[i] for i in runs]], stats.median_ratio)
    return {"value": est.value, "low": est.low, "high": est.high, "runs": est.n}


def prefill_ratios(rows: Sequence[Mapping[str, Any]], rule: PrefillRule) -> list[dict]:
    """Per (tier from ``min_tier``, metric) both sides served every run of: the candidate against the baseline arm
    fastest there (least median), the speed-up (:func:`speedup`)."""
    timed = [r for r in rows if r.get("kind") == "timed" and int(r["tier"]) >= rule.min_tier]
    cand, base = _sides(timed)
    out = []
    for tier in sorted({int(r["tier"]) for r in cand} & {int(r["tier"]) for r in base}):
        c = [r for r in cand if int(r["tier"]) == tier]
        if not all(r.get("served") is True for r in c):
            continue
        for metric in PREFILL_METRICS:
            arms = {a: [r for r in base if r["arm"] == a and int(r["tier"]) == tier] for a in _arms(base)}
            arms = {a: v for a, v in arms.items() if v and all(r.get(metric) is not None for r in v)}
            if not arms:
                continue
            best = min(arms, key=lambda a: statistics.median(r[metric] for r in arms[a]))
            s = speedup(arms[best], c, metric)
            if s:
                out.append({"tier": tier, "metric": metric, "baseline": best, **s})
    return out


def decide_prefill(rule: PrefillRule, rows: Sequence[Mapping[str, Any]], not_comparable: str | None = None) -> GateVerdict:
    """G3 from the timed rows: see the module's words."""
    timed = [r for r in rows if r.get("kind") == "timed"]
    cand, base = _sides(timed)
    if not cand:
        return GateVerdict("not-run", "the candidate ran no timed request")
    if not base:
        return GateVerdict("inconclusive", "no llama.cpp baseline ran")
    if not_comparable:
        return GateVerdict("inconclusive", f"not comparable: {not_comparable}")
    ratios = prefill_ratios(timed, rule)
    if not ratios:
        return GateVerdict("inconclusive", f"no tier of {rule.min_tier} tokens or more was served by both sides")
    best = max(ratios, key=lambda r: (r["low"], r["value"]))
    ratio = {k: best[k] for k in ("value", "low", "high")}
    figures = {"prefill_tier_tokens": best["tier"]}
    said = "; ".join(f"{r['metric'].removesuffix('_s').replace('_', ' ')} at {r['tier']}: {_ratio_text(r)} over "
                     f"{r['baseline']} ({_runs(r['runs'])})" for r in ratios)
    few = [r for r in ratios if r["runs"] < rule.min_runs]
    if few:
        return GateVerdict("inconclusive", f"{said}; fewer runs than the rule's {rule.min_runs}", ratio, figures)
    c_arm = _arms(cand)[0]
    if best["low"] >= rule.min_ratio:
        return _held(GateVerdict("confirmed", f"{said}: at least {rule.min_ratio:g}× on the lower bound", ratio,
                                 figures), smoke_problem(rows, [c_arm, best["baseline"]], "timed"))
    if all(r["high"] < rule.min_ratio for r in ratios):
        return _held(GateVerdict("refuted", f"{said}: below {rule.min_ratio:g}× at every tier", ratio, figures),
                     smoke_problem(rows, [c_arm, *(r["baseline"] for r in ratios)], "timed"))
    return GateVerdict("inconclusive", f"{said}: the interval straddles {rule.min_ratio:g}×", ratio, figures)


__all__ = ["BASELINE", "BUDGET_RULE", "CANDIDATE", "CLAIM_FIRST_OUTPUT_S", "CLAIM_MIN_RUNS", "CLAIM_PREFILL_RATIO", "CLAIM_TURN_S",
           "CLAIM_USABLE_RATIO", "COPY_HEAVY", "G1", "G2", "G3", "GateVerdict", "PrefillRule", "TIER_MIN_32K",
           "TierRule", "UsableRule", "decide_prefill", "decide_tier", "decide_usable", "prefill_ratios", "refusal",
           "smoke_problem", "smoke_status", "speedup", "usable_bracket"]
