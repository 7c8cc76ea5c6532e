"""``workbench doctor``: what this machine can run, and exactly why not where it cannot."""

from __future__ import annotations

import platform
import sys
import time
from dataclasses import asdict
from typing import Callable

from . import cells, cpu, environment, isolate, lanes, models
from .engine import WorkbenchError

DECODE_TOKENS = 4
DECODE_TIMEOUT_S = 180.0


def _decode(spec: str, n: int) -> dict:
    """Load ``spec`` in llama.cpp and greedily decode ``n`` tokens (run in a child: it may crash)."""
    t0 = time.perf_counter()
    with cells.open_cell("llamacpp", spec, context_tokens=256) as cell:
        cell.ensure_prefix(cell.tokenize("The capital of France is"))
        out = cell.decode(max_tokens=n)
        return {"tokens": out.tokens, "text": cell.detokenize(out.tokens), "seconds": time.perf_counter() - t0,
                "extra_buffers": cell.extra_buffers.use}


def decode_check(spec: str = models.DEFAULT_MODEL, n: int = DECODE_TOKENS) -> dict:
    """"Model OK" means it decoded: load and decode in a child process, and say how it failed if it did."""
    try:
        m = models.resolve(spec)
    except models.ModelSpecError as e:
        return {"spec": spec, "ok": False, "error": str(e)}
    doc = {"spec": m.spec, "name": m.name, "path": str(m.path), "sha256": m.sha256}
    if not cells.availability("llamacpp").available:
        return doc | {"ok": False, "error": "not decoded: llama.cpp is not installed"}
    try:
        got = isolate.call(_decode, spec, n, timeout=DECODE_TIMEOUT_S)
    except isolate.EngineCrashed as e:
        return doc | {"ok": False, "error": f"{e.headline()} while decoding", "log_tail": e.log_tail}
    except (WorkbenchError, OSError) as e:
        return doc | {"ok": False, "error": f"not decoded: {e}"}
    return doc | {"ok": True, "error": None, "decoded": got}


PARTS = ("machine", "engines", "default_model", "runnable_engines")
"""The report's parts in the order they are read (the engines one by one): ``workbench doctor`` prints each as it
is read, so 30 s of imports and a decode are never a silent console."""


def report(on_part: Callable[[str, dict], None] | None = None) -> dict:
    """What this machine can run; ``on_part(part, report so far)`` is called as each part is read (``engines`` once
    per engine, as each engine's availability is read)."""
    tell = on_part or (lambda part, rep: None)
    flags = cpu.flags()
    rep: dict = {
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "workbench": {"version": environment.workbench_version(), "git_commit": environment.git_commit()},
        "cpu": environment.cpu() | {"flags": {f: f in flags for f in cpu.SHOWN_FLAGS},
                                    "llama_cmake_args": cpu.cmake_args(flags, platform.machine())},
        "lanes": lanes.here(),
        "gpu": environment.gpus(),
        "engines": {},
    }
    tell("machine", rep)
    for name in cells.engines():
        rep["engines"][name] = asdict(cells.availability(name))
        tell("engines", rep)
    rep["default_model"] = decode_check()
    tell("default_model", rep)
    rep["runnable_engines"] = [n for n, a in rep["engines"].items() if a["available"]]
    tell("runnable_engines", rep)
    return rep


def _cores(rep: dict) -> list[str]:
    """The cores this process may use, where fewer than the machine's, and a laned batch's lanes (the survey's)."""
    usable, lines = rep["cpu"].get("usable_cores"), []
    if usable is not None and len(usable) != rep["cpu"]["cores"]:
        lines.append(f"cores       this process may use {len(usable)}: {cpu.spans(usable)}")
    if rep.get("lanes"):
        lines.append(f"lanes       {len(rep['lanes'])}, " + "; ".join(
            f"lane {x.get('lane')} on cores {cpu.spans(x.get('cpus') or [])}" for x in rep["lanes"]))
    return lines


