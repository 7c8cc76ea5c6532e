"""The step-function gate G4 as a rule: ``gate.turn_time``, "materially better end-to-end agent turn time at the
same quality" (contenox/runtime ``2bfdc1f5``,
``docs/development/blueprints/modeld/effective-context/specialization-cells-blueprint.md``, "Step-Function Gates").

The source gives this gate no number. **The workbench's own reading of "materially"** (never the blueprint's): the
subject arm's end-to-end loop time beats the best llama.cpp arm (its own speculation included) by at least
:data:`CLAIM_MIN_SPEEDUP` on the lower bound of the bootstrap CI, over at least ``CLAIM_MIN_TURNS`` turns on which both
arms did the same work with the same output ("at the same quality"). 2× is chosen to match the step of the gates that
do have numbers (the usable-context gate's 2×; the prefill gate's 3×), so a G4 win is a step of their order, not a
small gain; whatever the reading, the finding carries the measured ratio and its interval. The other three gates are
:mod:`workbench.certify.gates`; the entry condition (``entry.step_function``) is kept when any one of the four is
confirmed on target (:func:`workbench.standing.step_function`). Any other rule, laxer or stricter (a raised
bar refutes an honest win; a stricter equal-work margin can disqualify the fastest llama.cpp arm) is
*exploratory*: it is measured and reported, never the claim's verdict. Confirmed and refuted need the same
conditions: on target, the claim's rule and equal-work rule, enough compared turns, a subject that did the turns'
work, every llama.cpp arm of the run qualified and the whole baseline (:data:`BASELINE`) among them, and a verdict
that still holds with every excluded turn counted at its worst for it (the excluded turns cannot select the sample).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from .stats import interval

CLAIM = "gate.turn_time"
#: The workbench's own reading of "materially better" (G4 has no number in the source; see the module's words), the
#: one home of that number. It is not the blueprint's: the source's 2× belongs to the usable-context gate (G2).
CLAIM_MIN_SPEEDUP = 2.0
CLAIM_MIN_TURNS = 20  # compared turns below which a bootstrap CI over turns is no basis for a verdict
#: The claim's rule, field by field: a rule that moves any of them, either way, is exploratory.
CLAIM_RULE_VALUES = {"min_speedup": CLAIM_MIN_SPEEDUP, "bound": "low", "min_turns": CLAIM_MIN_TURNS}

GPU_RUN_MUST_ADD = (
    "the llama.cpp CUDA arm (llama.cpp arms with gpu_layers offloading every layer)",
    "the TensorRT-LLM arm",
    "a certified model (the product's, not the workbench default), named in a --certified file",
)


#: The llama.cpp arms the claim's baseline must hold, each qualified (its turns served with equal work), keyed by an
#: arm's (reuse, speculation): llama.cpp reusing the prefix, and llama.cpp's own speculation (the blueprint's
#: "llama.cpp-with-speculation baseline"; the workbench's prompt lookup may stand beside it, never in its place).
#: The best of the arms that ran is what the subject must beat; a missing one could only have raised that bar. On
#: target each must be llama.cpp's CUDA cell: an arm counts there only where its engine said it holds every layer on
#: the GPU (``arms.on_gpu``).
BASELINE = {(True, "none"): "llama.cpp with prefix reuse", (True, "engine"): "llama.cpp's own speculation"}


def departures(rule: Any, claim: Mapping[str, Any]) -> str | None:
    """Where ``rule`` departs from the ``claim``'s values (field → value), either way, or None."""
    moved = [f"{k} {_show(getattr(rule, k))} instead of the claim's {_show(v)}" for k, v in claim.items()
             if getattr(rule, k) != v]
    return "; ".join(moved) or None


def _show(v: Any) -> str:
    return format(v, "g") if isinstance(v, float) else str(v)


@dataclass(frozen=True)
class GateRule:
    subject: str = "trtllm"  # the arm whose win the claim is about
    min_speedup: float = CLAIM_MIN_SPEEDUP  # best llama.cpp loop time / subject loop time
    bound: str = "low"  # which end of the CI must clear min_speedup: low | value
    min_turns: int = CLAIM_MIN_TURNS  # turns both arms served with equal work and output

    def __post_init__(self) -> None:
        if self.bound not in {"low", "value"}:
            raise ValueError(f"gate bound must be 'low' or 'value', got {self.bound!r}")
        if not (isinstance(self.min_speedup, (int, float)) and math.isfinite(self.min_speedup)
                and self.min_speedup > 0):
            raise ValueError(f"gate min_speedup must be a finite positive number, got {self.min_speedup}")
        if not (isinstance(self.min_turns, int) and self.min_turns >= 2):
            raise ValueError(f"gate min_turns must be an integer of at least 2, got {self.min_turns!r}")

    @property
    def exploratory(self) -> str | None:
        """Why this rule is not the claim's (so it can never give the claim's verdict), or None."""
        return departures(self, CLAIM_RULE_VALUES)

    def describe(self) -> str:
        where = "the lower bound of its 95% bootstrap CI" if self.bound == "low" else "its point estimate"
        text = (f"{self.subject}'s end-to-end loop time beats the best llama.cpp arm (speculation included) "
                f"by at least {self.min_speedup:g}× on {where}, over at least {self.min_turns} turns served with "
                "equal work and output (G4, \"materially better … at the same quality\": the workbench's own reading, "
                "the source gives no number)")
        return text + (f" (exploratory: {self.exploratory})" if self.exploratory else "")

    def as_dict(self) -> dict:
        return asdict(self) | {"exploratory": self.exploratory}


