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
from . import findings as _findings
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


#: The findings browser's columns, in order: ``open`` links each row to its finding's card or JSON (first, so a
#: narrow output area never pushes it off-screen); ``claims`` gives each claim row's verdict (a search for "refuted"
#: finds every finding that refutes a claim, whatever its headline verdict).
BROWSER_COLUMNS = ["open", "created", "probe", "engine", "engine_version", "model", "verdict", "claims", "summary"]
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


def run_findings(out: str | os.PathLike) -> Path:
    """The findings folder a notebook reads: where the notebook is an executed copy inside a run folder
    (``RUN/notebooks/…/NAME.ipynb``, beside ``RUN/findings`` and ``RUN/run.json``), that run's own findings, so a run
    folder copied or moved elsewhere reads itself, not the folder ``out`` named when it ran (an absolute path);
    else ``out``."""
    session = os.environ.get(envvars.NOTEBOOK)
    if session:
        for parent in Path(session).resolve().parents:
            if parent.name == "notebooks" and (parent.parent / "findings").is_dir() \
                    and (parent.parent / "run.json").is_file():
                return parent.parent / "findings"
    return Path(out)


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


def jupyter_server() -> tuple[str, Path] | None:
    """(base URL, root folder) of the Jupyter server this kernel runs under (its parent process), None outside one
    (papermill, nbval, a plain Python): jupyter_server's own record of its running servers."""
    try:
        from jupyter_server.serverapp import list_running_servers
    except ImportError:
        return None
    parent = os.getppid()
    for info in list_running_servers():
        if info.get("pid") == parent and info.get("root_dir"):
            return str(info.get("base_url") or "/"), Path(info["root_dir"]).resolve()
    return None


def served_url(path: Path, anchor: str, server: tuple[str, Path] | None) -> str | None:
    """``path#anchor`` as the Jupyter server serves the file itself (``/files/…``), where it is under its root: a
    link JupyterLab leaves to the browser (it opens relative ones in its own HTML viewer, untrusted, so no figure
    draws, and drops the anchor), which opens the page in a tab of its own, its scripts run, on the anchor."""
    if server is None:
        return None
    base, root = server
    try:
        rel = Path(path).resolve().relative_to(root)
    except ValueError:
        return None
    from urllib.parse import quote

    return f"{base.rstrip('/')}/files/{quote(rel.as_posix())}#{anchor}"


def findings_view(table: pd.DataFrame, out: str | os.PathLike, base: Path | None = None) -> pd.DataFrame:
    """The findings browser's rows (a ``findings.load`` table of folder ``out``), newest first, as HTML cells
    (text escaped): whole summaries, and in ``open`` a link, relative to ``base`` (default :func:`notebook_dir`),
    to the finding's card in the run's ``report.html`` (the folder above ``out``) where that page has one, else
    to the finding's JSON."""
    base = (base or notebook_dir()).resolve()
    page = Path(out).resolve().parent / "report.html"
    cards = _cards(page)
    server = jupyter_server()

    def link(r: pd.Series) -> str:
        anchor = report.card_id(r["id"])
        if anchor in cards:
            return _link(served_url(page, anchor, server) or f"{_relative(page, base)}#{anchor}", "card")
        return _link(_relative(r["path"], base), "JSON")

    rows = table.sort_values("created", ascending=False, kind="stable").reset_index(drop=True)
    by_id = {f.id: f for _, f in _findings.scan([out]).findings} if len(rows) else {}
    said = [_claim_verdicts(by_id.get(i)) for i in rows["id"]]
    shown = [c for c in BROWSER_COLUMNS if c not in ("open", "claims")]
    view = rows[shown].map(lambda v: "" if _missing(v) else html.escape(str(v)))
    view.insert(0, "open", [link(r) for _, r in rows.iterrows()] if len(rows) else [])
    view.insert(BROWSER_COLUMNS.index("claims"), "claims", said)
    return view[BROWSER_COLUMNS]


def _missing(v: object) -> bool:
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):  # a list is never "missing"
        return False


