"""The run report (one self-contained offline HTML page per run folder) and the tables behind it.

The same tables feed the notebooks, so a verdict reads the same in JupyterLab, in ``report.html``
and in the blueprint: metrics always go through :func:`workbench.metrics.render`, and a claim's
status follows :mod:`workbench.standing`, the blueprint's rule: only the claim's subject engine
resolves it, other engines are references. The page leads with what the run found (a claims ×
engines matrix of verdicts, the subject first), then one line per engine that did not run (each
reason once; the full install text in one collapsible block) and the commands that resolve what is open.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import jinja2
import markupsafe
import pandas as pd

from . import claims as _claims
from . import cpu as _cpu
from . import compare as _compare
from . import findings as _findings
from . import metrics as _metrics
from . import plots
from .files import atomic_write
from . import notebook_html as _notebook_html
from . import panels as _panels
from . import reading as _reading
from . import standing as _standing
from .certify import integrity as _integrity
from .certify import matrix as _certification
from .evaltable import table as _evaltable
from .findings import Finding
from . import settle as _settle

if TYPE_CHECKING:
    from .manifest import Manifest, NotebookRun

Found = Sequence[tuple[Path, Finding]]


def metric_text(tag: str, value: object) -> str:
    """``metrics.render``, tolerating a tag this version does not declare (a finding from a newer one)."""
    try:
        return _metrics.render(tag, value)
    except KeyError:
        return str(value)


def metric_header(tag: str) -> str:
    m = _metrics.METRICS.get(tag)
    return m.header if m else tag


def metrics_frame(f: Finding) -> pd.DataFrame:
    """One row per metric of ``f``: header, rendered value, where it came from (engine, cell, derived), meaning."""
    return pd.DataFrame(
        [{"metric": metric_header(t), "value": metric_text(t, m["value"]), "source": m.get("source", "cell"),
          "meaning": _metrics.METRICS[t].description if t in _metrics.METRICS else ""} for t, m in f.metrics.items()],
        columns=["metric", "value", "source", "meaning"])


def model_name(f: Finding) -> str:
    return (f.environment.get("model") or {}).get("name") or str(f.params.get("model", ""))


def latest(found: Found) -> list[tuple[Path, Finding]]:
    """The newest finding per (probe, engine, engine version, model): what a run currently says."""
    best: dict[tuple, tuple[Path, Finding]] = {}
    for path, f in found:
        key = (f.probe, f.engine, f.engine_version, model_name(f))
        if key not in best or (f.created, f.id) > (best[key][1].created, best[key][1].id):
            best[key] = (path, f)
    return [best[k] for k in sorted(best, key=lambda k: tuple(str(x) for x in k))]


def verdict_frame(found: Found) -> pd.DataFrame:
    """The verdicts table: newest finding per probe/engine/version/model, metrics rendered."""
    checked = _settle.verified_by_path(found)
    rows = [{
        "probe": f.probe, "engine": f.engine, "engine_version": f.engine_version, "model": model_name(f),
        "verdict": f.verdict, "summary": _said_of(checked[(str(path), f.id)]),
        "metrics": "; ".join(f"{metric_header(t)} {metric_text(t, m['value'])}" for t, m in f.metrics.items()),
        "created": f.created, "id": f.id, "path": str(path), "result_class": _integrity.result_class(f)[0],
    } for path, f in latest(found)]
    return pd.DataFrame(rows, columns=["probe", "engine", "engine_version", "model", "verdict", "summary", "metrics",
                                       "created", "id", "path", "result_class"])


_STATUS_COLUMNS = ["claim", "text", "role", "engine", "engine_version", "verdict", "resolved", "summary",
                   "created", "path"]


def claim_status(found: Found, section: str | None = "unknowns") -> pd.DataFrame:
    """Per claim of ``section`` (all claims when None): the subject engine's state first (one row per
    version that ran, or one open row saying what it needs), then one ``reference`` row per other
    engine and version. ``resolved`` is true only on a subject row that settles the claim."""
    rows = []
    for st in _standing.claim_states(found, section):
        base = {"claim": st.claim.id, "text": st.claim.text}
        ran = [s for s in st.subject if s.verdict != "not-run"]
        if not ran:
            rows.append(base | {"role": "subject", "engine": st.claim.subject, "engine_version": None,
                                "verdict": None, "resolved": False,
                                "summary": f"{st.headline}; resolve: {st.command}", "created": None, "path": None})
        for role, group in (("subject", ran), ("reference", st.references)):
            rows += [base | {"role": role, "engine": s.engine, "engine_version": s.engine_version, "verdict": s.verdict,
                             "resolved": role == "subject" and s.answers, "summary": _said(s), "created": s.created,
                             "path": str(s.path)} for s in group]
    return pd.DataFrame(rows, columns=_STATUS_COLUMNS)


def _said_of(v: _settle.Verified) -> str:
    """A finding's summary, led by why it settles nothing where one of its answers does not."""
    why = v.answer_why
    return f"Settles nothing ({'; '.join(why)}): {v.finding.summary}" if why else v.finding.summary


