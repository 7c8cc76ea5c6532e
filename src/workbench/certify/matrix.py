"""The certification matrix: what every cell publishes, read from a run's findings.

"Every cell publishes: hardware topology and interconnect; backend/runtime and version; model family, model digest,
quantization, KV precision; context tiers tested; prefill/first-output p50/p90/p95; decode p50/p90/p95; end-to-end
contenox-runtime p50/p90/p95; quality smoke result; dense or baseline comparison; unsupported modes." (contenox/runtime
``2bfdc1f5``, ``specialization-cells-blueprint.md``, "Certification Matrix").

A cell is the source's tuple (backend + topology + model + quant/KV profile + context tier + workload), so a row here
is one engine on one model: the runs of two models never share a row, and a comparison between rows of two models
reads "not comparable" with the difference named (:func:`.integrity.comparable`). Its figures:

- **prefill / first output** and **decode**: the gates' cold timed rows (``gates.long_context``) of that engine's
  arm at its largest tier, p50/p90/p95 over every run of the whole ladder with the same identity, pooled across runs
  of ``workbench certify gates`` into one findings folder, the run count beside;
- **end to end**: the agentic loop's loop time (``loop.<arm>``) over repeated runs of the whole trace. No
  contenox-runtime drove it, so it is the engine's end to end as a raw backend control, and says so; the eval table's
  request latency (``evaltable.prefix_caching``: AIPerf's p50 per repeat) for a served backend where the loop has none;
- **quality smoke**: the newest ``quality.smoke`` finding of the cell, else the gates' A2 rows on the cell's model;
  without one the row's throughput makes no claim (:func:`.integrity.throughput_words`);
- **baseline**: the gates' G2/G3 ratios and the loop gate's speed-up over the best llama.cpp arm (the baseline's
  own rows say they are it);
- **unsupported modes**: the mechanisms the engine lacks, as its cell described them in a probe's finding.

TensorRT-LLM's rows read not-run with the command for a GPU machine until a run on one adds its findings.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from .. import cells as _cells
from .. import claims, metrics
from ..files import write_output
from . import classes
from .integrity import Identity, Percentiles, comparable, result_class, throughput_words

SCHEMA = "workbench.certification/1"
ENGINES = ("llamacpp", "llamacpp-server", "vllm", "vllm-server", "trtllm", "trtllm-serve")
"""The matrix's backends, in-process then served, the claims' subject last."""
BASELINE_ENGINE = "llamacpp"  # what the gates compare with (in-process and served alike: cells.runs)
NOT_RUN_COMMAND = {"trtllm": claims.GATES_RUN,
                   "trtllm-serve": "workbench evaltable --backend trtllm-serve --model HF_DIR --out runs/evaltable"}
Found = Sequence[tuple[Path, Any]]


@dataclass(frozen=True)
class Figure:
    """One p50/p90/p95 figure of a cell: the figure, where it came from, and its class."""

    what: str  # e.g. "first output at 32768 tokens"
    p: Percentiles | None
    source: str  # the findings it was read from
    unit: str = "s"

    def text(self) -> str:
        if self.p is None:
            return "—"
        return f"{self.what}: {self.p.text(lambda v: metrics.render('ttft_cold_s', v))}"

    def as_dict(self) -> dict:
        return {"what": self.what, "source": self.source, "unit": self.unit,
                **(self.p.as_dict() if self.p else {"p50": None, "p90": None, "p95": None, "runs": 0})}


@dataclass
class Cell:
    """One row of the matrix: one engine on one model."""

    engine: str
    model: str
    status: str = "measured"  # measured | not-run
    reason: str = ""
    command: str | None = None  # what measures a not-run row on a machine that can
    version: str | None = None
    topology: str = ""
    digest: str | None = None
    quantization: set[str] = field(default_factory=set)
    kv_precision: set[str] = field(default_factory=set)
    tiers: set[int] = field(default_factory=set)
    first_output: Figure | None = None
    prefill: Figure | None = None
    decode: Figure | None = None
    end_to_end: list[Figure] = field(default_factory=list)  # one per loop arm (a configuration) of this engine
    quality: str = "not-run"
    quality_said: str = "no quality smoke of this cell in this run"
    baseline: list[str] = field(default_factory=list)
    unsupported: set[str] = field(default_factory=set)
    classes: set[str] = field(default_factory=set)
    workloads: set[str] = field(default_factory=set)  # the loop's workloads behind its end-to-end figures

    def identity(self) -> Identity:
        """The same-model rule's fields this row records (its end-to-end figures' workload as the prompt set)."""
        return Identity(model=self.model, digest=self.digest, quantization=", ".join(sorted(self.quantization)) or None,
                        prompt_set="; ".join(sorted(self.workloads)) or None, device=self.topology or None)

    @property
    def result_class(self) -> str:
        if self.status == "not-run":
            return classes.ResultClass.FAILED.value
        got = self.classes - {classes.ResultClass.FAILED.value}
        return " + ".join(sorted(got)) or classes.ResultClass.RAW.value

    def as_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k not in ("first_output", "prefill", "decode", "end_to_end")}
        d |= {k: sorted(v) for k, v in d.items() if isinstance(v, set)}
        for k in ("first_output", "prefill", "decode"):
            f = getattr(self, k)
            d[k] = f.as_dict() if f else None
        d["end_to_end"] = [f.as_dict() for f in self.end_to_end]
        d["result_class"] = self.result_class
        d["throughput_claim"] = throughput_words(self.quality if self.quality != "not-run" else None,
                                                 "" if self.quality != "not-run" else self.quality_said)
        return d


def _model(f: Any) -> str:
    """The model's name as the finding recorded it, else its spec's (a synthetic spec's name is computed from it, as
    :func:`workbench.models.resolve` names it, without writing the model)."""
    name = (f.environment.get("model") or {}).get("name")
    if name:
        return name
    spec = str(f.params.get("model") or "—")
    if spec.startswith("synthetic"):
        from ..models.specs import ModelSpecError, parse_synthetic, short

        try:
            return f"synthetic-{short(parse_synthetic(spec).spec)}"
        except ModelSpecError:
            return spec
    return spec


def _topology(f: Any) -> str:
    hw = f.environment.get("hardware") or {}
    gpu = (hw.get("gpu") or {}).get("devices") or []
    if gpu:
        return f"{len(gpu)} × {gpu[0].get('name', 'GPU')}; interconnect not read (one process, one device each)"
    cpu = hw.get("cpu") or {}
    return f"{cpu.get('model') or hw.get('summary') or 'CPU'} ({cpu.get('cores', '?')} cores), no GPU: no interconnect"


class _Build:
    """The matrix's cells, filled finding by finding."""

    def __init__(self) -> None:
        self.cells: dict[tuple[str, str], Cell] = {}
        self.timed: dict[tuple[str, str], list[dict]] = {}
        self.loops: dict[tuple[str, str, str], list[float]] = {}  # (engine, model, arm): a configuration's runs
        self.latency: dict[tuple[str, str], list[float]] = {}

    def cell(self, engine: str, model: str, f: Any, version: str | None = None, figures: bool = True) -> Cell:
        """The cell of (engine, model); ``f`` fills what it says of that engine (another engine's finding, e.g. a
        gates run's baseline rows, gives only its run's class and ``version``, what its rows recorded). ``figures``:
        ``f`` publishes the row's figures, so its class is the row's (the quality smoke's is not)."""
        c = self.cells.setdefault((engine, model), Cell(engine, model))
        if f is not None and f.verdict != "not-run" and engine != f.engine:
            c.version = c.version or version
            c.topology = c.topology or _topology(f)
        elif f is not None and f.verdict != "not-run":
            c.version = c.version or f.engine_version
            c.topology = c.topology or _topology(f)
            c.digest = c.digest or (f.environment.get("model") or {}).get("sha256")
        if f is not None and f.verdict != "not-run" and figures:
            c.classes.add(result_class(f)[0])
            absent = ((f.environment.get("cell") or {}).get("absent") or {})
            c.unsupported |= set(absent)
        return c

    def gates(self, f: Any) -> None:
        ids = (f.environment.get("gates") or {}).get("identities") or {}
        for r in f.evidence.get("rows") or []:
            engine = r.get("engine") or f.engine
            ident = ids.get(r.get("arm")) or {}
            model = ident.get("model") or _model(f)
            c = self.cell(engine, model, f, ident.get("engine_version"))
            c.digest = c.digest or ident.get("digest")
            q = ident.get("quantization")
            if q:
                c.quantization.add(q)
            if r.get("kv"):
                c.kv_precision.add(str(r["kv"]))
            if r.get("kind") == "serve" and r.get("served"):
                c.tiers.add(int(r["tier"]))
            elif r.get("kind") == "timed" and r.get("served"):
                c.tiers.add(int(r["tier"]))
                self.timed.setdefault((engine, model), []).append(r)
            elif r.get("kind") == "a2" and c.quality == "not-run" and r.get("equal") is not None:
                c.quality = "passed" if r.get("equal") else "failed"
                c.quality_said = f"A2 in the gates run: {r.get('said') or ''}".strip()
        if f.verdict != "not-run":
            cand = self.cell(f.engine, _model(f), f)
            for cid in (claims.GATES[1], claims.GATES[2]):
                reason = f.claim_reasons.get(cid) or ""
                cand.baseline.append(f"{claims.get(cid).match}: {reason[:240]}")

    def loop(self, f: Any) -> None:
        if f.probe == "loop.gate":
            if f.verdict != "not-run":
                c = self.cell(f.engine, _model(f), f)
                c.baseline.append(f"G4 (loop): {f.summary[:240]}")
            return
        c = self.cell(f.engine, _model(f), f)
        t = (f.metrics.get("loop_time_s") or {}).get("value")
        if t is not None:
            arm = str(f.params.get("arm") or f.probe.split(".", 1)[-1])
            self.loops.setdefault((f.engine, _model(f), arm), []).append(float(t))
            c.tiers.add(int(f.params.get("context_tokens") or 0) or 0)
            w = f.environment.get("loop") or {}
            c.workloads.add(f"{w.get('trace', '?')} ({w.get('turns', '?')} turns, {str(w.get('sha256') or '')[:12]})")

    def evaltable(self, f: Any) -> None:
        c = self.cell(f.engine, _model(f), f)
        for r in f.evidence.get("rows") or []:
            if r.get("kind") == "cell" and r.get("ttft_s") is not None:
                self.latency.setdefault((f.engine, _model(f)), []).append(float(r["ttft_s"]))
        if f.verdict == "not-run":
            c.status, c.reason = "not-run", f.reason or f.summary

    def quality(self, f: Any) -> None:
        c = self.cell(f.engine, _model(f), f, figures=False)
        if f.verdict == "not-run":
            return
        c.quality = {"confirmed": "passed", "refuted": "failed"}.get(f.verdict, "not-run")
        c.quality_said = f.summary


