"""``--on-target``, checked rather than believed.

The claim is about target hardware with a certified model. A run may declare it only where this
machine's own fingerprint has a GPU and every model the loop runs is named in a certified list that
the user gives (one entry a line: a model spec, file or directory name, path or SHA-256; ``#``
starts a comment). Anything else is an error the user can fix, raised before any turn runs.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Sequence

from .. import models
from ..contract import WorkbenchError


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


def verify(certified: Path | None, model_specs: Sequence[str], hardware: dict) -> dict:
    """The target evidence recorded in the gate finding; raises WorkbenchError naming what to fix."""
    gpu = hardware.get("gpu") or {}
    if not gpu.get("available"):
        raise WorkbenchError("--on-target declares target hardware, but this machine's fingerprint has no GPU "
                             f"({gpu.get('reason') or 'none found'}); run on the target GPU machine, or drop "
                             "--on-target (the gate then reports at most inconclusive)")
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
    return {"gpu": [d.get("name") for d in gpu.get("devices", [])], "driver": gpu.get("driver"),
            "certified_file": str(certified),
            "certified_sha256": hashlib.sha256(certified.read_bytes()).hexdigest(), "models": matched}


__all__ = ["certified_entries", "verify"]