def _said(s: _standing.Standing) -> str:
    """A standing's reason for its verdict on its claim (its claim row's own, never the summary of another verdict),
    led by why it settles nothing where its verdict is not re-derived."""
    said = s.claim_reason or NOT_RECORDED
    return f"Settles nothing ({'; '.join(s.unsettled)}): {said}" if s.unverified else said


def open_claims(found: Found) -> pd.DataFrame:
    """Every claim its subject engine has not settled, with what it needs and the command that settles it."""
    rows = [{"claim": st.claim.id, "text": st.claim.text, "subject": st.claim.about.name, "state": st.headline,
             "command": st.command} for st in _standing.claim_states(found) if not st.resolved]
    return pd.DataFrame(rows, columns=["claim", "text", "subject", "state", "command"])


def churn_frame(found: Found) -> pd.DataFrame:
    """Probes × (engine, engine version) → newest verdict: the version-churn view."""
    rows = [{"probe": f.probe, "engine": f"{f.engine} {f.engine_version or '—'}", "verdict": f.verdict,
             "created": f.created} for _, f in found]
    if not rows:
        return pd.DataFrame()
    df = pd.DataFrame(rows).sort_values("created")
    return df.pivot_table(index="probe", columns="engine", values="verdict", aggfunc="last").fillna("")


# --------------------------------------------------------------------------- the first screen


@dataclass(frozen=True)
class Badge:
    """One verdict in a matrix cell; ``count`` standings share it (versions, models, loop arms), ``detail``
    names them (the badge's tooltip). ``reason`` is the newest one's reason for its verdict on the claim (its claim
    row's own, from the probe's rule), ``href`` the anchor of its finding's card (not-run: the list of engines that
    did not run)."""

    verdict: str
    count: int
    detail: str
    reason: str | None = None
    href: str = "#not-run"

    @property
    def lead(self) -> str | None:
        """The reason as the grid's narrow cell shows it: without a parenthesised name its tooltip gives (``detail``:
        its model, which no 9em column holds whole, "(synthetic-35629653129c)" broken over two lines at 1024 px)."""
        if not self.reason:
            return self.reason
        said = self.reason
        for name in self.detail.replace("·", " ").split():
            said = said.replace(f" ({name})", "")
        return said


@dataclass(frozen=True)
class MatrixRow:
    claim: _claims.Claim
    state: str  # the subject's state in words (standing.ClaimState.headline)
    resolved: bool
    cells: tuple[tuple[Badge, ...], ...]  # per engine, in the matrix's column order; empty: no finding


@dataclass(frozen=True)
class Matrix:
    """Claims × engines: what the run found, the claims' subject engine in the first column."""

    engines: tuple[str, ...]
    rows: tuple[MatrixRow, ...]

    def sections(self) -> list[tuple[str, list[MatrixRow]]]:
        return [(title, [r for r in self.rows if r.claim.section == key]) for key, title in _claims.SECTIONS.items()
                if any(r.claim.section == key for r in self.rows)]


NOT_RECORDED = "reason not recorded (a finding written before schema v4; re-run it)"


def card_id(finding_id: str) -> str:
    """The anchor of a finding's card on the page."""
    return f"finding-{finding_id}"