def _against_baseline(c: Cell, cells: Iterable[Cell]) -> list[str]:
    """Each llama.cpp row with end-to-end figures, as a comparison with ``c``'s: the same-model rule on what both
    recorded; comparable ones are compared where the loop compared them (its gate, one model, one run), the others
    read "not comparable" with the difference."""
    out = []
    for base in cells:
        if _cells.runs(base.engine) != BASELINE_ENGINE or not base.end_to_end:
            continue
        got = comparable((c.result_class, c.identity()), (base.result_class, base.identity()))
        out.append(f"end to end against {base.engine} on {base.model}: "
                   + ("comparable: the loop's own speed-up over its best llama.cpp arm (G4)" if got else got.words))
    return out


def _newest_first(found: Found) -> list[Any]:
    return [f for _, f in sorted(found, key=lambda pf: (pf[1].created, pf[1].id), reverse=True)]


def build(found: Found) -> list[Cell]:
    """The matrix of the findings in ``found``: one row per (engine, model) that ran, every engine of
    :data:`ENGINES` with a row (not-run, with why and the command, where none of its findings ran)."""
    b = _Build()
    not_run: dict[str, str] = {}
    for f in _newest_first(found):
        head = f.probe.split(".", 1)[0]
        if f.verdict == "not-run":
            not_run.setdefault(f.engine, f.reason or f.summary)
            continue
        {"gates": b.gates, "loop": b.loop, "evaltable": b.evaltable, "quality": b.quality}.get(
            head, lambda f: b.cell(f.engine, _model(f), f))(f)
    _figures(b)
    measured = {c.engine for c in b.cells.values() if c.status == "measured"}
    for c in b.cells.values():
        if _cells.runs(c.engine) == BASELINE_ENGINE:
            c.baseline = c.baseline or ["the baseline itself (llama.cpp)"]
        elif c.end_to_end:
            c.baseline += _against_baseline(c, b.cells.values())
    cells = [c for c in b.cells.values() if c.status == "measured" or c.engine not in measured]
    cells += [Cell(engine, "—", "not-run", not_run.get(engine) or "no finding of this engine in this run",
                   NOT_RUN_COMMAND.get(engine)) for engine in ENGINES if not any(c.engine == engine for c in cells)]
    order = {e: i for i, e in enumerate(ENGINES)}
    return sorted(cells, key=lambda c: (order.get(c.engine, len(order)), c.model))


