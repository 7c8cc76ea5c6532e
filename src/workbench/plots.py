"""Plotly figures of findings, shared by the notebooks and the HTML report.

Every figure is a pure function of a finding's evidence rows (or of a findings table), so the
same picture appears in JupyterLab, in an executed notebook and in ``report.html``; nothing here
talks to an engine. Rendering is offline and deterministic: notebooks get the plotly MIME bundle
(JupyterLab draws it with its bundled plotly renderer, so no plotly.js and no random div id lands in
the notebook), the report gets divs whose ids the caller chooses and plotly.js inlined once.
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Sequence

import plotly.colors
import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from . import metrics
from .events import figures as _event_figures
from .findings import Finding
from .standing import model_of

VERDICT_COLOURS = {
    "confirmed": "#2e7d32",
    "refuted": "#c62828",
    "partial": "#ef6c00",
    "inconclusive": "#757575",
    "not-applicable": "#1565c0",
    "not-run": "#9e9e9e",
}
TEMPLATE = "plotly_white"

Rows = Sequence[dict]
Builder = Callable[[Rows], go.Figure]


def _figure(title: str, x: str, y: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(template=TEMPLATE, title=title, xaxis_title=x, yaxis_title=y, height=420,
                      margin=dict(l=60, r=20, t=60, b=50), legend=dict(title=None))
    return fig


def empty(title: str, why: str) -> go.Figure:
    """A figure that says why there is nothing to draw (a not-run finding has no evidence rows)."""
    fig = _figure(title, "", "")
    fig.add_annotation(text=why, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper", xanchor="center")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def _having(rows: Rows, *keys: str) -> list[dict]:
    return [r for r in rows if all(r.get(k) is not None for k in keys)]


def curves(rows: Rows, *, x: str, y: str, group: str, title: str, x_title: str, y_title: str,
           log_x: bool = False, hover: Sequence[str] = ()) -> go.Figure:
    """One line per ``group`` value, ``y`` against ``x``, in the order the probe produced the groups."""
    rows = _having(rows, x, y, group)
    if not rows:
        return empty(title, "no evidence rows")
    fig = _figure(title, x_title, y_title)
    for g in dict.fromkeys(r[group] for r in rows):
        pts = sorted((r for r in rows if r[group] == g), key=lambda r: r[x])
        fig.add_trace(go.Scatter(
            x=[r[x] for r in pts], y=[r[y] for r in pts], mode="lines+markers", name=str(g),
            customdata=[[r.get(h) for h in hover] for r in pts],
            hovertemplate=f"{group}={g}<br>{x}=%{{x}}<br>{y}=%{{y:.3g}}"
                          + "".join(f"<br>{h}=%{{customdata[{i}]}}" for i, h in enumerate(hover)) + "<extra></extra>",
        ))
    if log_x:
        fig.update_xaxes(type="log")
    return fig


def survival(rows: Rows) -> go.Figure:
    """Retention: the share of the retained prefix still reused as filler load rises, one line per priority arm
    and repeat (a repeat is its own curve: joined across repeats, one arm's line would zig-zag)."""
    if len({r.get("repeat", 0) for r in rows}) > 1:
        rows = [r | {"arm": f"{r['arm']} · repeat {r.get('repeat', 0)}"} for r in _having(rows, "arm")]
    fig = curves(rows, x="pressure", y="survival", group="arm", log_x=True,
                 title="Survival of the retained prefix under pressure",
                 x_title="cumulative filler load (× free capacity; dotted: free capacity exhausted)",
                 y_title="survival (prefix held / prefix)",
                 hover=("engine_resident", "reused_tokens", "baseline_reused", "fillers_refused"))
    if rows:
        fig.update_yaxes(range=[-0.05, 1.05], tickformat=".0%")
        fig.add_vline(x=1.0, line_dash="dot", line_color="#999")
    return fig


def warmup(rows: Rows) -> go.Figure:
    """Warm-up: the share of each prefix a follow-up reuses, per boundary length, as pressure rises."""
    labelled = [r | {"length": f"{r['prefix_tokens']} tok ({r['boundary']})"} for r in _having(rows, "prefix_tokens")]
    fig = curves(labelled, x="pressure", y="fraction", group="length",
                 title="Prefix materialized by the warm-up, under pressure",
                 x_title="filler load between warm-up and follow-up (× free capacity)",
                 y_title="follow-up reuse (fraction of prefix)", hover=("followup_reused", "fillers_refused"))
    if labelled:
        fig.update_yaxes(range=[-0.05, 1.05], tickformat=".0%")
    return fig


def reuse_matrix(rows: Rows) -> go.Figure:
    """Reuse per matrix case: the token-id expectation next to what the cell and the engine reported.

    Cases repeat; bars show the mean over repeats and the hover counts how each repeat classified.
    """
    title = "Reuse per case: expected vs reported"
    rows = _having(rows, "case", "expected_reused", "reported_reused")
    if not rows:
        return empty(title, "no evidence rows")
    cases = list(dict.fromkeys(r["case"] for r in rows))
    fig = _figure(title, "case", "reused tokens")
    channels = [("expected_reused", "expected (token ids)", "#424242"), ("reported_reused", "reported (cell)", "#1565c0"),
                ("engine_reused", "engine accounting", "#8e24aa")]
    for key, name, colour in channels:
        means, hovers = [], []
        for c in cases:
            vals = [r[key] for r in rows if r["case"] == c and r.get(key) is not None]
            means.append(sum(vals) / len(vals) if vals else None)
            kinds = [r.get("reported_vs_expected" if key == "reported_reused" else "engine_vs_expected")
                     for r in rows if r["case"] == c]
            hovers.append("" if key == "expected_reused" else
                          ", ".join(f"{k} ×{kinds.count(k)}" for k in dict.fromkeys(kinds)))
        if all(m is None for m in means):
            continue
        fig.add_trace(go.Bar(x=cases, y=means, name=name, marker_color=colour, hovertext=hovers,
                             hovertemplate="%{x}<br>%{y:.1f} tokens<br>%{hovertext}<extra>" + name + "</extra>"))
    fig.update_layout(barmode="group")
    return fig


def timeline(rows: Rows, *, spans: Sequence[tuple[str, str]], lane: str, title: str) -> go.Figure:
    """Per-request timeline: each timed request as a bar, in the order the probe sent them.

    Rows carry durations, not timestamps, so requests are laid end to end; untimed work between
    them (fillers, cell start-up) is left out, which the axis title says.
    """
    timed = [r for r in rows if r.get(lane) is not None and any(r.get(k) is not None for k, _ in spans)]
    if not timed:
        return empty(title, "no timed requests")
    fig = _figure(title, "measured time, requests end to end (s)", lane)
    t = 0.0
    bars: dict[str, dict[str, list]] = {label: {"y": [], "x": [], "base": [], "text": []} for _, label in spans}
    for i, r in enumerate(timed):
        for key, label in spans:
            d = r.get(key)
            if d is None:
                continue
            b = bars[label]
            b["y"].append(str(r[lane]))
            b["x"].append(d)
            b["base"].append(t)
            b["text"].append(f"request {i} · {label} · {metrics.Unit.SECONDS.format(d)}")
            t += d
    for label, b in bars.items():
        if b["x"]:
            fig.add_trace(go.Bar(orientation="h", name=label, y=b["y"], x=b["x"], base=b["base"], hovertext=b["text"],
                                 hovertemplate="%{hovertext}<extra></extra>"))
    fig.update_layout(barmode="overlay")
    fig.update_yaxes(categoryorder="array", categoryarray=list(dict.fromkeys(str(r[lane]) for r in timed))[::-1])
    return fig


def latency(rows: Rows) -> go.Figure:
    """Isolation: time to the first token per procedure; a reuse leak shows as the other key looking warm."""
    title = "Time to first token per procedure"
    rows = _having(rows, "procedure", "ttft_s")
    if not rows:
        return empty(title, "no timed requests")
    fig = _figure(title, "procedure", "time to first token (s)")
    for proc in dict.fromkeys(r["procedure"] for r in rows):
        fig.add_trace(go.Box(y=[r["ttft_s"] for r in rows if r["procedure"] == proc], name=str(proc),
                             boxpoints="all", jitter=0.3, pointpos=0))
    fig.update_yaxes(type="log")
    fig.update_layout(showlegend=False)
    return fig


def capacity(rows: Rows) -> go.Figure:
    """Capacity policy: the budget asked for next to the capacity the engine really has, in tokens."""
    title = "KV budget vs measured capacity"
    rows = _having(rows, "budget_tokens", "measured_capacity_tokens")
    if not rows:
        return empty(title, "no evidence rows")
    x = [f"{r['budget_tokens']} tok" for r in rows]
    fig = _figure(title, "byte budget (as tokens)", "tokens")
    fig.add_trace(go.Bar(x=x, y=[r["budget_tokens"] for r in rows], name="budget"))
    fig.add_trace(go.Bar(x=x, y=[r["measured_capacity_tokens"] for r in rows], name="measured capacity",
                         hovertext=[r.get("measured_by") for r in rows]))
    fig.update_layout(barmode="group")
    return fig


def verdicts(table: Any) -> go.Figure:
    """A findings table (``report.verdict_frame``) as a figure, verdicts coloured."""
    cols = [c for c in ("probe", "engine", "engine_version", "model", "verdict", "summary", "metrics") if c in table]
    fig = go.Figure(go.Table(
        columnwidth=[3, 1.2, 1.2, 2, 1.3, 8, 4][:len(cols)],
        header=dict(values=cols, fill_color="#eeeeee", align="left"),
        cells=dict(values=[[str(v) if v is not None else "—" for v in table[c]] for c in cols], align="left",
                   fill_color=[[VERDICT_COLOURS.get(v, "#ffffff") + "33" for v in table["verdict"]]] * len(cols)),
    ))
    fig.update_layout(template=TEMPLATE, title="Verdicts", margin=dict(l=10, r=10, t=50, b=10),
                      height=120 + 60 * max(1, len(table)))
    return fig


BUILDERS: dict[str, Callable[..., go.Figure]] = {
    "survival": survival, "warmup": warmup, "reuse_matrix": reuse_matrix, "timeline": timeline,
    "latency": latency, "capacity": capacity,
    **_event_figures.BUILDERS,
}
"""The figure kinds a probe may declare (``Probe.figures``); the probe says which, with what options."""


def figures_of(probe: str) -> list[tuple[str, Builder]]:
    """The figures probe ``probe`` declares, as (name, builder over evidence rows); none for an unknown probe."""
    from . import probes

    try:
        declared = probes.get(probe).figures
    except probes.ParamError:
        return []
    return [(fig.name, partial(BUILDERS[fig.kind], **fig.options)) for fig in declared]


def for_finding(f: Finding, rows: Rows | None = None) -> list[tuple[str, go.Figure]]:
    """The figures of ``f`` (over ``rows`` when given, e.g. a filtered subset of its evidence)."""
    rows = f.evidence.get("rows", []) if rows is None else rows
    figs = []
    for name, build in figures_of(f.probe):
        fig = build(rows) if rows else empty(name, f"{f.verdict}: {f.reason or 'no evidence rows'}")
        fig.update_layout(title_text=f"{fig.layout.title.text} — {f.engine} · {(f.params or {}).get('model', '')}")
        figs.append((name, fig))
    return figs


def side_by_side(probe: str, findings: Sequence[Finding], engines: Sequence[str] = ()) -> list[tuple[str, go.Figure]]:
    """Each figure ``probe`` declares, as one figure with a panel per finding: the engines side by side.

    ``findings`` are the ones that stand (:func:`workbench.report.standing_findings` picks them by
    :mod:`workbench.standing`'s rule); each of ``engines`` without one still gets a panel that says so, so
    the reader sees every engine, and a not-run finding's panel gives its reason. Panels run the claims'
    subject engine first, then the references by name; each is drawn by the probe's own builder.
    """
    from . import probes

    declared = figures_of(probe)
    if not declared:
        return []
    subject = probes.get(probe).claim.subject
    cols = columns(probe, findings, engines)
    titles = [_panel_title(engine, f, subject) for engine, f in cols]
    hardware = sorted({(f.environment.get("hardware") or {}).get("summary") or "hardware not recorded"
                       for _, f in cols if f is not None and f.evidence.get("rows")})
    how = f"workbench probe {probe} · " + ("; ".join(hardware) if hardware else "nothing ran")
    out = []
    for name, build in declared:
        panels = [_panel(build, probe, engine, f) for engine, f in cols]
        title = build([]).layout.title.text  # every builder titles even an empty figure
        out.append((name, _compose(panels, titles, f"{title}<br><sup>{how}</sup>")))
    return out


def columns(probe: str, findings: Sequence[Finding], engines: Sequence[str] = ()) -> list[tuple[str, Finding | None]]:
    """The panels of ``probe``'s side-by-side figures, left to right, as (engine, finding or None): the
    claims' subject engine first, then the references by name; an engine's versions and models keep the
    order given; each of ``engines`` without a finding gets None."""
    from . import probes

    subject = probes.get(probe).claim.subject
    present = {f.engine for f in findings}
    return sorted([(f.engine, f) for f in findings] + [(e, None) for e in dict.fromkeys(engines) if e not in present],
                  key=lambda c: (c[0] != subject, c[0]))


def _panel_title(engine: str, f: Finding | None, subject: str) -> str:
    role = "subject" if engine == subject else "reference"
    if f is None:
        return f"<b>{engine}</b> · {role}<br>no finding"
    version = f.engine_version or ("" if f.verdict == "not-run" else "(version unknown)")
    # the date and probe version say which run a panel shows (the standing finding need not be the newest)
    return (f"<b>{engine}</b>{' ' + version if version else ''} · {role}<br>{model_of(f)} · {f.verdict}"
            f"<br>{f.created[:10]} · probe v{f.probe_version}")


def _wrapped(text: str, width: int = 42) -> str:
    """Plotly does not wrap text: a third of a page holds about 42 characters a line."""
    return "<br>".join(textwrap.wrap(text, width))


def _panel(build: Builder, probe: str, engine: str, f: Finding | None) -> go.Figure:
    """One engine's panel as a figure of its own: the builder's, or one that says why there is nothing.

    A not-run finding's reason is said here once (not in the panel's title); a finding whose rows hold
    nothing this figure draws (e.g. an engine with no eviction has no pressure sweep) says its verdict."""
    if f is None:
        return empty("", f"no {engine} finding here<br>workbench probe {probe} --engine {engine}")
    rows = f.evidence.get("rows", [])
    if not rows:
        return empty("", _wrapped(f"{f.verdict}: {f.reason or 'no evidence rows'}"))
    fig = build(rows)
    if not fig.data:
        why = _wrapped(f"{f.verdict}: {f.reason or f.summary}")
        return empty("", f"nothing in its rows for this figure<br><br>{why}")
    return fig


def _moved(item: Any, fig: go.Figure, col: int) -> dict:
    """A shape or note of a one-panel figure, moved to column ``col`` of ``fig``: axis references renamed,
    paper coordinates scaled into the column's domain (plotly.js lays out no axes, so no axis domain to
    refer to, for a subplot without traces, such as a not-run panel)."""
    d = item.to_plotly_json()
    n = "" if col == 1 else str(col)
    for axis in ("x", "y"):
        ref = d.get(f"{axis}ref") or "paper"
        if ref != "paper":
            d[f"{axis}ref"] = ref.replace(axis, f"{axis}{n}", 1)
            continue
        lo, hi = fig.layout[f"{axis}axis{n}"].domain
        for k in (axis, f"{axis}0", f"{axis}1"):
            if isinstance(d.get(k), (int, float)):
                d[k] = lo + d[k] * (hi - lo)
    return d


def _numeric(trace: Any, axis: str) -> bool:
    values = trace[axis]
    return values is not None and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                      for v in values if v is not None)