def reason_of(s: _standing.Standing, subject: bool = True) -> str | None:
    """What a matrix cell says beside a standing verdict: its claim row's reason, led on the claim's subject by why it
    settles nothing where its verdict is not re-derived (a reference settles nothing anyway: its card says why);
    nothing for not-run (the engines that did not run are listed once)."""
    if s.verdict == "not-run":
        return None
    reason = s.claim_reason or NOT_RECORDED
    return f"settles nothing ({s.unsettled[0]}): {reason}" if s.unsettled and subject else reason


def _badges(stood: Sequence[_standing.Standing], subject: bool = True) -> tuple[Badge, ...]:
    groups: dict[str, list[_standing.Standing]] = {}
    for s in stood:
        groups.setdefault(s.verdict, []).append(s)
    out = []
    for v, ss in groups.items():
        top = max(ss, key=lambda s: (_standing.when(s.created), s.finding_id))
        out.append(Badge(v, len(ss), "; ".join(" · ".join(x for x in (s.probe, s.engine_version, s.model) if x)
                                               for s in ss), reason_of(top, subject),
                         "#not-run" if v == "not-run" else f"#{card_id(top.finding_id)}"))
    return tuple(out)


def verdict_matrix(found: Found) -> Matrix:
    """Every claim against every engine (each registered one, and any a finding names): the verdicts that
    stand (:mod:`workbench.standing`), grouped per verdict; the subject engine's column first."""
    from . import cells

    by_claim = _standing.standings(found)
    subjects = list(dict.fromkeys(c.subject for c in _claims.CLAIMS.values()))
    others = sorted((set(cells.engines()) | {s.engine for ss in by_claim.values() for s in ss}) - set(subjects))
    engines = (*subjects, *others)
    rows = tuple(MatrixRow(st.claim, st.headline, st.resolved,
                           tuple(_badges([s for s in by_claim.get(st.claim.id, []) if s.engine == e],
                                         cells.runs(e) == st.claim.subject) for e in engines))
                 for st in _standing.claim_states(found))
    return _without_empty_columns(Matrix(engines, rows), len(subjects))


def _without_empty_columns(m: Matrix, keep: int) -> Matrix:
    """The matrix without the columns of engines that have no finding on any claim (a served engine this run did
    not start: a column of dashes), the first ``keep`` (the claims' subjects) kept whatever they hold."""
    kept = [i for i, _ in enumerate(m.engines) if i < keep or any(r.cells[i] for r in m.rows)]
    return Matrix(tuple(m.engines[i] for i in kept),
                  tuple(MatrixRow(r.claim, r.state, r.resolved, tuple(r.cells[i] for i in kept)) for r in m.rows))


