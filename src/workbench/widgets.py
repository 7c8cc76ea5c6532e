"""Notebook views: ipywidgets explorers in JupyterLab, static tables and figures everywhere else.

Whether widgets are used is the notebook's explicit ``interactive`` parameter (False by default),
never a guess from the environment: papermill and nbval have no widget frontend, and an executed
notebook must read the same wherever it ran. Static mode shows everything the explorer can show.
"""

from __future__ import annotations

import html
import os
import re
from pathlib import Path
from typing import Sequence

import pandas as pd
from IPython.display import HTML, Markdown, display

from . import claims, envvars, plots, report
from .findings import Finding


def finding_card(f: Finding) -> str:
    """HTML for one finding: verdict, summary, reason, rendered metrics, notes (inline styles: no notebook CSS)."""
    metrics = "".join(f"<tr><th style='text-align:left'>{html.escape(r.metric)}</th><td>{html.escape(r.value)}</td>"
                      f"<td>{html.escape(r.source)}</td><td style='color:#777'>{html.escape(r.meaning)}</td></tr>"
                      for r in report.metrics_frame(f).itertuples())
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in f.evidence.get("notes", []))
    reason = f"<p><b>Why not run:</b> {html.escape(f.reason)}</p>" if f.reason else ""
    others = sorted({claims.get(c).about.name for c in f.claims if claims.get(c).subject != f.engine})
    if others:
        reason += (f"<p><b>Reference only:</b> the claims this probe tests are about {html.escape(', '.join(others))}; "
                   f"a finding from {html.escape(f.engine)} is shown beside them and settles none.</p>")
    badge = (f"<span style='background:{plots.VERDICT_COLOURS[f.verdict]};color:#fff;border-radius:3px;"
             f"padding:0 0.4em'>{html.escape(f.verdict)}</span>")
    return (f"<div><p>{badge} <b>{html.escape(f.probe)}</b> · {html.escape(f.engine)} "
            f"{html.escape(f.engine_version or '')} · {html.escape(report.model_name(f))}</p>"
            f"<p>{html.escape(f.summary)}</p>{reason}"
            + (f"<table>{metrics}</table>" if metrics else "") + (f"<ul>{notes}</ul>" if notes else "") + "</div>")


def show_finding(f: Finding) -> None:
    """The verdict, summary, reason, rendered metrics and notes of one finding."""
    display(HTML(finding_card(f)))


def evidence_frame(f: Finding, rows: Sequence[dict] | None = None) -> pd.DataFrame:
    rows = f.evidence.get("rows", []) if rows is None else rows
    return pd.DataFrame(list(rows), columns=f.evidence.get("columns") or None)


def _show_evidence(f: Finding, rows: Sequence[dict]) -> None:
    for _, fig in plots.for_finding(f, rows):
        display(plots.show(fig))
    if rows:
        display(evidence_frame(f, rows))


def evidence(f: Finding, *, by: str | None = None, interactive: bool = False) -> None:
    """Figures and evidence rows of ``f``; interactively, a picker over the values of column ``by``. With fewer than
    two values there is nothing to pick: the evidence is shown whole, with a line saying why there is no picker; a
    picker left with nothing picked says so instead of showing an empty area."""
    rows = f.evidence.get("rows", [])
    values = list(dict.fromkeys(r[by] for r in rows if by in r)) if by else []
    if not (interactive and len(values) > 1):
        if interactive and by:
            display(Markdown(f"*{_nothing_to_pick(by, values)}*"))
        _show_evidence(f, rows)
        return
    import ipywidgets as w

    picker = w.SelectMultiple(options=values, value=tuple(values), description=by, rows=min(8, len(values)))
    area = w.Output()

    def redraw(_: object = None) -> None:
        with area:
            area.clear_output(wait=True)
            if picker.value:
                _show_evidence(f, [r for r in rows if r.get(by) in picker.value])
            else:
                display(Markdown(f"*no {by} picked: pick one or more above (ctrl-click or shift-click)*"))

    picker.observe(redraw, names="value")
    redraw()
    display(w.VBox([picker, area]))


def _nothing_to_pick(by: str, values: Sequence) -> str:
    if values:
        return f"one {by} in this evidence ({values[0]}): nothing to pick, all of it is shown"
    return f"no {by} in this evidence: nothing to pick, all of it is shown"


