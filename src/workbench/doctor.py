"""``workbench doctor``: what this machine can run, and exactly why not where it cannot."""

from __future__ import annotations

import platform
import sys
from dataclasses import asdict

from . import cells, environment, models


def report() -> dict:
    engines = {}
    for name in cells.engines():
        a = cells.availability(name)
        engines[name] = asdict(a)
    try:
        m = models.resolve(models.DEFAULT_MODEL)
        default = {"spec": m.spec, "name": m.name, "path": str(m.path), "sha256": m.sha256, "ok": True, "error": None}
    except models.ModelSpecError as e:
        default = {"spec": models.DEFAULT_MODEL, "ok": False, "error": str(e)}
    return {
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "workbench": {"version": environment.workbench_version(), "git_commit": environment.git_commit()},
        "cpu": environment.cpu(),
        "gpu": environment.gpus(),
        "engines": engines,
        "default_model": default,
        "runnable_engines": [n for n, a in engines.items() if a["available"]],
    }


def render(rep: dict) -> str:
    """A human-readable report (the same facts as ``--json``)."""
    lines = [
        f"python      {rep['python']['version']} ({rep['python']['executable']})",
        f"workbench   {rep['workbench']['version']} @ {rep['workbench']['git_commit'] or 'no git'}",
        f"cpu         {rep['cpu']['model']} · {rep['cpu']['cores']} cores · "
        f"{(rep['cpu']['memory_bytes'] or 0) / 2**30:.1f} GiB",
    ]
    g = rep["gpu"]
    if g["available"]:
        for d in g["devices"]:
            lines.append(f"gpu         [{d['index']}] {d['name']} · {d['memory_total_bytes'] / 2**30:.1f} GiB "
                         f"(driver {g['driver']}, CUDA {g['cuda'] or '?'}, via {g['source']})")
    else:
        lines.append(f"gpu         none — {g['reason']}")
    for name, a in rep["engines"].items():
        if a["available"]:
            extra = ""
            if "gpu_offload" in a["details"]:
                extra = f" · GPU offload {'built in' if a['details']['gpu_offload'] else 'not built'}"
            lines.append(f"engine      {name}: available, version {a['version']}{extra}")
        else:
            lines.append(f"engine      {name}: unavailable — {a['reason']}")
        for row in a["details"].get("guard", []):
            mark = "ok" if row.get("ok") else "MISSING/CHANGED"
            lines.append(f"  guard     {mark:>15}  {row.get('symbol')}  {row.get('detail') or ''}".rstrip())
    d = rep["default_model"]
    lines.append(f"model       {d['spec']}: " + (f"ok, {d['name']} sha256 {d['sha256'][:16]}…" if d["ok"] else d["error"]))
    lines.append(f"can run     {', '.join(rep['runnable_engines']) or 'nothing'}")
    return "\n".join(lines)