@dataclass(frozen=True)
class NotRun:
    """An engine that did not run some probes here: its reason in a few words, then each full reason once."""

    engine: str
    probes: tuple[str, ...]
    short: str
    reasons: tuple[tuple[str, tuple[str, ...]], ...]  # (full reason, the probes that gave it), most probes first
    ran_others: bool = False  # the engine ran other probes here: only these did not run

    @property
    def detailed(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """The reasons the short line does not already say in full (for the collapsible block)."""
        return tuple((r, ps) for r, ps in self.reasons if r != self.short)


def not_run_engines(found: Found) -> list[NotRun]:
    """Per engine, the probes whose newest finding is not-run and that never ran on it here (a probe that ran
    is not "not run", whatever came later), with :func:`workbench.standing.not_run_reasons`' reasons."""
    ran = {(f.engine, f.probe) for _, f in found if f.verdict != "not-run"}
    out = []
    for engine, reasons in _standing.not_run_reasons(found).items():
        kept = {r: tuple(p for p in ps if (engine, p) not in ran) for r, ps in reasons.items()}
        kept = sorted(((r, ps) for r, ps in kept.items() if ps), key=lambda rp: (-len(rp[1]), rp[0]))
        if kept:
            probes_ = tuple(sorted(p for _, ps in kept for p in ps))
            out.append(NotRun(engine, probes_, _findings.short_reason(kept[0][0]), _once(kept),
                              any(e == engine for e, _ in ran)))
    return out


def _once(reasons: Sequence[tuple[str, tuple[str, ...]]]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each reason's text once: one that begins with another (the loop gate's reason is the engine's reason,
    then what a GPU run must add) keeps only what it adds."""
    out = []
    for reason, ps in reasons:
        base = max((r for r, _ in reasons if r != reason and reason.startswith(r)), key=len, default=None)
        out.append((f"(the reason above, then:) {reason[len(base):].lstrip(' .;:')}" if base else reason, ps))
    return tuple(out)


@dataclass(frozen=True)
class Open:
    """The claims their subject has not settled: how many, in which state, and the commands that settle them."""

    count: int
    total: int
    states: tuple[tuple[str, int], ...]  # (state in words, claims in it)
    commands: tuple[tuple[str, tuple[str, ...]], ...]  # (command, the claims it settles)


def open_summary(found: Found) -> Open:
    states = _standing.claim_states(found)
    unresolved = [st for st in states if not st.resolved]
    by_state: dict[str, int] = {}
    by_command: dict[str, list[str]] = {}
    for st in unresolved:
        by_state[st.headline] = by_state.get(st.headline, 0) + 1
        by_command.setdefault(st.command, []).append(st.claim.id)
    return Open(len(unresolved), len(states), tuple(by_state.items()),
                tuple((c, tuple(ids)) for c, ids in by_command.items()))


@dataclass(frozen=True)
class Tally:
    """The first screen's count of what was learned (and ``workbench run``'s last lines): claims resolved by their
    subject, the standing verdicts by verdict and by engine, and what failed."""

    resolved: int
    total: int
    verdicts: tuple[tuple[str, int], ...]  # standing verdicts that ran, per verdict
    engines: tuple[tuple[str, tuple[tuple[str, int], ...]], ...]  # per engine, its standing verdicts per verdict
    notebooks: int
    failed: tuple[str, ...]  # notebooks that ended in an error or a timeout
    corrupt: int  # finding files that could not be read
    unfinished: tuple[str, ...] = ()  # notebooks still running, or cut off (the run was stopped)

    @property
    def all_failed(self) -> bool:
        return bool(self.notebooks) and len(self.failed) == self.notebooks

    def lines(self) -> list[str]:
        """The tally as ``workbench run`` prints it."""
        from . import cells

        each = lambda counts: ", ".join(f"{n} {v}" for v, n in counts) or "none"  # noqa: E731
        subjects = {c.subject for c in _claims.CLAIMS.values()}
        out = [f"claims:    {self.resolved} of {self.total} resolved by their subject engine",
               "verdicts:  each engine's own, never summed (a reference's verdict is about its own engine)",
               *(f"  {e} ({'subject' if cells.runs(e) in subjects else 'reference'}): {each(c)}"
                 for e, c in self.engines)]
        if self.failed:
            out.append(f"errors:    {len(self.failed)} of {self.notebooks} notebooks failed ({', '.join(self.failed)})"
                       + (": nothing was measured in this run" if self.all_failed else ""))
        if self.corrupt:
            out.append(f"errors:    {self.corrupt} finding file(s) could not be read (listed in the report)")
        if self.unfinished:
            out.append(f"unfinished: {', '.join(self.unfinished)} (still running, or the run was stopped)")
        return out


def tally(scan: _findings.Scan, m: Manifest | None = None, matrix: Matrix | None = None) -> Tally:
    matrix = matrix or verdict_matrix(scan.findings)
    verdicts: dict[str, int] = {}
    engines: dict[str, dict[str, int]] = {}
    for row in matrix.rows:
        for engine, cell in zip(matrix.engines, row.cells):
            for b in cell:
                if b.verdict != "not-run":
                    verdicts[b.verdict] = verdicts.get(b.verdict, 0) + b.count
                    engines.setdefault(engine, {})[b.verdict] = engines.get(engine, {}).get(b.verdict, 0) + b.count
    notebooks = list(m.notebooks.values()) if m else []
    return Tally(sum(r.resolved for r in matrix.rows), len(matrix.rows), tuple(sorted(verdicts.items())),
                 tuple((e, tuple(sorted(c.items()))) for e, c in engines.items()), len(notebooks),
                 tuple(n.name for n in notebooks if n.status not in ("ok", "running")), len(scan.errors),
                 tuple(n.name for n in notebooks if n.status == "running"))


def tally_text(out: Path, m: Manifest | None = None) -> str:
    """:class:`Tally`'s lines for run folder ``out``."""
    return "\n".join(tally(_findings.scan([Path(out) / "findings"]), m).lines())


