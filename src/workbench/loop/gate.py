"""The blueprint's first entry condition as a rule: ``entry.step_function``.

"A benchmark on target hardware (certified model, agentic loop, product path) showing a
step-function win over the llama.cpp CUDA cell, including a llama.cpp-with-speculation baseline."
The rule is a parameter; by default the subject arm's end-to-end loop time must beat the best
llama.cpp arm (speculation included) by at least 2× on the lower bound of the bootstrap CI.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

CLAIM = "entry.step_function"

GPU_RUN_MUST_ADD = (
    "the llama.cpp CUDA arm (llama.cpp arms with n_gpu_layers offloading every layer)",
    "the TensorRT-LLM arm",
    "a certified model (the product's, not the workbench default)",
)


@dataclass(frozen=True)
class GateRule:
    subject: str = "trtllm"  # the arm whose win the claim is about
    min_speedup: float = 2.0  # best llama.cpp loop time / subject loop time
    bound: str = "low"  # which end of the CI must clear min_speedup: low | value

    def __post_init__(self) -> None:
        if self.bound not in {"low", "value"}:
            raise ValueError(f"gate bound must be 'low' or 'value', got {self.bound!r}")
        if self.min_speedup <= 0:
            raise ValueError(f"gate min_speedup must be positive, got {self.min_speedup}")

    def describe(self) -> str:
        where = "the lower bound of its 95% bootstrap CI" if self.bound == "low" else "its point estimate"
        return (f"{self.subject}'s end-to-end loop time beats the best llama.cpp arm (speculation included) "
                f"by at least {self.min_speedup:g}× on {where}")

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class GateOutcome:
    verdict: str  # confirmed | refuted | inconclusive | not-run
    summary: str
    reason: str | None = None


def decide(rule: GateRule, speedup: dict | None, subject_reason: str | None, best_reference: str | None,
           on_target: bool) -> GateOutcome:
    """``speedup``: the subject's speed-up over the best llama.cpp arm ({value, low, high}); None when it did not run.

    ``on_target`` says the run was on target hardware with a certified model; off target a
    measured win is at most inconclusive, because the claim is about the product path.
    """
    if subject_reason is not None or speedup is None:
        why = subject_reason or f"the {rule.subject} arm was not in this run"
        return GateOutcome("not-run", f"Unresolved: {why}", why)
    if best_reference is None:
        why = "no llama.cpp reference arm ran, so there is nothing to beat"
        return GateOutcome("not-run", f"Unresolved: {why}", why)
    x = speedup["low"] if rule.bound == "low" else speedup["value"]
    figure = f"{speedup['value']:.3g}× [{speedup['low']:.3g}, {speedup['high']:.3g}] over {best_reference}"
    if x != x:  # NaN: one turn, no interval
        return GateOutcome("inconclusive", f"{figure}: too few turns for an interval")
    if x >= rule.min_speedup:
        verdict = "confirmed" if on_target else "inconclusive"
        tail = "" if on_target else " (not on target hardware with a certified model, so not a certification)"
        return GateOutcome(verdict, f"{rule.subject} {figure}: clears {rule.min_speedup:g}×{tail}")
    if speedup["high"] < rule.min_speedup or rule.bound == "value":
        return GateOutcome("refuted", f"{rule.subject} {figure}: below {rule.min_speedup:g}×")
    return GateOutcome("inconclusive", f"{rule.subject} {figure}: the interval straddles {rule.min_speedup:g}×")


__all__ = ["CLAIM", "GPU_RUN_MUST_ADD", "GateOutcome", "GateRule", "decide"]