def _compose(panels: Sequence[go.Figure], titles: Sequence[str], title: str) -> go.Figure:
    """One row of subplots from one-panel figures: traces, axes, shapes and notes each moved to its column.

    Where the y axis carries numbers in every drawn panel it shows the same quantity in the same unit (one
    builder drew them all), so it is shared and named once; categorical lanes stay each panel's own and get
    room for their labels. x is never shared: engines sweep their own ranges (a timeline of a 135M model
    on llama.cpp would flatten a synthetic one on vLLM). A series keeps one colour and one legend entry.
    """
    drawn = [col for col, p in enumerate(panels, 1) if p.data]
    lanes = not all(_numeric(t, "y") for col in drawn for t in panels[col - 1].data)
    shared = len(drawn) > 1 and not lanes
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=list(titles),
                        horizontal_spacing=0.13 if lanes else 0.07)
    fig.update_annotations(font_size=12)  # the panel titles
    for col, p in enumerate(panels, 1):
        for t in p.data:
            fig.add_trace(t, row=1, col=col)
        for axis, update in (("xaxis", fig.update_xaxes), ("yaxis", fig.update_yaxes)):
            update({k: v for k, v in p.layout[axis].to_plotly_json().items() if k not in ("domain", "anchor")},
                   row=1, col=col)
        fig.update_xaxes(title_text=_wrapped(p.layout.xaxis.title.text or "", 50), row=1, col=col)
        for shape in p.layout.shapes:
            fig.add_shape(_moved(shape, fig, col))
        for note in p.layout.annotations:
            fig.add_annotation(_moved(note, fig, col))
    for col in drawn[1:] if shared else ():
        fig.update_yaxes(matches=f"y{'' if drawn[0] == 1 else drawn[0]}", title_text=None, row=1, col=col)
    palette, colours = plotly.colors.qualitative.Plotly, {}
    for t in fig.data:
        first_seen = t.name not in colours
        colours.setdefault(t.name, t.marker.color or palette[len(colours) % len(palette)])
        t.update(legendgroup=t.name, showlegend=first_seen, marker_color=colours[t.name])
        if "line" in t:
            t.update(line_color=colours[t.name])
    lead = panels[drawn[0] - 1].layout if drawn else go.Layout()
    fig.update_layout(template=TEMPLATE, title=title, height=500, barmode=lead.barmode,
                      showlegend=lead.showlegend is not False, margin=dict(l=60, r=20, t=110, b=130),
                      legend=dict(orientation="h", x=0, y=-0.3, yanchor="top", title=None))
    return fig


@dataclass(frozen=True)
class Shown:
    """A figure as a notebook output: the plotly MIME bundle plus a plain-text stand-in, no div id."""

    fig: go.Figure

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        return {"application/vnd.plotly.v1+json": json.loads(pio.to_json(self.fig, validate=False)),
                "text/plain": f"<figure: {_plain(self.fig.layout.title.text or 'untitled')}>"}


def _plain(title: str) -> str:
    """A figure title without its markup (line breaks as dashes)."""
    return re.sub(r"<[^>]+>", "", title.replace("<br>", " — "))


def show(fig: go.Figure) -> Shown:
    """Wrap for ``display``: offline, no plotly.js in the notebook, byte-identical across runs."""
    return Shown(fig)


def to_div(fig: go.Figure, div_id: str) -> str:
    """HTML for the report: the caller's ``div_id`` (deterministic), plotly.js loaded once by the page."""
    return fig.to_html(include_plotlyjs=False, full_html=False, div_id=div_id, config={"displaylogo": False})
