"""The certification matrix: what every cell publishes, read from a run's findings.

"Every cell publishes: hardware topology and interconnect; backend/runtime and version; model family, model digest,
quantization, KV precision; context tiers tested; prefill/first-output p50/p90/p95; decode p50/p90/p95; end-to-end
contenox-runtime p50/p90/p95; quality smoke result; dense or baseline comparison; unsupported modes." (contenox/runtime
``2bfdc1f5``, ``specialization-cells-blueprint.md``, "Certification Matrix").

A cell is the source's tuple (backend + topology + model + quant/KV profile + context tier + workload), so a row here
is one engine on one model with one KV precision on one machine: the runs of two models, two KV profiles or two
machines never share a row, and a comparison between rows of two models reads "not comparable" with the difference
named (:func:`.integrity.comparable`, on the classes of the findings behind the figures compared). Its figures, each
p50/p90/p95 over runs counted as runs (never pooled across workloads, profiles or machines):

- **prefill / first output** and **decode**: the gates' cold timed rows (``gates.long_context``) of that engine's
  arm at its largest tier, one value per run of the whole ladder, pooled across runs of ``workbench certify gates``
  into one findings folder only where the arm's identity (:class:`.integrity.Identity`: output cap, runtime profile,
  prompt set, device, …) is the newest run's; runs of another identity are named beside, not pooled;
- **end to end**: the agentic loop's loop time (``loop.<arm>``), one value per run of the whole trace, per arm and
  workload (trace, turns, digest). No contenox-runtime drove it, so it is the engine's end to end as a raw backend
  control, and says so; the eval table's TTFT (``evaltable.prefix_caching``: AIPerf's p50 of each repeat) for a served
  backend where the gates gave none, per workload and concurrency, its repeats counted as runs;
- **quality smoke**: the newest ``quality.smoke`` finding of the cell, else the newest gates' A2 rows of the cell's
  own arm (its KV profile's); without one the row's throughput makes no claim (:func:`.integrity.throughput_words`);
- **baseline**: the gates' G2/G3 ratios and the loop gate's speed-up over the best llama.cpp arm (the baseline's
  own rows say they are it);
- **unsupported modes**: the mechanisms the engine lacks, as its cell described them in a probe's finding.

A finding whose verdict cannot be re-checked at all (made on a test double, dated in the future, of a rule this
workbench does not declare, or whose recorded verdict its own rows do not re-derive: :mod:`workbench.settle`) fills
no row; the export names it and why (:func:`left_out`).

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
    """One p50/p90/p95 figure of a cell: the figure, where it came from, and the classes of the findings behind it."""

    what: str  # e.g. "first output at 32768 tokens"
    p: Percentiles | None
    source: str  # the findings it was read from
    unit: str = "s"
    classes: frozenset[str] = frozenset()

    def text(self) -> str:
        if self.p is None:
            return "—"
        return f"{self.what}: {self.p.text(lambda v: metrics.render('ttft_cold_s', v))}"

    def as_dict(self) -> dict:
        return {"what": self.what, "source": self.source, "unit": self.unit, "classes": sorted(self.classes),
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
    not_pooled: list[str] = field(default_factory=list)  # runs of another identity, named beside, never pooled
    quality_from_smoke: bool = False  # the quality column is a quality.smoke finding's (not a gates run's A2)

    def identity(self) -> Identity:
        """The same-model rule's fields this row records (its end-to-end figures' workload as the prompt set)."""
        return Identity(model=self.model, digest=self.digest, quantization=", ".join(sorted(self.quantization)) or None,
                        kv_precision=", ".join(sorted(self.kv_precision)) or None,
                        prompt_set="; ".join(sorted(self.workloads)) or None, device=self.topology or None)

    @property
    def result_class(self) -> str:
        if self.status == "not-run":
            return classes.ResultClass.FAILED.value
        got = self.classes - {classes.ResultClass.FAILED.value}
        return " + ".join(sorted(got)) or classes.ResultClass.RAW.value

    def as_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items()
             if k not in ("first_output", "prefill", "decode", "end_to_end", "quality_from_smoke")}
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


def _kv(name: Any) -> str:
    """A KV profile as the row names it (:data:`.long_context.KV_NAMES`' spelling), ``engine default`` where the run
    chose none."""
    from .long_context import KV_NAMES

    return KV_NAMES.get(str(name), str(name)) if name else "engine default"


class _Build:
    """The matrix's cells, filled finding by finding, newest first: a row is (engine, model, KV profile, machine)."""

    def __init__(self) -> None:
        self.cells: dict[tuple[str, str, str, str], Cell] = {}
        self.timed: dict[tuple, list[tuple[str, dict, str]]] = {}  # row -> (identity key, row, finding id)
        self.loops: dict[tuple, dict[tuple[str, str], list[tuple[float, str]]]] = {}  # row -> (arm, workload) -> runs
        self.latency: dict[tuple, dict[tuple[str, int], dict[str, float]]] = {}  # row -> (workload, c) -> repeat: s
        self.found_classes: dict[tuple, set[str]] = {}

    def cell(self, engine: str, model: str, kv: str, f: Any, version: str | None = None, figures: bool = True) -> Cell:
        """The cell of (engine, model, KV profile, ``f``'s machine); ``f`` fills what it says of that engine (another
        engine's finding, e.g. a gates run's baseline rows, gives only its run's class and ``version``, what its rows
        recorded). ``figures``: ``f`` publishes the row's figures, so its class is the row's (the quality smoke's is
        not)."""
        key = (engine, model, kv, _topology(f))
        c = self.cells.setdefault(key, Cell(engine, model, topology=key[3]))
        c.kv_precision.add(kv)
        if engine != f.engine:
            c.version = c.version or version
        else:
            c.version = c.version or f.engine_version
            c.digest = c.digest or (f.environment.get("model") or {}).get("sha256")
        if figures:
            c.classes.add(result_class(f)[0])
            c.unsupported |= set((f.environment.get("cell") or {}).get("absent") or {})
        return c

    def gates(self, f: Any) -> None:
        ids = (f.environment.get("gates") or {}).get("identities") or {}
        rows = f.evidence.get("rows") or []
        arm_kv = {r["arm"]: r["kv"] for r in rows if r.get("kv") and r.get("arm")}  # an arm's rows that say it
        for r in rows:
            engine = r.get("engine") or f.engine
            ident = ids.get(r.get("arm")) or {}
            model = ident.get("model") or _model(f)
            kv = _kv(ident.get("kv") or r.get("kv") or arm_kv.get(r.get("arm")))
            c = self.cell(engine, model, kv, f, ident.get("engine_version"))
            key = (engine, model, kv, _topology(f))
            c.digest = c.digest or ident.get("digest")
            if ident.get("quantization"):
                c.quantization.add(ident["quantization"])
            if r.get("kind") == "serve" and r.get("served"):
                c.tiers.add(int(r["tier"]))
            elif r.get("kind") == "timed" and r.get("served"):
                c.tiers.add(int(r["tier"]))
                profile = json.dumps({k: v for k, v in ident.items() if k not in ("context", "engine_version")},
                                     sort_keys=True)
                self.timed.setdefault(key, []).append((profile, r, f.id))
                self.found_classes.setdefault(key, set()).add(result_class(f)[0])
            elif r.get("kind") == "a2" and c.quality == "not-run" and r.get("equal") is not None:
                c.quality = "passed" if r.get("status") == "passed" else "failed"
                c.quality_said = f"A2 in the gates run ({r.get('arm')}): {r.get('said') or ''}".strip()
        cand = self.cell(f.engine, _model(f), _kv((ids.get(f.engine) or {}).get("kv") or arm_kv.get(f.engine)), f)
        for cid in (claims.GATES[1], claims.GATES[2]):
            reason = f.claim_reasons.get(cid) or ""
            cand.baseline.append(f"{claims.get(cid).match}: {reason[:240]}")

    def loop(self, f: Any) -> None:
        kv = _kv((f.cell_options or {}).get("kv_type"))
        if f.probe == "loop.gate":
            self.cell(f.engine, _model(f), kv, f).baseline.append(f"G4 (loop): {f.summary[:240]}")
            return
        c = self.cell(f.engine, _model(f), kv, f)
        t = (f.metrics.get("loop_time_s") or {}).get("value")
        if t is not None:
            arm = str(f.params.get("arm") or f.probe.split(".", 1)[-1])
            w = f.environment.get("loop") or {}
            workload = f"{w.get('trace', '?')} ({w.get('turns', '?')} turns, {str(w.get('sha256') or '')[:12]})"
            key = (f.engine, _model(f), kv, _topology(f))
            self.loops.setdefault(key, {}).setdefault((arm, workload), []).append((float(t), result_class(f)[0]))
            c.tiers.add(int(f.params.get("context_tokens") or 0) or 0)
            c.workloads.add(workload)

    def evaltable(self, f: Any) -> None:
        kv = _kv((f.cell_options or {}).get("kv_type"))
        self.cell(f.engine, _model(f), kv, f)
        key = (f.engine, _model(f), kv, _topology(f))
        for r in f.evidence.get("rows") or []:
            if r.get("kind") == "cell" and r.get("ttft_s") is not None:
                repeat = f"{f.id}/{str(r.get('run') or '').split('/')[0]}"  # one AIPerf run of every concurrency
                at = (str(r.get("workload") or "—"), int(r.get("concurrency") or 0))
                self.latency.setdefault(key, {}).setdefault(at, {}).setdefault(repeat, float(r["ttft_s"]))
        self.found_classes.setdefault(key, set()).add(result_class(f)[0])

    def quality(self, f: Any) -> None:
        c = self.cell(f.engine, _model(f), _kv((f.cell_options or {}).get("kv_type")), f, figures=False)
        if c.quality_from_smoke:  # newest first: the newest smoke of the cell stands
            return
        c.quality = {"confirmed": "passed", "refuted": "failed"}.get(f.verdict, "not-run")
        c.quality_said, c.quality_from_smoke = f.summary, True


def _e2e_classes(c: Cell) -> str:
    """The result class of the findings behind a row's end-to-end figures (what a comparison of them compares)."""
    return " + ".join(sorted({k for f in c.end_to_end for k in f.classes})) or c.result_class


def _against_baseline(c: Cell, cells: Iterable[Cell]) -> list[str]:
    """Each llama.cpp row with end-to-end figures, as a comparison with ``c``'s: the same-model rule on what both
    recorded, and the classes of the findings behind the figures compared (never the union of every finding of the
    row); comparable ones are compared where the loop compared them (its gate, one model, one run), the others read
    "not comparable" with the difference."""
    out = []
    for base in cells:
        if _cells.runs(base.engine) != BASELINE_ENGINE or not base.end_to_end:
            continue
        got = comparable((_e2e_classes(c), c.identity()), (_e2e_classes(base), base.identity()))
        out.append(f"end to end against {base.engine} on {base.model}: "
                   + ("comparable: the loop's own speed-up over its best llama.cpp arm (G4)" if got else got.words))
    return out


def _newest_first(found: Found) -> list[Any]:
    return [f for _, f in sorted(found, key=lambda pf: (pf[1].created, pf[1].id), reverse=True)]


REJECTS = ("dated", "declared", "double", "re-derived")
"""settle's checks whose failure means a finding's rows cannot be trusted as measured here (a test double, a date in
the future, a rule this workbench does not declare, a verdict its own rows do not re-derive); an exploratory or
off-target run's figures are still measured, and stand."""


def left_out(f: Any) -> str | None:
    """Why ``f`` fills no row of the matrix (:data:`REJECTS`, :mod:`workbench.settle`), or None."""
    import datetime as dt

    from .. import probes, settle

    now, declared = dt.datetime.now(dt.timezone.utc), probes.declared(f.probe)
    wrong_class = classes.problem(getattr(f, "result_class", None), f.verdict, f.environment)
    if wrong_class:
        return wrong_class
    for cid in dict.fromkeys(f.claims):
        try:
            claim = claims.get(cid)
        except KeyError:
            return f"it cites {cid}, a claim this workbench does not declare"
        answers = f.verdict_on(cid) in settle.ANSWERS
        for check in settle.RULES:
            if check.name in REJECTS and (answers or check.name in ("dated", "declared", "double")):
                why = check.why(f, claim, declared, now)
                if why and (check.name != "re-derived" or "decided again" in why or "cannot be read" in why):
                    return why
    return None


def build(found: Found, dropped: list[str] | None = None) -> list[Cell]:
    """The matrix of the findings in ``found``: one row per (engine, model, KV profile, machine) that ran, every engine
    of :data:`ENGINES` with a row (not-run, with why and the command, where none of its findings ran). A finding
    :func:`left_out` rejects fills no row; ``dropped`` collects each with why."""
    b = _Build()
    not_run: dict[str, str] = {}
    for f in _newest_first(found):
        head = f.probe.split(".", 1)[0]
        if f.verdict == "not-run":
            not_run.setdefault(f.engine, f.reason or f.summary)
            continue
        why = left_out(f)
        if why:
            if dropped is not None:
                dropped.append(f"{f.id} ({f.engine}, {f.probe}): {why}")
            continue
        {"gates": b.gates, "loop": b.loop, "evaltable": b.evaltable, "quality": b.quality}.get(
            head, lambda f: b.cell(f.engine, _model(f), _kv((f.cell_options or {}).get("kv_type")), f))(f)
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
    return sorted(cells, key=lambda c: (order.get(c.engine, len(order)), c.model, sorted(c.kv_precision), c.topology))


def _figures(b: _Build) -> None:
    """Each cell's p50/p90/p95 figures over its runs: the gates' cold rows at its top tier (the newest identity's
    runs only), the loop's time per arm and workload, the eval table's TTFT per workload and concurrency where the
    gates gave none."""
    for key, got in b.timed.items():
        c = b.cells[key]
        newest = got[0][0]  # newest first: the identity of the newest run
        rows = [r for profile, r, _ in got if profile == newest]
        others = {}
        for profile, r, fid in got:
            if profile != newest:
                others.setdefault(profile, set()).add((fid, r.get("run")))
        c.not_pooled += [f"{len(runs)} run(s) of another identity ({_profile_words(newest, p)}) not pooled"
                         for p, runs in others.items()]
        top = max(int(r["tier"]) for r in rows)
        at = [r for r in rows if int(r["tier"]) == top]
        src, cls = "gates.long_context, cold timed rows, one per run", frozenset(b.found_classes.get(key, ()))
        c.first_output = Figure(f"first output at {top} tokens", Percentiles.of(r.get("first_output_s") for r in at),
                                src, classes=cls)
        c.prefill = Figure(f"prefill at {top} tokens", Percentiles.of(r.get("prefill_s") for r in at), src, classes=cls)
        c.decode = Figure(f"decode per token at {top} tokens",
                          Percentiles.of(r.get("decode_per_token_s") for r in at), src, classes=cls)
    for key, arms in sorted(b.loops.items()):
        for (arm, workload), runs in sorted(arms.items()):
            b.cells[key].end_to_end.append(Figure(
                f"agentic loop time, arm {arm}, {workload} (raw backend, not contenox-runtime)",
                Percentiles.of(t for t, _ in runs), f"loop.{arm}, one value per run of the whole trace",
                classes=frozenset(k for _, k in runs)))
    for key, at in b.latency.items():
        c = b.cells[key]
        if c.first_output is None and at:
            (workload, conc), repeats = min(at.items(), key=lambda kv: (kv[0][1], kv[0][0]))
            c.first_output = Figure(f"TTFT p50 of each AIPerf run at concurrency {conc}, {workload}",
                                    Percentiles.of(repeats.values()),
                                    "evaltable.prefix_caching, one value per AIPerf run (repeat)",
                                    classes=frozenset(b.found_classes.get(key, ())))


def _profile_words(newest: str, other: str) -> str:
    """Where another identity differs from the newest, in words: ``output_cap 16``."""
    a, o = json.loads(newest), json.loads(other)
    return ", ".join(f"{k} {o.get(k)}" for k in sorted(set(a) | set(o)) if a.get(k) != o.get(k)) or "—"


HEADS = ("backend", "version", "topology", "model", "digest", "quantization", "KV precision", "context tiers",
         "prefill / first output p50 · p90 · p95", "decode p50 · p90 · p95",
         "end to end p50 · p90 · p95", "quality smoke", "baseline comparison",
         "unsupported modes", "result class")


def text_row(c: Cell, reasons: bool = True, where: str = "the Verification log") -> list[str]:
    """A row's cells as text under :data:`HEADS`; ``reasons=False``: a not-run row names its command but not its
    reason, which the page says once per engine elsewhere (``where``: the blueprint's Verification log)."""
    if c.status == "not-run":
        said = f"not-run: {c.reason}" if reasons else f"not-run (why: {where})"
        said += f" · on a GPU: `{c.command}`" if c.command else ""
        return [c.engine, "—", "—", c.model, "—", "—", "—", "—", said, "—", "—", "—", "—", "—", c.result_class]
    figs = "; ".join([*(f.text() for f in (c.prefill, c.first_output) if f), *c.not_pooled]) or "—"
    quality = f"{c.quality}: {c.quality_said}" if c.quality != "not-run" else throughput_words(None, c.quality_said)
    return [c.engine, c.version or "—", c.topology or "—", c.model, (c.digest or "—")[:16],
            ", ".join(sorted(c.quantization)) or "—", ", ".join(sorted(c.kv_precision)) or "—",
            ", ".join(str(t) for t in sorted(t for t in c.tiers if t)) or "—", figs,
            c.decode.text() if c.decode else "—", "; ".join(f.text() for f in c.end_to_end) or "—", quality,
            " · ".join(c.baseline) or "—", ", ".join(sorted(c.unsupported)) or "—", c.result_class]


def document(cells: Iterable[Cell], dropped: Sequence[str] = ()) -> dict:
    """The matrix as its JSON export; ``dropped``: the findings :func:`left_out` rejected, each with why."""
    cells = list(cells)
    return {"schema": SCHEMA, "heads": list(HEADS), "rows": [c.as_dict() for c in cells],
            "notes": ["a row is one engine on one model with one KV profile on one machine; rows of two models are "
                      "never compared",
                      "figures are p50 · p90 · p95 over runs of the whole workload counted as runs (never pooled "
                      "across workloads, identities or machines), the run count beside",
                      _product_note(cells), *(f"left out: {d}" for d in dropped)]}


def _product_note(cells: Iterable[Cell]) -> str:
    """Whether a contenox runtime drove any row, from the rows' own classes."""
    product = [f"{c.engine} on {c.model}" for c in cells if classes.ResultClass.PRODUCT.value in c.classes]
    if product:
        return f"contenox_product_path (a contenox runtime drove it): {', '.join(product)}"
    return "no row's findings name a contenox runtime that drove them: every measured row is raw_backend_control or " \
           "microbenchmark"


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


__all__ = ["Cell", "ENGINES", "Figure", "HEADS", "REJECTS", "SCHEMA", "build", "csv_text", "document", "in_run",
           "left_out", "markdown", "text_row", "write"]