@dataclass(frozen=True)
class ClaimRow:
    """One claim row of a finding's card: the verdict the finding gives it and the row's reason."""

    claim: _claims.Claim
    verdict: str
    reason: str


@dataclass(frozen=True)
class SupportRow:
    """A value a verdict rests on: the claim row (None: the finding's own verdict), the condition, what the finding
    read and where that came from (engine, cell or derived)."""

    claim: str | None
    metric: str
    condition: str
    read: str
    source: str


@dataclass(frozen=True)
class Card:
    """A finding as the page shows it when a badge is clicked: its claim rows with their reasons, summary, supports
    with their sources, and links to its figures, its executed notebook and its JSON."""

    anchor: str
    finding: Finding
    rows: tuple[ClaimRow, ...]
    supports: tuple[SupportRow, ...]
    json: str | None
    notebook: str | None
    figures: str | None
    unsettled: tuple[str, ...]
    params: tuple[tuple[str, str, bool], ...] = ()  # (name, value, differs from the probe's default)
    command: str | None = None  # the one line that runs its experiment again
    summary_shown: bool = True  # False where the summary repeats a claim row's reason word for word
    notebook_html: str | None = None  # the executed notebook rendered (nbconvert), where it is
    metrics: tuple[tuple[str, str, str], ...] = ()  # every metric it recorded: (header, value in its unit, source)
    reference_of: str | None = None  # the subject it is a reference beside (its engine is not its claims' subject)
    result_class: str = ""  # benchmark integrity's class, and whether the finding recorded it or its writer declares it

    @property
    def grouped(self) -> list[tuple[list[_claims.Claim], str, str]]:
        """The claim rows with one verdict and one reason said once: (their claims, the verdict, the reason)."""
        out: list[tuple[list[_claims.Claim], str, str]] = []
        for r in self.rows:
            same = next((g for g in out if g[1] == r.verdict and g[2] == r.reason), None)
            if same:
                same[0].append(r.claim)
            else:
                out.append(([r.claim], r.verdict, r.reason))
        return out

    @property
    def rests_said(self) -> str:
        """What the verdict rests on in a few words (each reading, or how many where they would not fit a line)."""
        said = "; ".join(f"{s.metric} {s.read}" for s in self.supports)
        return said if len(said) <= 70 else f"{len(self.supports)} readings"


def _supports(f: Finding) -> tuple[SupportRow, ...]:
    own = [(None, d) for d in f.rests_on] + [(c, d) for c, ds in f.claim_rests_on.items() for d in ds]
    return tuple(SupportRow(c, metric_header(d["metric"]), f"{d['op']} {metric_text(d['metric'], d['value'])}",
                            metric_text(d["metric"], f.metric(d["metric"])) if d["metric"] in f.metrics
                            else "not recorded", (f.metrics.get(d["metric"]) or {}).get("source", "—"))
                 for c, d in own)


def cards(found: Found, m: Manifest | None, figured: set[str], rel, out: Path | None = None) -> list[Card]:
    """A card per finding that stands in the matrix (not-run ones are listed with their engine instead): its claim
    rows, its summary where it says more than they do, what it rests on, its parameters and the command that runs it
    again, and links to its figures, its executed notebook (rendered, where run folder ``out`` holds the page) and
    its JSON."""
    from . import probes

    ids = {s.finding_id for ss in _standing.standings(found).values() for s in ss if s.verdict != "not-run"}
    notebooks = {n.attempt: n for n in (m.notebooks.values() if m else []) if n.attempt}
    checked = _settle.verified_by_path(found)
    shown = []
    for path, f in sorted(((p, f) for p, f in found if f.id in ids), key=lambda pf: (pf[1].probe, pf[1].engine)):
        rows = tuple(ClaimRow(_claims.get(c), f.verdict_on(c), f.reason_on(c) or NOT_RECORDED)
                     for c in dict.fromkeys([*f.claims, *f.claim_verdicts]) if c in _claims.CLAIMS)
        family = probes.family(f.probe)
        nb = notebooks.get(f.attempt)
        cls, how = _integrity.result_class(f)
        shown.append(Card(card_id(f.id), f, rows, _supports(f), rel(path), nb.output if nb else None,
                          f"#{figures_id(family)}" if family in figured else None, checked[(str(path), f.id)].answer_why,
                          tuple(_reading.shown_params(f)), _reading.rerun_command(f, nb),
                          not _reading.summary_repeats(f, [r.reason for r in rows]),
                          _notebook_html.rendered(out, nb.output) if nb and out else None,
                          tuple(metrics_frame(f)[["metric", "value", "source"]].itertuples(index=False, name=None)),
                          _reference_of(f),
                          cls if how == "recorded" else f"{cls} (its writer's, not recorded: written before classes were)"))
    return shown