def _figures(b: _Build) -> None:
    """Each cell's p50/p90/p95 figures over its runs: the gates' cold rows at its top tier, the loop's time per arm,
    the eval table's TTFT where the gates gave none."""
    for (engine, model), rows in b.timed.items():
        c = b.cells[(engine, model)]
        top = max(int(r["tier"]) for r in rows)
        at = [r for r in rows if int(r["tier"]) == top]
        src = "gates.long_context, cold timed rows"
        c.first_output = Figure(f"first output at {top} tokens", Percentiles.of(r.get("first_output_s") for r in at), src)
        c.prefill = Figure(f"prefill at {top} tokens", Percentiles.of(r.get("prefill_s") for r in at), src)
        c.decode = Figure(f"decode per token at {top} tokens", Percentiles.of(r.get("decode_per_token_s") for r in at), src)
    for (engine, model, arm), times in sorted(b.loops.items()):
        b.cells[(engine, model)].end_to_end.append(Figure(
            f"agentic loop time, arm {arm} (raw backend, not contenox-runtime)", Percentiles.of(times),
            f"loop.{arm}, one value per run of the whole trace"))
    for key, ttft in b.latency.items():
        c = b.cells[key]
        c.first_output = c.first_output or Figure("TTFT p50 under load (AIPerf)", Percentiles.of(ttft),
                                                  "evaltable.prefix_caching, one value per AIPerf run")


