"""The eval-backend table (seed 004): one row per backend × workload × concurrency, each metric the median over
repeats with its spread (min–max), written as JSON (``evaltable.json``) and Markdown (``evaltable.md``).

Metrics are the ones :mod:`workbench.metrics` declares (unit, source, description), rendered through it; TTFT
cold and cached come from AIPerf's per-request records (:mod:`.split`: by the server's cached tokens, or by
position where it reports none, which the row's ``split`` says). The seed's own expectations stand beside the
measured rows, labelled as its claims on a GPU. A row whose server stopped is ``crashed`` with the reason.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from .. import metrics
from ..certify.classes import ResultClass
from ..certify.integrity import Percentiles
from ..files import write_output
from .exports import FIELDS, CellExport
from .split import ENGINE, POSITION, split

SCHEMA = "workbench.evaltable/2"  # 2: TTFT cold and cached, the rows' split, crashed rows
SPLIT_COLUMNS = ("load_ttft_cold_p50_s", "load_ttft_cached_p50_s")
COLUMNS = (*FIELDS, *SPLIT_COLUMNS)

SEED_CLAIMS = (
    ("Ollama", "~80 tok/s", "~2 s"),
    ("vLLM, prefix caching", "~200 tok/s", "~0.3 s"),
    ("TensorRT-LLM FP8", "~600+ tok/s", "~0.1 s"),
)
"""Seed 004's expected throughput and TTFT with a 1K prefix, on a GB10 GPU: its claims, never measured here."""


@dataclass(frozen=True)
class Spread:
    """A metric over a cell's repeats (whole AIPerf runs): the median, the least and the greatest, and every repeat's
    value; its p50/p90/p95 over them (benchmark integrity's figures) from :meth:`percentiles`."""

    median: float
    low: float
    high: float
    runs: tuple[float, ...]

    @classmethod
    def of(cls, runs: Sequence[float | None]) -> "Spread | None":
        """Over the repeats that have a value (a run with no cached request has no cached TTFT); None if none."""
        got = [x for x in runs if x is not None]
        return cls(statistics.median(got), min(got), max(got), tuple(got)) if got else None

    def percentiles(self) -> Percentiles:
        return Percentiles.of(self.runs)


@dataclass(frozen=True)
class Row:
    """One table row: measured (``ok``, with each metric's :class:`Spread`, None where no repeat has it), or
    ``not-run`` or ``crashed`` with its reason."""

    backend: str
    workload: str
    concurrency: int | None
    status: str  # ok | not-run | crashed
    reason: str = ""
    values: Mapping[str, Spread | None] = field(default_factory=dict)
    requests: int = 0  # per repeat
    artifacts: tuple[str, ...] = ()  # each repeat's AIPerf folder, relative to the table
    split: str = ""  # how TTFT was split into cold and cached: split.ENGINE or split.POSITION
    # benchmark integrity's class: every backend driven as contenox v1.0.0's vllm backend is, by AIPerf, not by a
    # contenox runtime (a row that measured nothing: failed_no_performance_claim)
    result_class: str = ResultClass.RAW.value

    def __post_init__(self) -> None:
        if self.status != "ok":  # nothing measured: a failed run, no performance claim
            object.__setattr__(self, "result_class", ResultClass.FAILED.value)

    @classmethod
    def measured(cls, backend: str, workload: str, concurrency: int, runs: Sequence[CellExport], root: Path,
                 first: bool = True) -> "Row":
        """One cell's row over its repeats; ``first``: its phase ran first in each AIPerf run (a later phase finds
        the prefix its run's first phase computed: split by position, none of its requests is cold)."""
        values = {tag: Spread.of([r.values[tag] for r in runs]) for tag in FIELDS}
        splits = [split(r.requests, concurrency if first else 0) for r in runs]
        values |= {tag: Spread.of([s.p50(which) for s in splits])
                   for tag, which in zip(SPLIT_COLUMNS, ("cold", "cached"))}
        return cls(backend, workload, concurrency, "ok", values=values, requests=runs[0].completed,
                   artifacts=tuple(str(r.folder.relative_to(root)) for r in runs),
                   split=ENGINE if all(s.source == ENGINE for s in splits) else POSITION)


def write(rows: Sequence[Row], out: Path, setup: Mapping[str, object], checks: Sequence[str] = ()
          ) -> tuple[Path, Path]:
    """``evaltable.json`` and ``evaltable.md`` in ``out``, with the TTFT cross-checks' words (``checks``,
    :mod:`.crosscheck`); their paths."""
    doc = {"schema": SCHEMA, "setup": dict(setup), "ttft_crosscheck": list(checks),
           "metrics": {t: {"header": metrics.get(t).header, "unit": metrics.get(t).unit.value,
                           "source": metrics.get(t).source, "description": metrics.get(t).description}
                       for t in COLUMNS},
           "rows": [asdict(r) for r in rows],
           "seed_claims": [dict(zip(("backend", "output_tokens_per_s", "ttft_1k_prefix"), c)) for c in SEED_CLAIMS]}
    return (write_output(out / "evaltable.json", json.dumps(doc, indent=1) + "\n"),
            write_output(out / "evaltable.md", markdown(rows, setup, checks)))


def _cell(tag: str, s: Spread | None) -> str:
    """p50 · p90 · p95 over the runs that have it, with the run count (benchmark integrity's figures), or that one
    run had it (no spread to show)."""
    if s is None:
        return "—"
    if len(s.runs) == 1:
        return f"{metrics.render(tag, s.median)} (1 run)"
    p = s.percentiles()
    return (f"p50 {metrics.render(tag, p.p50)} · p90 {metrics.render(tag, p.p90)} · p95 {metrics.render(tag, p.p95)} "
            f"({len(s.runs)} runs)")


