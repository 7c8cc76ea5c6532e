"""``surface.cpp_entrypoint``: is there a C/C++ entry point for the engine's native model path? Static: it reads
the installed package, never runs a model.

TensorRT-LLM (the subject): survey headers, shared libraries and their exported Executor symbols, and what
each Executor constructor takes (engine directory vs model code). Another engine is a reference: whether its
libraries export the C functions its cell calls (``c_functions``: llama.cpp's llama.h), or, where its cell calls
Python only, whether its libraries are anything but Python extension modules (vLLM).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import cells, claims
from ..observe.survey import elf_defined_dynamic_symbols, survey
from . import Outcome, Probe, ProbeContext, Support
from .installed import NoParams, package_dir


class CppEntrypoint(Probe):
    version = "2"
    claims = ("unknown.cpp_entrypoint",)
    rests = {("*", "partial"): ((Support("executor_symbols", ">", 0),), (Support("symbols_missing", ">", 0),),
                                (Support("symbols_present", ">", 0),)),
             ("*", "refuted"): ((Support("executor_symbols", ">", 0),), (Support("executor_symbols", "==", 0),),
                                (Support("symbols_present", ">", 0),))}
    Params = NoParams
    needs_engine = False

    def from_evidence(self, evidence, p) -> Outcome:
        """The rule of the channel the survey read (recorded in ``inputs``) again on its rows."""
        given = evidence["inputs"]
        rule = {"subject": subject_verdict, "c_api": c_api_verdict, "extension": extension_verdict}[given["channel"]]
        return rule(evidence["rows"], given)

    def run(self, ctx: ProbeContext, p: NoParams) -> Outcome:
        root = package_dir(ctx.engine)
        cell = cells.cell_class(cells.runs(ctx.engine))  # served: the package its server runs
        if cells.runs(ctx.engine) != self.claim.subject:  # another engine: a reference, by what its cell would call
            return _c_api(root, cell, self.claim) if cell.c_functions else _extension_modules(root, cell.label)
        s = survey(root)
        rows = [{"kind": "constructor", "where": c.where, "source": c.source, "takes": c.takes,
                 "signature": c.signature} for c in s.constructors]
        rows += [{"kind": "library", "where": lib.path, "executor_symbols": len(lib.executor_symbols),
                  "symbol_source": lib.symbol_source, "error": lib.error} for lib in s.libraries]
        given = {"channel": "subject", "headers": len(s.headers), "root": str(root),
                 "libraries": len(s.libraries), "symbol_channel": s.symbol_channel}
        out = subject_verdict(rows, given)
        out.inputs = given
        return out


def subject_verdict(rows: list[dict], given: dict) -> Outcome:
    """The subject's survey: what its Executor constructors take (their rows' ``takes``) and the Executor symbols its
    libraries export."""
    kinds = sorted({r["takes"] for r in rows if r["kind"] == "constructor"})
    metrics = {"headers": given["headers"],
               "executor_symbols": sum(r["executor_symbols"] for r in rows if r["kind"] == "library")}
    notes = [f"surveyed {given['root']}: {given['headers']} headers, {given['libraries']} shared libraries "
             f"(symbols via {given['symbol_channel']}); Executor constructors take: {', '.join(kinds) or 'none found'}",
             "documentation and stability cannot be read from files; a positive answer still needs NVIDIA's word"]
    if "model_code" in kinds:
        return Outcome("partial", "An installed Executor constructor takes model code objects: a C++ entry into "
                       "the PyTorch-native path may exist; its documentation and stability are unverified.",
                       metrics, rows, notes, rests_on=(Support("executor_symbols", ">", 0),))
    if kinds:
        return Outcome("refuted", f"The installed release's C++ Executor is constructed only from "
                       f"{' / '.join(kinds)} (engine artifacts), not from the PyTorch-native model "
                       "definitions: no C/C++ entry point into the PyTorch path is shipped.", metrics, rows, notes,
                       rests_on=(Support("executor_symbols", ">", 0),))
    return Outcome("refuted", "The installed release ships no C++ Executor entry point at all (headers and "
                   "exported symbols surveyed).", metrics, rows, notes,
                   rests_on=(Support("executor_symbols", "==", 0),))


def _libraries(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and (p.suffix == ".so" or ".so." in p.name))


def _c_api(root: Path, cell: Any, claim: claims.Claim) -> Outcome:
    """An engine whose cell calls a C API (``cell.c_functions``): do its shared libraries export all of it?"""
    wanted = list(cell.c_functions)
    exported: set[str] = set()
    rows = []
    for lib in _libraries(root):
        names = set(elf_defined_dynamic_symbols(lib))
        exported |= names
        rows.append({"kind": "library", "where": str(lib.relative_to(root)),
                     "c_api_symbols": len(names & set(wanted))})
    given = {"channel": "c_api", "headers": len(list(root.rglob("*.h"))), "label": cell.label,
             "wanted": len(wanted), "missing": [f for f in wanted if f not in exported], "about": claim.about.name}
    out = c_api_verdict(rows, given)
    out.inputs = given
    return out


def c_api_verdict(rows: list[dict], given: dict) -> Outcome:
    label, wanted, missing = given["label"], given["wanted"], given["missing"]
    metrics = {"headers": given["headers"], "symbols_present": wanted - len(missing), "symbols_missing": len(missing)}
    notes = [f"libraries: {', '.join(r['where'] for r in rows) or 'none'}; headers shipped: {given['headers']}"]
    if missing:
        notes.append(f"missing C symbols: {', '.join(missing)}")
        return Outcome("partial", f"{label}'s libraries export {wanted - len(missing)}/{wanted} of "
                       f"the C functions the {label} cell uses.", metrics, rows, notes,
                       rests_on=(Support("symbols_missing", ">", 0),))
    return Outcome("not-applicable", f"The unknown is about {given['about']}'s PyTorch path, which {label} "
                   f"does not have; as a reference, {label} ships a C entry point: its libraries export all "
                   f"{wanted} C functions its cell uses, so a Go daemon can host it in-process without Python.",
                   metrics, rows, notes)


def _extension_modules(root: Path, label: str) -> Outcome:
    """An engine whose cell calls Python only: are its shared libraries a C entry point, or extension modules?"""
    rows = []
    for lib in _libraries(root):
        names = elf_defined_dynamic_symbols(lib)
        rows.append({"kind": "library", "where": str(lib.relative_to(root)), "exported_symbols": len(names),
                     "python_extension": any(n.startswith("PyInit_") for n in names)})
    given = {"channel": "extension", "headers": len(list(root.rglob("*.h"))), "label": label}
    out = extension_verdict(rows, given)
    out.inputs = given
    return out


def extension_verdict(rows: list[dict], given: dict) -> Outcome:
    label = given["label"]
    standalone = [r for r in rows if not r["python_extension"]]
    metrics = {"headers": given["headers"], "symbols_present": sum(r["exported_symbols"] for r in rows)}
    notes = [f"{len(rows)} shared libraries; Python extension modules (export PyInit_*): "
             f"{len(rows) - len(standalone)}; others: {', '.join(r['where'] for r in standalone) or 'none'}"]
    if standalone:
        return Outcome("partial", f"{label} ships {len(standalone)} shared libraries that are not Python extension "
                       "modules; whether any is a documented C entry point is not established by their symbols.",
                       metrics, rows, notes, rests_on=(Support("symbols_present", ">", 0),))
    return Outcome("refuted", f"{label} ships no C/C++ entry point: all {len(rows)} of its shared libraries are Python "
                   "extension modules (custom torch ops), so a host must embed Python to run it.", metrics, rows, notes,
                   rests_on=(Support("symbols_present", ">", 0),))
