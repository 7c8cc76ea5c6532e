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
"""The environment key a product-path finding must carry: the contenox runtime that drove it, as ``contenox --trace``
records it (:data:`DRIVER_FIELDS`). No writer in this workbench sets it: no contenox runtime runs here."""
DRIVER_FIELDS = {"version": "the contenox runtime's version (``contenox --version``)",
                 "command": "the contenox command that drove the run",
                 "trace_sha256": "the sha256 of the trace that run wrote (``contenox --trace``), 64 hex digits"}
"""What :data:`PRODUCT_DRIVER` must state, field by field: a product-path row names the runtime, the command and the
trace it left, so two edited fields never make one."""
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
    if result_class == ResultClass.PRODUCT.value:
        missing = driver_problem((environment or {}).get(PRODUCT_DRIVER))
        if missing:
            return (f"it is labelled {result_class}, but no contenox runtime drove it ({missing}): nothing is "
                    "product path unless contenox-runtime ran it")
    if verdict in NO_CLAIM and result_class != ResultClass.FAILED.value:
        return f"a {verdict} finding measured nothing, so its class is {ResultClass.FAILED.value}, not {result_class}"
    return None


def driver_problem(driver: Any) -> str | None:
    """Why ``driver`` (an environment's :data:`PRODUCT_DRIVER`) names no contenox runtime that drove the run, or None:
    each of :data:`DRIVER_FIELDS` stated, the trace's digest a sha256."""
    if not driver:
        return f"its environment has no {PRODUCT_DRIVER}"
    if not isinstance(driver, Mapping):
        return f"its {PRODUCT_DRIVER} is {driver!r}, not the runtime's {', '.join(DRIVER_FIELDS)}"
    missing = [k for k in DRIVER_FIELDS if not isinstance(driver.get(k), str) or not driver[k].strip()]
    if missing:
        return f"its {PRODUCT_DRIVER} states no {', '.join(missing)} ({'; '.join(DRIVER_FIELDS[k] for k in missing)})"
    digest = driver["trace_sha256"].strip().lower()
    if len(digest) != 64 or any(ch not in "0123456789abcdef" for ch in digest):
        return f"its {PRODUCT_DRIVER}'s trace_sha256 {driver['trace_sha256']!r} is no sha256"
    return None


__all__ = ["DRIVER_FIELDS", "LABELS", "NO_CLAIM", "PRODUCT_DRIVER", "ResultClass", "WORDS", "check", "driver_problem",
           "for_verdict", "problem"]