def _reference_of(f: Finding) -> str | None:
    """The subject (as people write it) whose claims ``f`` is only a reference beside, or None where its engine is
    their subject."""
    from . import cells

    others = {c.about.name for cid in f.claims if (c := _claims.CLAIMS.get(cid)) and cells.runs(f.engine) != c.subject}
    return ", ".join(sorted(others)) or None


def figures_id(probe: str) -> str:
    return f"fig-{_slug(probe)}"


# --------------------------------------------------------------------------- the page


def standing_findings(found: Found, probe: str) -> list[Finding]:
    """The findings of ``probe`` (a probe, or the loop: ``probes.family``) that stand per engine, engine version,
    model and arm: :mod:`workbench.standing`'s rule on its own claim (anything that ran beats not-run, then the
    newest), over its findings only."""
    from . import probes

    decl = probes.declared(probe)
    mine = [(p, f) for p, f in found if probes.family(f.probe) == probe]
    if not mine or decl is None:
        return []
    by_key = {(p, f.id): f for p, f in mine}
    return [by_key[(s.path, s.finding_id)] for s in _standing.standings(mine).get(decl.claims[0], [])
            if (s.path, s.finding_id) in by_key]


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", s).strip("-").lower()


@dataclass(frozen=True)
class ProbeFigures:
    """One probe's (or the loop's) figures, each with every engine side by side, and the standing findings
    they draw."""

    probe: str
    findings: list[Finding]  # in the panels' order
    figures: list[_panels.SideBySide]

    def divs(self) -> list[tuple[_panels.SideBySide, str | None]]:
        """Each figure with its report div (ids from the probe and figure names: deterministic, unique per page;
        None where no engine drew anything, which its caption says)."""
        return [(s, plots.to_div(s.fig, f"wb-fig-{_slug(self.probe)}-{s.name}") if s.fig is not None else None)
                for s in self.figures]


def side_by_side(found: Found) -> list[ProbeFigures]:
    """Per probe that declares figures (the loop included: ``probes.declared``), each figure with one panel per
    engine (every in-process engine, one with no finding here included, and each served engine that has one),
    drawn from the findings that stand."""
    from . import cells, probes

    out = []
    for probe in sorted({probes.family(f.probe) for _, f in found} - {None}):
        stood = standing_findings(found, probe)
        figs = plots.side_by_side(probe, stood, cells.engines(served=False)) if stood else []
        if figs:
            out.append(ProbeFigures(probe, [f for _, fs in plots.columns(probe, stood) for f in fs], figs))
    return out


def loop_arms(found: Found):
    """The agentic loop's arms × metrics table (:mod:`workbench.loop.table`) over its findings that stand; None where
    the loop did not run here."""
    from .loop.table import arm_table

    table = arm_table(standing_findings(found, "loop"), [f for _, f in found])
    return table if table.rows or table.not_run else None


#: plotly.js's own partial bundle of the traces the report's figures draw (npm's ``plotly.js-basic-dist-min``, MIT,
#: ``static/plotly-basic.LICENSE``): 1.2 MB where the whole of plotly.js is 4.8 MB. Used only where it is the
#: plotly.js release the installed plotly writes figures for, and every figure's traces are in it.
PARTIAL_BUNDLE = "static/plotly-basic.min.js"
PARTIAL_TRACES = frozenset({"bar", "pie", "scatter"})


def _plotlyjs(figures: Sequence[ProbeFigures] = ()) -> str:
    """The script that brings the page its plotly.js (the partial bundle where it draws every trace, else the whole
    library) and the house template its figures share (:func:`workbench.plots.page_script`)."""
    import plotly.offline

    partial = resources.files("workbench").joinpath(PARTIAL_BUNDLE).read_text()
    said = re.search(r"plotly\.js \(basic - minified\) v([0-9.]+)", partial[:400])
    traces = {t.type for pf in figures for s in pf.figures if s.fig is not None for t in s.fig.data}
    whole = not (said and said.group(1) == plotly.offline.get_plotlyjs_version() and traces <= PARTIAL_TRACES)
    return plots.page_script(plotly.offline.get_plotlyjs() if whole else partial)


