"""The blueprint's first entry condition as a rule: ``entry.step_function``.

"A benchmark on target hardware (certified model, agentic loop, product path) showing a
step-function win over the llama.cpp CUDA cell, including a llama.cpp-with-speculation baseline."
The claim's rule: the subject arm's end-to-end loop time beats the best llama.cpp arm (speculation
included) by at least 2× on the lower bound of the bootstrap CI, over at least ``CLAIM_MIN_TURNS``
turns on which both arms did the same work with the same output. A laxer rule (a smaller speed-up,
the point estimate, fewer turns) is *exploratory*: it is measured and reported, never the claim's verdict.
Confirmed and refuted need the same conditions: on target, the claim's rule and equal-work rule, enough
compared turns, a subject that did the turns' work, and the whole llama.cpp baseline (:data:`BASELINE`) qualified.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

CLAIM = "entry.step_function"
CLAIM_MIN_SPEEDUP = 2.0  # "a step-function win": the blueprint's 2×, the one home of that number
CLAIM_MIN_TURNS = 20  # compared turns below which a bootstrap CI over turns is no basis for a verdict

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
        """Why this rule is laxer than the claim's (so it can never give the claim's verdict), or None."""
        lax = [why for bad, why in (
            (self.min_speedup < CLAIM_MIN_SPEEDUP, f"min_speedup {self.min_speedup:g}× < the claim's {CLAIM_MIN_SPEEDUP:g}×"),
            (self.bound != "low", "the point estimate instead of the CI's lower bound"),
            (self.min_turns < CLAIM_MIN_TURNS, f"min_turns {self.min_turns} < the claim's {CLAIM_MIN_TURNS}"),
        ) if bad]
        return "; ".join(lax) or None

    def describe(self) -> str:
        where = "the lower bound of its 95% bootstrap CI" if self.bound == "low" else "its point estimate"
        text = (f"{self.subject}'s end-to-end loop time beats the best llama.cpp arm (speculation included) "
                f"by at least {self.min_speedup:g}× on {where}, over at least {self.min_turns} turns served with "
                "equal work and output")
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
    lax_work: str | None = None  # why the run's equal-work rule admits more than the claim's (equal.EqualWork)


@dataclass(frozen=True)
class GateOutcome:
    verdict: str  # confirmed | refuted | inconclusive | not-run
    summary: str
    reason: str | None = None


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
    x = ev.speedup["low"] if rule.bound == "low" else ev.speedup["value"]
    figure = (f"{ev.speedup['value']:.3g}× [{ev.speedup['low']:.3g}, {ev.speedup['high']:.3g}] over "
              f"{ev.best_reference} on {ev.compared_turns} compared turns")
    if ev.compared_turns < rule.min_turns:
        return GateOutcome("inconclusive", f"{rule.subject} {figure}: fewer than the rule's {rule.min_turns} turns")
    if not math.isfinite(x) or not math.isfinite(ev.speedup["high"]):
        return GateOutcome("inconclusive", f"{rule.subject} {figure}: no interval")
    if x >= rule.min_speedup:
        verdict, text = "confirmed", f"clears {rule.min_speedup:g}×"
    elif ev.speedup["high"] < rule.min_speedup or rule.bound == "value":
        verdict, text = "refuted", f"below {rule.min_speedup:g}×"
    else:
        return GateOutcome("inconclusive", f"{rule.subject} {figure}: the interval straddles {rule.min_speedup:g}×")
    held_back = [why for bad, why in (
        (not ev.on_target, "not on target hardware with a certified model"),
        (rule.exploratory is not None, f"an exploratory rule ({rule.exploratory})"),
        (bool(ev.baseline_missing), f"the llama.cpp baseline lacks {' and '.join(ev.baseline_missing)}"),
        (ev.lax_work is not None, f"a laxer equal-work rule ({ev.lax_work})"),
    ) if bad]
    if held_back:
        return GateOutcome("inconclusive", f"{rule.subject} {figure}: {text}, but {' and '.join(held_back)}, "
                                           f"so not the claim's verdict (would be {verdict})")
    return GateOutcome(verdict, f"{rule.subject} {figure}: {text}")


__all__ = ["BASELINE", "CLAIM", "CLAIM_MIN_SPEEDUP", "CLAIM_MIN_TURNS", "GPU_RUN_MUST_ADD", "GateEvidence", "GateOutcome",
           "GateRule", "decide"]