#: The findings browser's columns, in order; ``open`` links each row to its finding's card or JSON.
BROWSER_COLUMNS = ["created", "probe", "engine", "engine_version", "model", "verdict", "summary", "open"]
#: itables' options for the browser: the rows as given (escaped text, newest first), every one kept (no
#: downsampling), paged, a click on a column's header sorts by it, and DataTables from itables' wheel, not a CDN.
DATATABLES = dict(connected=False, allow_html=True, showIndex=False, order=[], maxBytes=0, pageLength=10,
                  lengthMenu=[10, 25, 100], classes="display compact", display_logo_when_loading=False,
                  text_in_header_can_be_selected=False)
_CARD_ID = re.compile(r'<section class="card" id="([^"]+)"')


def notebook_dir() -> Path:
    """The folder of the running notebook, which its output's relative links resolve against: Jupyter tells its
    kernels the notebook's path (:data:`envvars.NOTEBOOK`; the runner does too, for the executed copy); else the
    working directory, where Jupyter and papermill start a notebook's kernel."""
    session = os.environ.get(envvars.NOTEBOOK)
    return Path(session).resolve().parent if session else Path.cwd()


def _cards(page: Path) -> set[str]:
    """The card anchors ``report.html`` holds: a report older than a finding has no card for it."""
    try:
        return set(_CARD_ID.findall(page.read_text(encoding="utf-8", errors="replace")))
    except OSError:
        return set()


def _relative(path: str | os.PathLike, base: Path) -> str:
    return Path(os.path.relpath(Path(path).resolve(), base)).as_posix()


def _link(href: str, text: str) -> str:
    return f"<a href='{html.escape(href, quote=True)}' target='_blank'>{text}</a>"


def findings_view(table: pd.DataFrame, out: str | os.PathLike, base: Path | None = None) -> pd.DataFrame:
    """The findings browser's rows (a ``findings.load`` table of folder ``out``), newest first, as HTML cells
    (text escaped): whole summaries, and in ``open`` a link, relative to ``base`` (default :func:`notebook_dir`),
    to the finding's card in the run's ``report.html`` (the folder above ``out``) where that page has one, else
    to the finding's JSON."""
    base = (base or notebook_dir()).resolve()
    page = Path(out).resolve().parent / "report.html"
    cards = _cards(page)

    def link(r: pd.Series) -> str:
        anchor = report.card_id(r["id"])
        if anchor in cards:
            return _link(f"{_relative(page, base)}#{anchor}", "card")
        return _link(_relative(r["path"], base), "JSON")

    rows = table.sort_values("created", ascending=False, kind="stable").reset_index(drop=True)
    view = rows[BROWSER_COLUMNS[:-1]].map(lambda v: "" if pd.isna(v) else html.escape(str(v)))
    return view.assign(open=[link(r) for _, r in rows.iterrows()] if len(rows) else [])


def findings_browser(table: pd.DataFrame, out: str | os.PathLike, *, interactive: bool = False) -> None:
    """Every finding (a ``findings.load`` table of folder ``out``, :func:`findings_view`'s rows) with its whole
    summary and a link to its card; interactively, an itables table that sorts, searches and pages, with
    DataTables inlined in the output from itables' wheel (nothing fetched); statically, all of it as one table."""
    view = findings_view(table, out)
    if not interactive:
        display(HTML(view.to_html(escape=False, index=False)))
        return
    import itables
    from itables import javascript, options

    # the bundle alone: init_notebook_mode (2.9.1) shows its dark-mode script before the bundle that script awaits,
    # which JupyterLab runs at once (an uncaught error there)
    display(HTML(javascript.generate_init_offline_itables_html(options.dt_bundle)))
    display(HTML(itables.to_html_datatable(view, **DATATABLES)))


def claim_tables(status: pd.DataFrame) -> None:
    """One table per claim (``report.claim_status``): its text as a heading, a row per engine and version."""
    for claim, rows in status.groupby("claim", sort=False):
        display(Markdown(f"**{claim}** — {rows['text'].iloc[0]}"))
        display(rows.drop(columns=["claim", "text"]).reset_index(drop=True))


def side_by_side(found: report.Found) -> None:
    """Per probe, each of its figures with every engine side by side (``report.side_by_side``): the
    findings that stand, a panel for an engine that did not run saying why."""
    for pf in report.side_by_side(found):
        display(Markdown(f"### {pf.probe}"))
        for _, fig in pf.figures:
            display(plots.show(fig))
