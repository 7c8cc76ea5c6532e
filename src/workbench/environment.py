"""Where and when a measurement was taken: hardware, driver/CUDA, workbench version, git commit, the time.

Every finding carries this fingerprint; ``workbench doctor`` prints it.
"""

from __future__ import annotations

import datetime as _dt
import functools
import os
import platform
import subprocess
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any

from . import cpu as _cpu
from . import nvml


def now_iso() -> str:
    """Now, in UTC, to the second: every timestamp the workbench writes (a finding's ``created``, a run's record)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _run(cmd: list[str], timeout: float = 10) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


@functools.lru_cache(maxsize=1)
def cpu() -> dict:
    """The CPU: model, the machine's cores and the ones this process may use (a lane's, in a laned batch)."""
    model = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = None
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        pass
    usable = _cpu.usable()
    return {"model": model, "cores": os.cpu_count(), "usable_cores": list(usable) if usable is not None else None,
            "memory_bytes": mem, "machine": platform.machine()}


@functools.lru_cache(maxsize=1)
def gpus() -> dict:
    """NVIDIA GPUs as NVML states them (:func:`workbench.nvml.read`); ``available`` False with NVML's reason otherwise."""
    return nvml.read()


def hardware() -> dict:
    c, g = cpu(), gpus()
    gpu_names = ", ".join(d["name"] for d in g["devices"]) or "no GPU"
    summary = f"{c['model'] or c['machine']} ({c['cores']} cores); {gpu_names}"
    return {"summary": summary, "cpu": c, "gpu": g}


def workbench_version() -> str:
    try:
        return metadata.version("workbench")
    except metadata.PackageNotFoundError:
        return "0+unknown"


@functools.lru_cache(maxsize=1)
def git_commit() -> str | None:
    here = Path(__file__).resolve().parent
    out = _run(["git", "-C", str(here), "rev-parse", "HEAD"], timeout=5)
    if out is None:
        return None
    dirty = _run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"], timeout=5)
    return out + ("-dirty" if dirty else "")


def version_line() -> str:
    """``workbench --version``: the package's version and, run from a checkout, its commit (``-dirty`` with changes)."""
    commit = git_commit()
    return f"workbench {workbench_version()}" + (f" (commit {commit})" if commit else "")


def fingerprint(engine: str, engine_version: str | None, model: Any = None, geometry: Any = None,
                extra: dict | None = None) -> dict:
    """The ``environment`` block of a finding."""
    model_doc: dict = {}
    if model is not None:
        model_doc = {"spec": model.spec, "name": model.name, "kind": model.kind, "sha256": model.sha256}
    if geometry is not None:
        model_doc["geometry"] = asdict(geometry) | {"bytes_per_token": geometry.bytes_per_token}
    return {
        "engine": engine,
        "engine_version": engine_version,
        "model": model_doc,
        "hardware": hardware(),
        "python": platform.python_version(),
        "workbench_version": workbench_version(),
        "git_commit": git_commit(),
        "time": now_iso(),
        **(extra or {}),
    }
