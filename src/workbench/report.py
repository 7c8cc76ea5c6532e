"""The run report (one self-contained offline HTML page per run folder) and the tables behind it.

The same tables feed the notebooks, so a verdict reads the same in JupyterLab, in ``report.html``
and in the blueprint: metrics always go through :func:`workbench.metrics.render`, and a claim's
status follows :mod:`workbench.standing`, the blueprint's rule: only the claim's subject engine
resolves it, other engines are references, and the page leads with what is unresolved and the
command that resolves it.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import jinja2
import pandas as pd

from . import findings as _findings
from . import metrics as _metrics
from . import plots
from .files import atomic_write
from . import standing as _standing
from .findings import Finding

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from .manifest import Manifest

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
    rows = [{
        "probe": f.probe, "engine": f.engine, "engine_version": f.engine_version, "model": model_name(f),
        "verdict": f.verdict, "summary": f.summary,
        "metrics": "; ".join(f"{metric_header(t)} {metric_text(t, m['value'])}" for t, m in f.metrics.items()),
        "created": f.created, "id": f.id, "path": str(path),
    } for path, f in latest(found)]
    return pd.DataFrame(rows, columns=["probe", "engine", "engine_version", "model", "verdict", "summary", "metrics",
                                       "created", "id", "path"])


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
                             "resolved": role == "subject" and s.answers, "summary": s.summary, "created": s.created,
                             "path": str(s.path)} for s in group]
    return pd.DataFrame(rows, columns=_STATUS_COLUMNS)


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


# --------------------------------------------------------------------------- the page


def standing_findings(found: Found, probe: str) -> list[Finding]:
    """The finding of ``probe`` that stands per engine, engine version and model: :mod:`workbench.standing`'s
    rule on the probe's own claim (anything that ran beats not-run, then the newest), over its findings only."""
    from . import probes

    mine = [(p, f) for p, f in found if f.probe == probe]
    if not mine or probe not in probes.PROBES:
        return []
    by_key = {(p, f.id): f for p, f in mine}
    return [by_key[(s.path, s.finding_id)]
            for s in _standing.standings(mine).get(probes.get(probe).claims[0], [])]


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", s).strip("-").lower()


@dataclass(frozen=True)
class ProbeFigures:
    """One probe's figures, each with every engine side by side, and the standing findings they draw."""

    probe: str
    findings: list[Finding]  # in the panels' order
    figures: list[tuple[str, go.Figure]]

    def divs(self) -> list[str]:
        """The figures as report divs, ids from the probe and figure names (deterministic, unique per page)."""
        return [plots.to_div(fig, f"wb-fig-{_slug(self.probe)}-{name}") for name, fig in self.figures]


def side_by_side(found: Found) -> list[ProbeFigures]:
    """Per probe that declares figures, each figure with one panel per engine (every in-process engine,
    one with no finding here included, and each served engine that has one), drawn from the findings that stand."""
    from . import cells

    out = []
    for probe in sorted({f.probe for _, f in found}):
        stood = standing_findings(found, probe)
        figs = plots.side_by_side(probe, stood, cells.engines(served=False)) if stood else []
        if figs:
            out.append(ProbeFigures(probe, [f for _, f in plots.columns(probe, stood)], figs))
    return out


def _plotlyjs() -> str:
    import plotly.offline

    return plotly.offline.get_plotlyjs()


def _records(df: pd.DataFrame) -> list[dict]:
    """Rows for the template, missing values as None (pandas 3 string columns hold NaN)."""
    return df.astype(object).where(df.notna(), None).to_dict("records")


def render(out: Path, manifest: Manifest | None = None) -> str:
    """The report of run folder ``out`` as one HTML string (plotly.js inlined once, no network)."""
    scan = _findings.scan([out / "findings"])
    found = scan.findings
    figures = side_by_side(found)

    def rel(p: object) -> str | None:
        """Links relative to the page, so a run folder can be moved or served as it is."""
        return Path(os.path.relpath(p, out)).as_posix() if isinstance(p, (str, os.PathLike)) else None

    verdicts = verdict_frame(found).assign(href=lambda d: d["path"].map(rel))
    unknowns = claim_status(found).assign(href=lambda d: d["path"].map(rel))
    unresolved = open_claims(found)
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    template = env.from_string(resources.files("workbench").joinpath("templates/report.html.j2").read_text())
    return template.render(
        title=f"workbench run — {out.name}",
        generated=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        notebooks=list(manifest.notebooks.values()) if manifest else [],
        verdicts=_records(verdicts),
        unknowns=_records(unknowns),
        unresolved=_records(unresolved),
        not_run=_standing.not_run_reasons(found),
        colours=plots.VERDICT_COLOURS,
        figures=figures,
        plotlyjs=_plotlyjs() if figures else "",
        errors=[(rel(p), e) for p, e in scan.errors],
        blueprint="blueprint.md" if (out / "blueprint.md").exists() else None,
        guide="trtllm-gateway.md" if (out / "trtllm-gateway.md").exists() else None,
        history=sorted(((rel(p), f) for p, f in found), key=lambda pf: pf[1].created, reverse=True),
    )


def write(out: Path, manifest: Manifest | None = None) -> Path:
    """Write ``out/report.html`` atomically and return its path."""
    out = Path(out)
    page = render(out, manifest)
    return atomic_write(out / "report.html", page)