def _claim_verdicts(f: Finding | None) -> str:
    """Each claim the finding cites with the verdict it gives that claim's row (its own, else the finding's)."""
    if f is None:
        return ""
    return html.escape("; ".join(f"{c} {f.verdict_on(c)}" for c in dict.fromkeys([*f.claims, *f.claim_verdicts])))


def findings_browser(table: pd.DataFrame, out: str | os.PathLike, *, interactive: bool = False) -> None:
    """Every finding (a ``findings.load`` table of folder ``out``, :func:`findings_view`'s rows) with its whole
    summary and a link to its card; interactively, an itables table that sorts, searches and pages, with
    DataTables inlined in the output from itables' wheel (nothing fetched); statically, all of it as one table."""
    view = findings_view(table, out)
    if not interactive:
        display(HTML(static_table(view)))
        return
    import itables
    from itables import javascript, options

    # the bundle alone: init_notebook_mode (2.9.1) shows its dark-mode script before the bundle that script awaits,
    # which JupyterLab runs at once (an uncaught error there)
    display(HTML(javascript.generate_init_offline_itables_html(options.dt_bundle)))
    display(HTML(itables.to_html_datatable(view, **DATATABLES)))


#: The static browser's layout, inline (an output carries no stylesheet): four columns that fit JupyterLab's output
#: area (nine of them, a date and a model name among them, ran 50 % past its right edge, the summary and the links
#: off-screen), text left-aligned and wrapping between words, never inside an identifier.
_CELL = "padding: 0.25em 0.5em; text-align: left; vertical-align: top; white-space: normal"
_WORD = "<span style='white-space: nowrap'>{}</span>"


def _whole(html_text: str) -> str:
    """Escaped text whose words never break (each a ``nowrap`` span): model names, probe and claim ids."""
    return " ".join(_WORD.format(w) for w in html_text.split())


def static_table(view: pd.DataFrame) -> str:
    """:func:`findings_view`'s rows as one static HTML table that fits the output area: the finding (its link, probe
    and time), the engine with its version and model, its verdict with each claim's, and the whole summary."""
    heads = ["finding", "engine · model", "verdict · per claim", "summary"]
    rows = []
    for r in view.itertuples(index=False):
        claims_ = "<br>".join(_whole(c) for c in r.claims.split("; ") if c)
        cells = [f"{r.open} {_whole(r.probe)}<br><span style='color: #777'>{_whole(r.created.replace('T', ' '))}</span>",
                 f"{_whole(f'{r.engine} {r.engine_version}'.strip())}<br>{_whole(r.model)}",
                 f"<b>{r.verdict}</b>" + (f"<br><span style='font-size: 0.85em'>{claims_}</span>" if claims_ else ""),
                 r.summary]
        rows.append("<tr>" + "".join(f"<td style='{_CELL}'>{c}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th style='{_CELL}'>{h}</th>" for h in heads)
    return (f"<table class='dataframe wb-findings' style='table-layout: auto; width: 100%; max-width: 100%'>"
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")


def claim_tables(status: pd.DataFrame) -> None:
    """One table per claim (``report.claim_status``): its text as a heading, a row per engine and version."""
    for claim, rows in status.groupby("claim", sort=False):
        display(Markdown(f"**{claim}** — {rows['text'].iloc[0]}"))
        display(rows.drop(columns=["claim", "text"]).reset_index(drop=True))


def side_by_side(found: report.Found) -> None:
    """Per probe, each of its figures with the engines side by side (``report.side_by_side``): the findings that
    stand, a panel for each engine that drew something, and under it the caption naming those that did not."""
    for pf in report.side_by_side(found):
        display(Markdown(f"### {pf.probe}"))
        show_figures(pf.figures)


def show_figures(figures: Sequence[plots.SideBySide]) -> None:
    """Side-by-side figures (``plots.side_by_side``) as a notebook shows them: each figure, then its caption (the
    engines it has no panel for, and why); a figure no engine drew is its title and caption alone."""
    for side in figures:
        if side.fig is not None:
            display(plots.show(side.fig))
        if side.caption:
            display(Markdown(f"*{'' if side.fig is not None else side.title + ': '}{side.caption}*"))
