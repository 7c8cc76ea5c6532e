"""``--on-target``, checked rather than believed.

The claim is about target hardware with a certified model, on its agentic loop. A run may declare it only where
this machine's own fingerprint has a GPU read through NVML (the driver's own library, :mod:`workbench.nvml`; a
fingerprint read any other way does not count), every model the loop runs is named in a certified list that the
user gives (one entry a line: a model spec, file or directory name, path or SHA-256; ``#`` starts a comment), and
the trace is the claim's own (:data:`CLAIM_TRACE`), pinned by digest: the sha256 of its uncompressed content must
be the one its ``SOURCE.md`` states, so a trace edited, cut or swapped under the same name is refused. Anything
else is an error the user can fix, raised before any turn runs.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Sequence

from .. import models
from ..engine import WorkbenchError
from . import traces

CLAIM_TRACE = "taubench"
"""The trace the claim is measured on: τ-bench airline, the built-in trace of whole agent conversations (text and
tool calls); the claim's resolve command names it (``claims.py``, ``entry.step_function``)."""


def certified_entries(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise WorkbenchError(f"--certified {path}: cannot read the certified-model list ({e}); give a UTF-8 text "
                             "file with one certified model a line") from None
    entries = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    entries = [e for e in entries if e]
    if not entries:
        raise WorkbenchError(f"--certified {path} names no model; write one certified model a line "
                             "(spec, name, path or SHA-256)")
    return entries


def _names(spec: str) -> set[str]:
    try:
        m = models.resolve(spec)
    except models.ModelSpecError as e:
        raise WorkbenchError(str(e)) from None
    return {spec, m.spec, m.name, m.path.name, str(m.path), str(m.path.resolve()), m.sha256}


def claim_trace() -> tuple[str, str]:
    """The claim's trace and the sha256 its content must have."""
    return CLAIM_TRACE, traces.stated_sha256(CLAIM_TRACE)


def verify_gpu(hardware: dict) -> dict:
    """The GPU this machine's fingerprint read through NVML; raises WorkbenchError naming what to fix."""
    gpu = hardware.get("gpu") or {}
    if not gpu.get("available") or gpu.get("source") != "nvml":
        why = gpu.get("reason") or (f"read by {gpu.get('source')}, not NVML" if gpu.get("available") else "none found")
        raise WorkbenchError("--on-target declares target hardware, but NVML reports no GPU on this machine "
                             f"({why}); run on the target GPU machine with the NVIDIA driver, or drop "
                             "--on-target (the gate then reports at most inconclusive)")
    return {"gpu": [d.get("name") for d in gpu.get("devices", [])], "driver": gpu.get("driver"),
            "gpu_source": gpu["source"]}


def verify_models(certified: Path | None, model_specs: Sequence[str]) -> dict:
    """Every model of ``model_specs`` named in the ``certified`` list, with the list's digest; raises
    WorkbenchError naming what to fix."""
    if certified is None:
        raise WorkbenchError("--on-target needs --certified FILE, the list of certified models the claim is about "
                             "(one a line: spec, name, path or SHA-256)")
    entries = certified_entries(certified)
    matched = {}
    for spec in dict.fromkeys(model_specs):
        hit = next((e for e in entries if e in _names(spec)), None)
        if hit is None:
            raise WorkbenchError(f"--on-target: model {spec} is not in the certified list {certified}; "
                                 "certify it there or run a certified model")
        matched[spec] = hit
    return {"certified_file": str(certified), "certified_sha256": hashlib.sha256(certified.read_bytes()).hexdigest(),
            "models": matched}


def verify(certified: Path | None, model_specs: Sequence[str], hardware: dict, trace: traces.Trace) -> dict:
    """The target evidence recorded in the gate finding; raises WorkbenchError naming what to fix."""
    gpu = verify_gpu(hardware)
    name, pinned = claim_trace()
    if trace.sha256 != pinned:
        raise WorkbenchError(f"--on-target: the trace {trace.name} (content sha256 {trace.sha256[:12]}…) is not the "
                             f"claim's trace {name} (sha256 {pinned[:12]}…, as its SOURCE.md states); run "
                             f"--trace {name}")
    models_ = verify_models(certified, model_specs)
    return gpu | {"trace": name, "trace_sha256": trace.sha256} | models_


__all__ = ["CLAIM_TRACE", "certified_entries", "claim_trace", "verify", "verify_gpu", "verify_models"]