@dataclass(frozen=True)
class GateEvidence:
    """What the gate reads, summarised from the loop's rows (:mod:`.results`)."""

    speedup: dict | None  # the subject's speed-up over the best llama.cpp arm ({value, low, high}); None: not run
    subject_reason: str | None = None  # why the subject did not run
    best_reference: str | None = None  # the fastest qualified llama.cpp arm
    compared_turns: int = 0  # turns the subject and that arm both served with equal work and output
    disqualified: str | None = None  # why the subject's turns cannot be compared (less work, other tokens)
    no_reference: str | None = None  # why no llama.cpp arm qualifies, when one ran
    on_target: bool = False  # verified: a GPU in the finding's fingerprint and a certified model
    baseline_missing: tuple[str, ...] = ()  # the kinds of BASELINE no qualified llama.cpp arm of the run is
    baseline_disqualified: tuple[str, ...] = ()  # the run's llama.cpp arms the equal-work rule disqualified
    other_work: str | None = None  # why the run's equal-work rule is not the claim's (equal.EqualWork)
    excluded_turns: int = 0  # turns the subject and that arm both served, not both comparably
    against: dict | None = None  # the speed-up with every excluded turn counted against the subject
    favour: dict | None = None  # … and counted in its favour


@dataclass(frozen=True)
class GateOutcome:
    verdict: str  # confirmed | refuted | inconclusive | not-run
    summary: str
    reason: str | None = None


def _side(rule: GateRule, e: dict) -> str:
    """Where an estimate lies against the rule's bar: ``confirmed``, ``refuted``, or why neither."""
    x = e["low"] if rule.bound == "low" else e["value"]
    if not math.isfinite(x) or not math.isfinite(e["high"]):
        return "no interval"
    if x >= rule.min_speedup:
        return "confirmed"
    if e["high"] < rule.min_speedup or rule.bound == "value":
        return "refuted"
    return f"the interval straddles {rule.min_speedup:g}×"


def decide(rule: GateRule, ev: GateEvidence) -> GateOutcome:
    """The decision ladder: run at all → comparable → enough turns → where the CI lies → may it be the claim's."""
    if ev.subject_reason is not None or ev.speedup is None:
        why = ev.subject_reason or f"the {rule.subject} arm was not in this run"
        return GateOutcome("not-run", f"Unresolved: {why}", why)
    if ev.best_reference is None:
        why = ev.no_reference or "no llama.cpp reference arm ran, so there is nothing to beat"
        return GateOutcome("not-run" if ev.no_reference is None else "inconclusive", f"Unresolved: {why}", why)
    if ev.disqualified:
        return GateOutcome("inconclusive", f"{rule.subject} cannot be compared: {ev.disqualified}")
    figure = f"{interval(ev.speedup)} over {ev.best_reference} on {ev.compared_turns} compared turns"
    if ev.excluded_turns:
        figure += (f" ({ev.excluded_turns} excluded turns counted against it: "
                   f"{interval(ev.against) if ev.against else 'not measured'}; in its favour: "
                   f"{interval(ev.favour) if ev.favour else 'not measured'})")
    if ev.compared_turns < rule.min_turns:
        return GateOutcome("inconclusive", f"{rule.subject} {figure}: fewer than the rule's {rule.min_turns} turns")
    verdict = _side(rule, ev.speedup)
    if verdict not in {"confirmed", "refuted"}:
        return GateOutcome("inconclusive", f"{rule.subject} {figure}: {verdict}")
    text = f"clears {rule.min_speedup:g}×" if verdict == "confirmed" else f"below {rule.min_speedup:g}×"
    worst, way = (ev.against, "against it") if verdict == "confirmed" else (ev.favour, "in its favour")
    held_back = [why for bad, why in (
        (not ev.on_target, "not on target hardware with a certified model"),
        (rule.exploratory is not None, f"an exploratory rule ({rule.exploratory})"),
        (bool(ev.baseline_missing), f"the llama.cpp baseline lacks {' and '.join(ev.baseline_missing)}"),
        (bool(ev.baseline_disqualified), f"the equal-work rule disqualified the run's llama.cpp arm(s) "
                                         f"{', '.join(ev.baseline_disqualified)}, so the bar is not the whole run's"),
        (ev.other_work is not None, f"an exploratory equal-work rule ({ev.other_work})"),
        (ev.excluded_turns > 0 and (worst is None or _side(rule, worst) != verdict),
         f"with its {ev.excluded_turns} excluded turns counted {way} the verdict does not hold"),
    ) if bad]
    if held_back:
        return GateOutcome("inconclusive", f"{rule.subject} {figure}: {text}, but {' and '.join(held_back)}, "
                                           f"so not the claim's verdict (would be {verdict})")
    return GateOutcome(verdict, f"{rule.subject} {figure}: {text}")


__all__ = ["BASELINE", "CLAIM", "CLAIM_MIN_SPEEDUP", "CLAIM_MIN_TURNS", "CLAIM_RULE_VALUES", "GPU_RUN_MUST_ADD",
           "GateEvidence", "GateOutcome", "GateRule", "decide", "departures"]
