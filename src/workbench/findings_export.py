"""``workbench findings --format``: the scanned findings listed or exported, each with why its answer settles
nothing where it does. Apart from :mod:`workbench.findings`, which :mod:`workbench.settle` (through the probes)
reads: the export reads both."""
from __future__ import annotations

import json
from typing import Mapping

from .findings import Scan, table
from .settle import unsettled_answer


#: What makes a spreadsheet read a CSV cell as a formula (OWASP, "CSV Injection"): =, +, -, @, tab and carriage
#: return, and their full-width forms, which some spreadsheets fold into them.
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def neutralised(cell: object) -> object:
    """A CSV text cell that a spreadsheet would run as a formula, prefixed with ``'`` (OWASP's remedy: the cell is
    shown as text, the quote hidden); numbers and every other value as they are."""
    return "'" + cell if isinstance(cell, str) and cell.startswith(FORMULA_PREFIXES) else cell


#: ``workbench findings --format``: ``table`` is the listing it prints; ``csv`` and ``json`` export :func:`table`.
FORMATS = ("table", "csv", "json")


def export(s: Scan, fmt: str) -> str:
    """The scanned findings as ``workbench findings --format`` writes them (:data:`FORMATS`). ``table``: one line
    each, side by side, ``[settles nothing: WHY]`` before the summary of one whose answer settles nothing
    (:mod:`workbench.settle`). ``csv`` / ``json``: the flat table (:func:`workbench.findings.table`), as AIPerf's and ``vllm bench``'s
    exports are, with that reason as a ``settles_nothing`` column (empty where it may settle), so a verdict read
    outside the workbench keeps it; claims ``;``-joined in CSV; a missing value empty in CSV, ``null`` in JSON. A CSV
    text cell that starts as a formula does (:data:`FORMULA_PREFIXES`) gets a leading ``'`` (:func:`neutralised`)."""
    why = {str(path): "; ".join(unsettled_answer(f)) for path, f in s.findings}
    if fmt == "table":
        return _listing(s, why)
    df = table(s)
    df.insert(df.columns.get_loc("verdict") + 1, "settles_nothing", [why[p] for p in df["path"]])
    if fmt == "csv":
        df["claims"] = df["claims"].map(";".join)
        text = df.select_dtypes(include=["object", "string"]).columns  # a summary, a note: text a finding carries
        df[text] = df[text].map(neutralised)
        df.columns = [neutralised(c) for c in df.columns]
        return df.to_csv(index=False)
    records = df.astype(object).where(df.notna(), None).to_dict(orient="records")
    return json.dumps(records, indent=2, default=str) + "\n"


def _listing(s: Scan, why: Mapping[str, str]) -> str:
    if not s.findings:
        return "no findings\n"
    rows = sorted(s.findings, key=lambda pf: (pf[1].probe, pf[1].engine, pf[1].created))
    w = max(len(f.probe) for _, f in rows)
    return "".join(f"{f.probe:<{w}}  {f.engine:<8} {f.engine_version or '-':<10} {f.verdict:<12} {f.created}  "
                   + (f"[settles nothing: {why[str(path)]}] " if why[str(path)] else "") + f"{f.summary}\n"
                   for path, f in rows)