def _records(df: pd.DataFrame) -> list[dict]:
    """Rows for the template, missing values as None (pandas 3 string columns hold NaN)."""
    return df.astype(object).where(df.notna(), None).to_dict("records")


def changes(found: Found, m: Manifest | None, against: Path | None) -> tuple[str, _compare.Comparison]:
    """What changed, for the first screen: since run folder ``against`` where named, else since the previous run in
    this folder (:func:`workbench.compare.previous`)."""
    if against is not None:
        return str(against), _compare.compare_found(_compare.scanned(against), found)
    return "the previous run in this folder", _compare.compare_found(_compare.previous(found, m), found)


def lanes_line(notebooks: Sequence[NotebookRun]) -> str | None:
    """``2 lanes, cores 0 | 1``: the lanes the notebooks ran in (the manifest's ``node``), so a reader sees where each
    timing came from; None when none ran in a lane (one notebook at a time)."""
    seen = {n.node["lane"]: n.node.get("cpus") or [] for n in notebooks
            if isinstance(n.node, dict) and n.node.get("lane") is not None}
    if not seen:
        return None
    return f"{len(seen)} lanes, cores " + " | ".join(_cpu.spans(seen[k]) for k in sorted(seen))


def render(out: Path, manifest: Manifest | None = None, against: Path | None = None) -> str:
    """The report of run folder ``out`` as one HTML string (plotly.js inlined once, no network); its first screen
    says what changed since run folder ``against`` (default: the previous run in ``out``)."""
    scan = _findings.scan([out / "findings"])
    found = scan.findings
    figures = side_by_side(found)

    def rel(p: object) -> str | None:
        """Links relative to the page, so a run folder can be moved or served as it is."""
        return Path(os.path.relpath(p, out)).as_posix() if isinstance(p, (str, os.PathLike)) else None

    verdicts = verdict_frame(found).assign(href=lambda d: d["path"].map(rel))
    unknowns = claim_status(found, None).assign(href=lambda d: d["path"].map(rel))
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    env.filters["sentence"] = _reading.first_sentence
    env.filters["clause"] = _reading.first_clause
    env.filters["words"] = _whole_words
    template = env.from_string(resources.files("workbench").joinpath("templates/report.html.j2").read_text())
    hardware = sorted({(f.environment.get("hardware") or {}).get("summary") for _, f in found
                       if f.verdict != "not-run"} - {None})
    since, changed = changes(found, manifest, against)
    matrix = verdict_matrix(found)
    shown = cards(found, manifest, {pf.probe for pf in figures}, rel, out)
    carded = {c.finding.id for c in shown}
    return template.render(
        title=f"workbench run — {out.name}",
        tally=tally(scan, manifest, matrix),
        reading=first_screen(found, matrix),
        since=since,
        changed=changed,
        cards=shown,
        notebook_page=lambda output: _notebook_html.rendered(out, output) if output else None,
        card_of=lambda f: card_id(f.id),
        figures_id=figures_id,
        generated=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        hardware=hardware,
        lanes=lanes_line(list(manifest.notebooks.values()) if manifest else []),
        matrix=matrix,
        arms=loop_arms(found),
        not_run=not_run_engines(found),
        open=open_summary(found),
        notebooks=list(manifest.notebooks.values()) if manifest else [],
        verdicts=[v | {"card": card_id(v["id"]) if v["id"] in carded else None}
                  for v in _records(verdicts) if v["verdict"] != "not-run"],
        unknowns=_records(unknowns),
        colours=plots.VERDICT_COLOURS,
        figures=figures,
        evaltables=evaltables(out, found, rel),
        certification=certification(found),
        evaltable_heads=_evaltable.heads(),
        plotlyjs=_plotlyjs(figures) if figures else "",
        errors=[(rel(p), e) for p, e in scan.errors],
        blueprint="blueprint.md" if (out / "blueprint.md").exists() else None,
        guide="trtllm-gateway.md" if (out / "trtllm-gateway.md").exists() else None,
        history=sorted(((rel(p), f) for p, f in found), key=lambda pf: pf[1].created, reverse=True),
    )