HEADS = ("backend", "version", "topology", "model", "digest", "quantization", "KV precision", "context tiers",
         "prefill / first output p50 · p90 · p95", "decode p50 · p90 · p95",
         "end to end p50 · p90 · p95 (contenox-runtime: none)", "quality smoke", "baseline comparison",
         "unsupported modes", "result class")


def text_row(c: Cell, reasons: bool = True, where: str = "the Verification log") -> list[str]:
    """A row's cells as text under :data:`HEADS`; ``reasons=False``: a not-run row names its command but not its
    reason, which the page says once per engine elsewhere (``where``: the blueprint's Verification log)."""
    if c.status == "not-run":
        said = f"not-run: {c.reason}" if reasons else f"not-run (why: {where})"
        said += f" · on a GPU: `{c.command}`" if c.command else ""
        return [c.engine, "—", "—", c.model, "—", "—", "—", "—", said, "—", "—", "—", "—", "—", c.result_class]
    figs = "; ".join(f.text() for f in (c.prefill, c.first_output) if f) or "—"
    quality = f"{c.quality}: {c.quality_said}" if c.quality != "not-run" else throughput_words(None, c.quality_said)
    return [c.engine, c.version or "—", c.topology or "—", c.model, (c.digest or "—")[:16],
            ", ".join(sorted(c.quantization)) or "—", ", ".join(sorted(c.kv_precision)) or "—",
            ", ".join(str(t) for t in sorted(t for t in c.tiers if t)) or "—", figs,
            c.decode.text() if c.decode else "—", "; ".join(f.text() for f in c.end_to_end) or "—", quality,
            " · ".join(c.baseline) or "—", ", ".join(sorted(c.unsupported)) or "—", c.result_class]