def spread_words(setup: Mapping[str, object]) -> str:
    """How the table's figures read, saying plainly where a cell ran once and so has no spread."""
    said = ("Each figure: p50 · p90 · p95 over the cell's repeats (whole AIPerf runs; numpy's linear interpolation), "
            "with the run count; every row raw_backend_control (OpenAI chat completions streamed with "
            "stream_options.include_usage, cached tokens read: contenox v1.0.0's vllm backend shape, driven by AIPerf, "
            "not by a contenox runtime); a row's throughput makes no claim without its quality smoke "
            "(workbench certify quality)")
    if setup.get("repeats") == 1:
        return said + "; this table ran 1 repeat per cell, so each figure is one run's, \"(1 run)\": no spread"
    return said + "; \"(1 run)\" where only one run had the figure: no spread"


_SPLIT_WORDS = {ENGINE: "engine: the server's cached tokens (at least half the prompt: cached)",
                POSITION: "workbench: the first `concurrency` requests of each run's first phase cold, the rest cached (computed here, "
                          "the server reported no cached tokens)"}


def heads() -> list[str]:
    """The table's column heads, as :func:`text_rows` fills them."""
    return ["backend", "workload", "concurrency", *(metrics.get(t).header for t in COLUMNS), "cold/cached split by",
            "result class"]


def text_rows(rows: Sequence[Row]) -> list[list[str]]:
    """Each row as the text of its cells under :func:`heads` (a row not measured: its status and reason)."""
    out = []
    for r in rows:
        if r.status == "ok":
            cells = [_cell(t, r.values[t]) for t in COLUMNS] + [_SPLIT_WORDS[r.split], r.result_class]
        else:
            cells = [f"{r.status}: {r.reason}"] + [""] * len(COLUMNS) + [ResultClass.FAILED.value]
        out.append([r.backend, r.workload, str(r.concurrency or "—"), *cells])
    return out


@dataclass(frozen=True)
class Shown:
    """One cell of the table as the report lays it out: its text and the columns it spans."""

    text: str
    span: int = 1


def shown_rows(rows: Sequence[Row]) -> list[list[Shown]]:
    """Each row's cells under :func:`heads` as the report lays them out: a measured row one cell a column; a row
    not measured its status and reason across the metric and split columns (it has nothing to put in them: eleven
    empty columns squeezed the reason into one), its result class in its own column. Decided from the row's status,
    never guessed from which cells are empty (the class column, filled on every row, defeated that guess)."""
    out = []
    for r, cells in zip(rows, text_rows(rows)):
        if r.status == "ok":
            out.append([Shown(c) for c in cells])
        else:
            out.append([*(Shown(c) for c in cells[:3]), Shown(cells[3], len(COLUMNS) + 1), Shown(cells[-1])])
    return out


def read(path: Path) -> tuple[dict, list[Row]]:
    """A written ``evaltable.json``: its document and its rows."""
    doc = json.loads(path.read_text())

    def spread(v: dict | None) -> Spread | None:
        return Spread(v["median"], v["low"], v["high"], tuple(v["runs"])) if v else None

    return doc, [Row(**{**r, "values": {t: spread(v) for t, v in r["values"].items()},
                        "artifacts": tuple(r["artifacts"])}) for r in doc["rows"]]


def in_run(run: Path) -> list[tuple[Path, dict, list[list[Shown]]]]:
    """The tables a batch wrote in run folder ``run`` (``evaltable/ENGINE/evaltable.json``, by
    ``notebooks/80_evaltable``), each with its setup and rows as the report lays them out (:func:`shown_rows`); one
    that cannot be read is left out (the executed notebook says why)."""
    out = []
    for path in sorted(run.glob("evaltable/*/evaltable.json")):
        try:
            doc, rows = read(path)
            if doc.get("schema") != SCHEMA:
                continue
            checks = {f"TTFT cross-check {i + 1}" if i else "TTFT cross-check": str(c)
                      for i, c in enumerate(doc.get("ttft_crosscheck") or [])}
            out.append((path, {**doc.get("setup", {}), **checks}, shown_rows(rows)))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return out


def markdown(rows: Sequence[Row], setup: Mapping[str, object], checks: Sequence[str] = ()) -> str:
    lines = ["# Eval-backend table", "", spread_words(setup) + ". " + "; ".join(f"{k}: {v}" for k, v in setup.items()),
             "",
             "| " + " | ".join(heads()) + " |", "|---" * len(heads()) + "|"]
    lines += ["| " + " | ".join(cells) + " |" for cells in text_rows(rows)]
    lines += ["", "Metrics (units and sources: workbench.metrics):", ""]
    lines += [f"- **{metrics.get(t).header}** ({metrics.get(t).unit.value}, {metrics.get(t).source}): "
              f"{metrics.get(t).description}" for t in COLUMNS]
    lines.append("- **cold/cached split by**: " + "; or ".join(_SPLIT_WORDS.values()))
    if checks:
        lines += ["", "Cross-check of AIPerf's TTFT against the workbench's served cell on the same requests "
                  "(workbench-timed: it settles nothing):", ""] + [f"- {c}" for c in checks]
    lines += ["", "Seed 004's expectations with a 1K prefix, its claims on a GB10 GPU (not measured here):", "",
              "| backend | output tokens/s | TTFT (1K prefix) |", "|---|---|---|"]
    lines += [f"| {b} | {tps} | {ttft} |" for b, tps, ttft in SEED_CLAIMS]
    return "\n".join(lines) + "\n"
