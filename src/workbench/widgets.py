"""Notebook views: ipywidgets explorers in JupyterLab, static tables and figures everywhere else.

Whether widgets are used is the notebook's explicit ``interactive`` parameter (False by default),
never a guess from the environment: papermill and nbval have no widget frontend, and an executed
notebook must read the same wherever it ran. Static mode shows everything the explorer can show.
"""

from __future__ import annotations

import html
from typing import Sequence

import pandas as pd
from IPython.display import HTML, Markdown, display

from . import claims, plots, report
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


def findings_browser(table: pd.DataFrame, *, interactive: bool = False) -> None:
    """Every finding (a ``findings.load`` table), newest first; interactively, filtered by dropdowns."""
    cols = ["created", "probe", "engine", "engine_version", "model", "verdict", "summary"]
    table = table[cols].sort_values("created", ascending=False, kind="stable").reset_index(drop=True)
    if not (interactive and len(table)):
        display(table)
        return
    import ipywidgets as w

    pickers = {c: w.Dropdown(options=["(all)", *sorted(table[c].dropna().astype(str).unique())], description=c)
               for c in ("probe", "engine", "verdict")}
    area = w.Output()

    def redraw(_: object = None) -> None:
        keep = pd.Series(True, index=table.index)
        for c, p in pickers.items():
            if p.value != "(all)":
                keep &= table[c].astype(str) == p.value
        with area:
            area.clear_output(wait=True)
            display(table[keep])

    for p in pickers.values():
        p.observe(redraw, names="value")
    redraw()
    display(w.VBox([w.HBox(list(pickers.values())), area]))


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