def engine_lines(name: str, a: dict) -> list[str]:
    """One engine's lines: available or why not, its guard rows, and where it has one, the release profile the
    cell took for it and how that profile differs from the older ones (TensorRT-LLM 1.4 against 1.2)."""
    if a["available"]:
        extra = ""
        if "gpu_offload" in a["details"]:
            extra = f" · GPU offload {'built in' if a['details']['gpu_offload'] else 'not built'}"
        lines = [f"engine      {name}: available, version {a['version']}{extra}"]
        if "extra_buffers_reason" in a["details"]:
            lines.append(f"  extra buffers {a['details']['extra_buffers_reason']}")
    else:
        lines = [f"engine      {name}: unavailable — {a['reason']}"]
    details = a["details"]
    if details.get("test_double"):
        lines.append(f"  double    {details['test_double']}: a test double, never an answer for the engine")
    release = details.get("release")
    if release:
        lines.append(f"  release   {release['name']} profile (written against {release['written_against']}); "
                     f"default KV manager {release['kv_manager_default']}")
        lines += [f"  unverified {field}: {why}" for field, why in release.get("unverified") or ()]
        for older, diffs in (details.get("release_differences") or {}).items():
            lines.append(f"  differs   from {older}: " + ("nothing the cell depends on" if not diffs else
                                                        f"{len(diffs)} behaviour(s)"))
            lines += [f"    {d['field']}: {d['was']} → {d['now']}" for d in diffs]
    for row in details.get("guard", []):
        mark = "ok" if row.get("ok") else "MISSING/CHANGED"
        lines.append(f"  guard     {mark:>15}  {row.get('symbol')}  {row.get('detail') or ''}".rstrip())
    return lines


def _machine(rep: dict) -> list[str]:
    lines = [
        f"python      {rep['python']['version']} ({rep['python']['executable']})",
        f"workbench   {rep['workbench']['version']} @ {rep['workbench']['git_commit'] or 'no git'}",
        f"cpu         {rep['cpu']['model']} · {rep['cpu']['cores']} cores · "
        f"{(rep['cpu']['memory_bytes'] or 0) / 2**30:.1f} GiB",
        "cpu flags   " + "  ".join(f"{f} {'yes' if v else 'no'}" for f, v in rep["cpu"]["flags"].items()),
        *_cores(rep),
    ]
    g = rep["gpu"]
    if g["available"]:
        for d in g["devices"]:
            lines.append(f"gpu         [{d['index']}] {d['name']} · {d['memory_total_bytes'] / 2**30:.1f} GiB "
                         f"(driver {g['driver']}, CUDA {g['cuda'] or '?'}, via {g['source']})")
    else:
        lines.append(f"gpu         none — {g['reason']}")
    return lines


def _model(d: dict) -> list[str]:
    if d["ok"]:
        got = d["decoded"]
        return [f"model       {d['spec']}: ok, {d['name']} sha256 {d['sha256'][:16]}…; decoded "
                f"{len(got['tokens'])} tokens {got['text']!r} in {got['seconds']:.1f} s"]
    return [f"model       {d['spec']}: {d['error']}", *(f"  | {line}" for line in d.get("log_tail", []))]


def lines(part: str, rep: dict) -> list[str]:
    """The human-readable lines of one part of the report (``engines``: the engine read last)."""
    if part == "machine":
        return _machine(rep)
    if part == "engines":
        name, a = list(rep["engines"].items())[-1]
        return engine_lines(name, a)
    if part == "default_model":
        return _model(rep["default_model"])
    return [f"can run     {', '.join(rep['runnable_engines']) or 'nothing'}"]


def render(rep: dict) -> str:
    """A human-readable report (the same facts as ``--json``)."""
    out = _machine(rep)
    for name, a in rep["engines"].items():
        out += engine_lines(name, a)
    return "\n".join([*out, *_model(rep["default_model"]), *lines("runnable_engines", rep)])
