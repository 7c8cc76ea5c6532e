"""The four result classes of benchmark integrity, declared once: a leaf every writer of findings reads.

"Every row records one class. Mixed classes are not comparable unless explicitly normalized and labeled."
(contenox/runtime ``2bfdc1f5``, ``docs/development/blueprints/modeld/effective-context/benchmark-integrity-blueprint.md``,
"Result Classes"). The product path is "contenox-runtime binary -> modeld launcher -> backend adapter -> selected
runtime/device": nothing this workbench runs today is on it, so a finding may carry ``contenox_product_path`` only
when its environment names the contenox runtime that drove it (:data:`PRODUCT_DRIVER`), which the finding schema
checks (:func:`problem`).
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Mapping


class ResultClass(str, Enum):
    """A row's class; members compare and serialise as their labels (the blueprint's required labels)."""

    PRODUCT = "contenox_product_path"  # product benchmark: contenox-runtime drove it
    RAW = "raw_backend_control"  # raw substrate control: an engine driven directly (in-process or its own server)
    MICRO = "microbenchmark"  # kernel, tokenizer, loader or transport isolation: one mechanism on its own
    FAILED = "failed_no_performance_claim"  # a failed run: debugging an environment, packaging or runtime failure

    def __str__(self) -> str:
        return self.value


LABELS: tuple[str, ...] = tuple(c.value for c in ResultClass)
WORDS = {
    ResultClass.PRODUCT.value: "product benchmark (contenox-runtime drove it)",
    ResultClass.RAW.value: "raw substrate control (the engine driven directly, not through contenox)",
    ResultClass.MICRO.value: "microbenchmark (one mechanism on its own)",
    ResultClass.FAILED.value: "failed run: no performance claim",
}
PRODUCT_DRIVER = "contenox_runtime"
"""The environment key a product-path finding must carry: the contenox runtime that drove it (its version and the
command), as ``contenox --trace`` records it. No writer in this workbench sets it: no contenox runtime runs here."""
NO_CLAIM = frozenset({"not-run"})  # verdicts of a run that measured nothing: failed_no_performance_claim


def check(label: str, what: str = "a result class") -> str:
    """``label`` as one of :data:`LABELS`; a ValueError naming them where it is none."""
    if label not in LABELS:
        raise ValueError(f"{what} must be one of {', '.join(LABELS)}, got {label!r}")
    return label


def for_verdict(verdict: str, declared: str) -> str:
    """The class a finding of this verdict carries: a run that measured nothing (not-run) is a failed run with no
    performance claim; any other carries its writer's declared class."""
    return ResultClass.FAILED.value if verdict in NO_CLAIM else check(declared)


def problem(result_class: str | None, verdict: str, environment: Mapping[str, Any]) -> str | None:
    """Why a finding's recorded class cannot stand (None: it can): product path without the contenox runtime that
    drove it, or a performance class on a run that measured nothing."""
    if result_class is None:
        return None
    if result_class not in LABELS:
        return f"result_class {result_class!r} is none of {', '.join(LABELS)}"
    if result_class == ResultClass.PRODUCT.value and not (environment or {}).get(PRODUCT_DRIVER):
        return (f"it is labelled {result_class}, but no contenox runtime drove it (its environment has no "
                f"{PRODUCT_DRIVER}): nothing is product path unless contenox-runtime ran it")
    if verdict in NO_CLAIM and result_class != ResultClass.FAILED.value:
        return f"a {verdict} finding measured nothing, so its class is {ResultClass.FAILED.value}, not {result_class}"
    return None


__all__ = ["LABELS", "NO_CLAIM", "PRODUCT_DRIVER", "ResultClass", "WORDS", "check", "for_verdict", "problem"]