def evaltables(out: Path, found: Found, rel: Callable[[object], str | None]) -> list[dict]:
    """The eval tables a batch wrote in ``out`` (:func:`workbench.evaltable.table.in_run`), each with what its cells
    show (:func:`~workbench.evaltable.table.spread_words`: p50 · p90 · p95 over the repeats with the run count, the
    rows' result class) and the quality smoke of each backend it measured, as the certification matrix reads it
    (:mod:`workbench.certify.matrix`; without one, :func:`~workbench.certify.integrity.throughput_words` says no
    throughput claim stands)."""
    tables = _evaltable.in_run(out)
    cells = _certification.build(found) if tables and found else []
    shown = []
    for path, setup, rows in tables:
        measured = dict.fromkeys(r[0].text for r in rows if r[3].span == 1)  # a row not measured spans its reason
        quality = []
        for backend in measured:
            mine = [c for c in cells if c.engine == backend and c.status == "measured"]
            quality += [f"{backend} on {c.model}: " + (f"{c.quality} ({c.quality_said})" if c.quality != "not-run"
                                                          else _integrity.throughput_words(None, c.quality_said))
                        for c in mine]
            if not mine:
                quality.append(f"{backend}: " + _integrity.throughput_words(None, "no finding of it in this run"))
        shown.append({"md": rel(path.with_suffix(".md")), "setup": setup, "rows": rows,
                      "cells": _evaltable.spread_words(setup),
                      "quality": quality or ["no backend measured in this table, so none to run it on"]})
    return shown


def certification(found: Found) -> dict | None:
    """The certification matrix's section (:mod:`workbench.certify.matrix`): its heads and rows as text; None
    without findings."""
    if not found:
        return None
    from .certify import product

    return {"heads": list(_certification.HEADS),
            "rows": [_certification.text_row(c, reasons=False, where="Engines that did not run")
                     for c in _certification.build(found)], "product": product.product_words(found).replace("`", "")}


def _whole_words(text: object) -> markupsafe.Markup:
    """``text`` that wraps between its words, never inside one (a browser breaks "llamacpp-cold" at its hyphen where
    a column is tight): each word a ``nowrap`` span, the text itself unchanged (a search for it still finds it)."""
    return markupsafe.Markup(" ").join(markupsafe.Markup('<span class="nowrap">{}</span>').format(w)
                                       for w in str(text).split())


def first_screen(found: Found, matrix: Matrix) -> dict:
    """What the page says first (:mod:`workbench.reading`): the subject's state in a sentence, what the run
    established as sentences linked to their cards (the first :data:`~workbench.reading.SHOWN`, then the rest
    folded), and each engine's standing verdicts apart."""
    said = _reading.established(found, card_id)
    return {"subject": _reading.subject_line(found), "established": said[:_reading.SHOWN],
            "more": said[_reading.SHOWN:], "engines": _reading.engine_tallies(matrix)}


def write(out: Path, manifest: Manifest | None = None, against: Path | None = None) -> Path:
    """Write ``out/report.html`` atomically and return its path, each executed notebook rendered beside it first
    (:mod:`workbench.notebook_html`) so its card links a page, not JSON, and the certification matrix's exports
    beside it (``certification.json``, ``certification.csv``)."""
    out = Path(out)
    _notebook_html.render_all(out, manifest)
    found = _findings.scan([out / "findings"]).findings
    if found:
        _certification.write(_certification.build(found), out)
    page = render(out, manifest, against)
    return atomic_write(out / "report.html", page)


def redraw(out: Path, against: Path | None = None) -> Path:
    """``workbench report DIR``: draw run folder ``out``'s report again from its findings and ``run.json`` (after a
    workbench upgrade, or findings added by hand), checked first: a path that is no run folder (``out``, or
    ``against``, the run its first screen compares with), or a folder that cannot take the page, is a
    :class:`~workbench.engine.WorkbenchError` with nothing written."""
    from . import manifest as _manifest
    from .files import check_file_writable

    out = _compare.run_folder(out)
    if against is not None:
        _compare.run_folder(against)
    check_file_writable(out / "report.html", "report", "nothing was written")
    return write(out, _manifest.load(out), against)