def document(cells: Iterable[Cell]) -> dict:
    return {"schema": SCHEMA, "heads": list(HEADS), "rows": [c.as_dict() for c in cells],
            "notes": ["a row is one engine on one model; rows of two models are never compared",
                      "figures are p50 · p90 · p95 over repeated runs of the whole workload, the run count beside",
                      "no contenox-runtime drove any row: every measured row is raw_backend_control or microbenchmark"]}


def csv_text(cells: Iterable[Cell]) -> str:
    """One CSV line per cell and loop arm (a cell's end-to-end figure is its arms', one each): the flat fields, each
    figure's p50/p90/p95 and run count in columns of its own."""
    out = io.StringIO()
    rows = []
    for c in cells:
        d = c.as_dict()
        flat = {k: (", ".join(map(str, v)) if isinstance(v, list) else v) for k, v in d.items()
                if not isinstance(v, dict) and k not in ("first_output", "prefill", "decode", "end_to_end")}
        for k in ("prefill", "first_output", "decode"):
            fig = d[k] or {}
            flat |= {f"{k}_what": fig.get("what"), **{f"{k}_{p}": fig.get(p) for p in ("p50", "p90", "p95", "runs")}}
        for fig in d["end_to_end"] or [{}]:  # one line per loop arm of the cell (its configuration)
            rows.append(flat | {"end_to_end_what": fig.get("what"),
                                **{f"end_to_end_{p}": fig.get(p) for p in ("p50", "p90", "p95", "runs")}})
    keys = list(dict.fromkeys(k for r in rows for k in r))
    w = csv.DictWriter(out, fieldnames=keys, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return out.getvalue()


def markdown(cells: Sequence[Cell], reasons: bool = True) -> list[str]:
    """The matrix as a Markdown table (the blueprint's: ``reasons=False``, :func:`text_row`)."""
    def esc(s: str) -> str:
        return " ".join(str(s).split()).replace("|", "\\|") or "—"

    lines = ["| " + " | ".join(HEADS) + " |", "| " + " | ".join("---" for _ in HEADS) + " |"]
    lines += ["| " + " | ".join(esc(x) for x in text_row(c, reasons)) + " |" for c in cells]
    return lines


def write(cells: Sequence[Cell], folder: Path) -> tuple[Path, Path]:
    """``certification.json`` and ``certification.csv`` in ``folder``; their paths."""
    return (write_output(folder / "certification.json", json.dumps(document(cells), indent=1) + "\n"),
            write_output(folder / "certification.csv", csv_text(cells)))


def in_run(out: Path, found: Found | None = None) -> list[Cell]:
    """The matrix of run folder ``out``'s findings."""
    from .. import findings

    return build(found if found is not None else findings.scan([out / "findings"]).findings)


__all__ = ["Cell", "ENGINES", "Figure", "HEADS", "SCHEMA", "build", "csv_text", "document", "in_run", "markdown",
           "text_row", "write"]

