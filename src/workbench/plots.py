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
import statistics
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Sequence

import plotly.graph_objects as go
import plotly.io as pio

from . import metrics, plotstyle
from . import panels as _panels
from .certify import figures as _certify_figures
from .evaltable import figures as _evaltable_figures
from .events import figures as _event_figures
from .gateway import pd_figures as _pd_figures
from .gateway import figures as _gateway_figures
from .transport import figures as _transport_figures
from .findings import Finding, model_of, short_reason
from .panels import SideBySide
from .probes import Figure

VERDICT_COLOURS = {
    "confirmed": "#2e7d32",
    "refuted": "#c62828",
    "partial": "#ef6c00",
    "inconclusive": "#757575",
    "not-applicable": "#1565c0",
    "not-run": "#9e9e9e",
}

Rows = Sequence[dict]
Builder = Callable[[Rows], go.Figure]


def empty(title: str, why: str) -> go.Figure:
    """A figure that says why there is nothing to draw (a not-run finding has no evidence rows)."""
    fig = plotstyle.axes(title, "", "")
    fig.add_annotation(text=why, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper", xanchor="center")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def _having(rows: Rows, *keys: str) -> list[dict]:
    return [r for r in rows if all(r.get(k) is not None for k in keys)]


def curves(rows: Rows, *, x: str, y: str, group: str, title: str, x_title: str, y_title: str, metric: str,
           along: str, log_x: bool = False, hover: Sequence[str] = ()) -> go.Figure:
    """One line per ``group`` value, ``y`` (the declared ``metric``) against ``x`` (what ``along`` names), in the
    order the probe produced the groups."""
    rows = _having(rows, x, y, group)
    if not rows:
        return empty(title, "no evidence rows")
    fig = plotstyle.axes(title, x_title, y_title)
    for g in dict.fromkeys(r[group] for r in rows):
        pts = sorted((r for r in rows if r[group] == g), key=lambda r: r[x])
        fig.add_trace(go.Scatter(
            x=[r[x] for r in pts], y=[r[y] for r in pts], mode="lines+markers", name=str(g),
            meta=_panels.draws(metric, x=along),
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
                 y_title="survival (prefix held / prefix)", metric="engine_reuse_fraction", along="filler load",
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
                 y_title="follow-up reuse (fraction of prefix)", metric="reuse_fraction", along="filler load",
                 hover=("followup_reused", "fillers_refused"))
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
    fig = plotstyle.axes(title, "case", "reused tokens")
    channels = [("expected_reused", "expected (token ids)", "#424242", "expected_reused_tokens"),
                ("reported_reused", "reported (cell)", "#1565c0", "reused_tokens"),
                ("engine_reused", "engine accounting", "#8e24aa", "engine_reused_tokens")]
    for key, name, colour, metric in channels:
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
                             meta=_panels.draws(metric, x="case"),
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
    fig = plotstyle.axes(title, "measured time, requests end to end (s)", lane)
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
                                 meta=_panels.draws("step_s", y=lane),
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
    fig = plotstyle.axes(title, "procedure", "time to first token (s)")
    procs = list(dict.fromkeys(r["procedure"] for r in rows))
    for i, proc in enumerate(procs):  # every trial as a point, spread across its lane, and the lane's median
        ys = [r["ttft_s"] for r in rows if r["procedure"] == proc]
        xs = [i + 0.3 * ((k * 0.618034) % 1 - 0.5) for k in range(len(ys))]  # a fixed spread: a redraw is identical
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name=str(proc), marker=dict(size=6, opacity=0.6),
                                 meta=_panels.draws("ttft_s", x="procedure")))
        fig.add_trace(go.Scatter(x=[i - 0.3, i + 0.3], y=[statistics.median(ys)] * 2, mode="lines", showlegend=False,
                                 meta=_panels.draws("ttft_s", x="procedure"),
                                 line=dict(color="#333", width=2), name=f"{proc} median", hoverinfo="name+y"))
    fig.update_xaxes(tickvals=list(range(len(procs))), ticktext=[str(p) for p in procs], range=[-0.6, len(procs) - 0.4])
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
    fig = plotstyle.axes(title, "byte budget (as tokens)", "tokens")
    fig.add_trace(go.Bar(x=x, y=[r["budget_tokens"] for r in rows], name="budget",
                         meta=_panels.draws("budget_tokens", x="byte budget")))
    fig.add_trace(go.Bar(x=x, y=[r["measured_capacity_tokens"] for r in rows], name="measured capacity",
                         meta=_panels.draws("measured_capacity_tokens", x="byte budget"),
                         hovertext=[r.get("measured_by") for r in rows]))
    fig.update_layout(barmode="group")
    return fig


def _absent(v: Any) -> bool:
    """None, or pandas' NaN for a missing value (a not-run finding's engine version read "nan")."""
    return v is None or (isinstance(v, float) and v != v)


def verdicts(table: Any) -> go.Figure:
    """A findings table (``report.verdict_frame``) as a figure, verdicts coloured."""
    cols = [c for c in ("probe", "engine", "engine_version", "model", "verdict", "summary", "metrics") if c in table]
    fig = plotstyle.new(go.Table(
        columnwidth=[3, 1.2, 1.2, 2, 1.3, 8, 4][:len(cols)],
        header=dict(values=cols, fill_color="#eeeeee", align="left"),
        cells=dict(values=[["—" if _absent(v) else str(v) for v in table[c]] for c in cols], align="left",
                   fill_color=[[VERDICT_COLOURS.get(v, "#ffffff") + "33" for v in table["verdict"]]] * len(cols)),
    ))
    fig.update_layout(title="Verdicts", margin=dict(l=10, r=10, t=50, b=10),
                      height=120 + 60 * max(1, len(table)))
    return fig


# --------------------------------------------------------------------------- the agentic loop
# Over the loop's arm findings (loop.results.Loop declares them): evidence rows are one per turn and arm
# (loop/replay.py's columns), an engine's arms together in its panel; the speed-ups are one row per arm.


def _by_arm(rows: Rows, *keys: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in _having(rows, "arm", "step", *keys):
        out.setdefault(str(r["arm"]), []).append(r)
    return {a: sorted(rs, key=lambda r: r["step"]) for a, rs in out.items()}


def loop_ttft(rows: Rows) -> go.Figure:
    """Time to first token per turn, one line per arm: reuse shows as a warm arm's flat line."""
    title = "TTFT per turn, per arm"
    arms = _by_arm(rows, "ttft_s")
    if not arms:
        return empty(title, "no timed turns")
    fig = plotstyle.axes(title, "turn (in replay order)", "time to first token (s)")
    for arm, rs in arms.items():
        fig.add_trace(go.Scatter(x=[r["step"] for r in rs], y=[r["ttft_s"] for r in rs], mode="lines+markers",
                                 name=arm, customdata=[[r.get("prompt"), r.get("computed")] for r in rs],
                                 meta=_panels.draws("ttft_s", x="turn"),
                                 hovertemplate="prompt %{customdata[0]} · computed %{customdata[1]}<br>"
                                               "TTFT %{y:.3f} s<extra>" + arm + "</extra>"))
    fig.update_yaxes(type="log")
    fig.update_xaxes(dtick=1)
    return fig


def loop_reuse(rows: Rows) -> go.Figure:
    """Tokens each arm reused per turn against what could have been reused (the turn's theoretical reuse)."""
    title = "Reused vs theoretically reusable tokens, per turn"
    arms = _by_arm(rows, "reused", "theoretical")
    if not arms:
        return empty(title, "no evidence rows")
    fig = plotstyle.axes(title, "turn (in replay order)", "prompt tokens")
    fig.update_xaxes(dtick=1)
    first = next(iter(arms.values()))
    fig.add_trace(go.Scatter(x=[r["step"] for r in first], y=[r["theoretical"] for r in first], mode="lines",
                             name="theoretical", line=dict(dash="dash", color="#212121"),
                             meta=_panels.draws("expected_reused_tokens", x="turn")))
    for arm, rs in arms.items():
        fig.add_trace(go.Scatter(x=[r["step"] for r in rs], y=[r["reused"] for r in rs], mode="markers",
                                 name=f"reused · {arm}", meta=_panels.draws("reused_tokens", x="turn")))
    return fig


def loop_attribution(rows: Rows) -> go.Figure:
    """Per arm, where every prompt token went, summed over the loop: reused, or recomputed and why."""
    from .loop.attribution import CATEGORIES

    title = "Per-miss attribution, summed over the loop"
    arms = _by_arm(rows, "reused")
    if not arms:
        return empty(title, "no evidence rows")
    fig = plotstyle.axes(title, "arm", "prompt tokens")
    for col in ("reused", *CATEGORIES):
        sums = [sum(r.get(col) or 0 for r in rs) for rs in arms.values()]
        if any(sums) or col == "unexplained":
            fig.add_trace(go.Bar(x=list(arms), y=sums, name=col.replace("_", " "), meta=_panels.draws(
                {"reused": "reused_tokens", "unexplained": "unexplained_miss_tokens"}.get(col, "computed_tokens"),
                x="arm")))
    fig.update_layout(barmode="relative")
    return fig


def loop_speedup(rows: Rows) -> go.Figure:
    """Each arm's loop-time speed-up over the best llama.cpp arm with its bootstrap CI (rows: one per arm, its
    parameters and metrics); an arm whose CI is over fewer than :data:`.loop.stats.FEW_TURNS` turns says so
    under its name."""
    from .loop.stats import FEW_TURNS

    title = "Speed-up over the best llama.cpp arm (loop time, 95% CI)"
    value, low, high = "speedup_vs_best_llamacpp", "speedup_ci_low", "speedup_ci_high"
    ran = _having(rows, "arm", value, low, high)
    if not ran:
        return empty(title, "no arm with a speed-up")
    fig = plotstyle.axes(title, "arm", "speed-up (×)")
    fig.add_trace(go.Bar(x=[r["arm"] for r in ran], y=[r[value] for r in ran], name="speed-up",
                         marker_color="#1565c0", meta=_panels.draws(value, x="arm"),
                         error_y=dict(type="data", symmetric=False, array=[r[high] - r[value] for r in ran],
                                      arrayminus=[r[value] - r[low] for r in ran])))
    fig.add_hline(y=1, line_dash="dot", line_color="#999")
    few = {r["speedup_turns"] for r in ran if r.get("speedup_turns", FEW_TURNS) < FEW_TURNS}
    if len(few) == 1 and all(r.get("speedup_turns") in few for r in ran):  # said once, under the axis
        fig.update_xaxes(title_text=f"arm (CI over {few.pop():g} turns)")
    else:  # under each arm whose CI is over few turns (a two-line tick ran into its neighbours when said by all)
        fig.update_xaxes(tickmode="array", tickvals=[r["arm"] for r in ran], ticktext=[
            r["arm"] + (f"<br>CI over {r['speedup_turns']:g} turns" if r.get("speedup_turns") in few else "")
            for r in ran])
    fig.update_layout(showlegend=False)
    return fig


BUILDERS: dict[str, Callable[..., go.Figure]] = {
    "survival": survival, "warmup": warmup, "reuse_matrix": reuse_matrix, "timeline": timeline,
    "latency": latency, "capacity": capacity,
    "loop_ttft": loop_ttft, "loop_reuse": loop_reuse, "loop_attribution": loop_attribution, "loop_speedup": loop_speedup,
    **_event_figures.BUILDERS,
    **_pd_figures.BUILDERS,
    **_gateway_figures.BUILDERS,
    **_evaltable_figures.BUILDERS,
    **_transport_figures.BUILDERS,
    **_certify_figures.BUILDERS,
}
"""The figure kinds a declaration may name (``probes.Declared.figures``: a probe's, the loop's), with its options."""


Panels = Sequence[tuple[str, Sequence[Finding]]]


def _declared(probe: str) -> list[tuple[Figure, Builder]]:
    from . import probes

    decl = probes.declared(probe)
    return [(fig, partial(BUILDERS[fig.kind], **fig.options)) for fig in (decl.figures if decl else ())]


def figures_of(probe: str) -> list[tuple[str, Builder]]:
    """The figures behind findings named ``probe`` (a probe's, or a loop arm's: ``probes.declared``), as (name,
    builder over rows); none for a name nothing declares."""
    return [(fig.name, build) for fig, build in _declared(probe)]


def rows_of(fig: Figure, found: Sequence[Finding]) -> list[dict]:
    """What ``fig`` draws of ``found``: their evidence rows, or one row per finding of its parameters and metric
    values (``Figure.rows``)."""
    if fig.rows == "metrics":
        return [dict(f.params) | {k: m.get("value") for k, m in f.metrics.items()} for f in found]
    return [r for f in found for r in f.evidence.get("rows", [])]


def for_finding(f: Finding, rows: Rows | None = None) -> list[tuple[str, go.Figure]]:
    """The figures of ``f`` (its evidence ``rows`` when given, e.g. a filtered subset)."""
    figs = []
    for decl, build in _declared(f.probe):
        data = rows_of(decl, [f]) if rows is None or decl.rows != "evidence" else rows
        fig = build(data) if data else empty(decl.name, f"{f.verdict}: {f.reason or 'no evidence rows'}")
        _panels.label_units(fig, f.engine)
        said = _panels.integrity_words([_class_of([f])], [fig], [1])
        sub = "".join(f"<br><sup>{line}</sup>" for line in _panels.wrapped(said, 100).split("<br>"))
        fig.update_layout(title_text=f"{fig.layout.title.text} — {f.engine} · {(f.params or {}).get('model', '')}"
                                     + sub, margin_t=60 + 16 * sub.count("<br>"))
        figs.append((decl.name, plotstyle.log_ticks(fig)))
    return figs


def side_by_side(probe: str, findings: Sequence[Finding], engines: Sequence[str] = ()) -> list[SideBySide]:
    """Each figure ``probe`` declares, with the engines side by side (:mod:`workbench.panels`' one style): a panel per
    engine (version, model) whose findings draw something, and the caption naming each engine that draws nothing,
    with why (no finding here, not-run and its reason in a few words, no rows of this figure).

    ``findings`` are the ones that stand (:func:`workbench.report.standing_findings` picks them by
    :mod:`workbench.standing`'s rule); a panel draws an engine's (version's, model's) findings together (one for
    a probe, one per arm for the loop); each of ``engines`` without one is named in the caption. Panels run the
    claims' subject engine first, then the references by name; each is drawn by the declared builder.
    """
    from . import probes

    declared = _declared(probe)
    if not declared:
        return []
    decl = probes.declared(probe)
    cols = columns(probe, findings, engines)
    ran = [f for _, fs in cols for f in fs if f.evidence.get("rows")]
    hardware = sorted({(f.environment.get("hardware") or {}).get("summary") or "hardware not recorded" for f in ran})
    how = f"{decl.obtained(ran)} · " + ("; ".join(hardware) if hardware else "nothing ran")
    out = []
    for fig, build in declared:
        title = build([]).layout.title.text  # every builder titles even an empty figure
        drawn, absent = [], []
        for engine, fs in cols:
            panel, why = _panel(build, fig, engine, fs)
            if panel is None:
                absent.append(_panels.Absent(_label(engine, fs), why))
                continue
            _panels.label_units(panel, engine)
            drawn.append(_Drawn(panel, _panel_title(engine, fs, decl.claim.subject), model_of(fs[0]),
                                _class_of(fs), _runs(fs)))
        said = _panels.integrity_words([d.result_class for d in drawn], [d.panel for d in drawn],
                                       [d.runs for d in drawn])
        composed = (_panels.compose([d.panel for d in drawn], [d.title for d in drawn], title,
                                    [d.model for d in drawn], [how, said], [d.result_class for d in drawn])
                    if drawn else None)
        out.append(SideBySide(fig.name, _panels.plain(title), composed, tuple(absent), len(drawn),
                              said if drawn else ""))
    return out


@dataclass(frozen=True)
class _Drawn:
    """One engine's panel of a side-by-side figure, with what its title and subtitle say of it."""

    panel: go.Figure
    title: str
    model: str
    result_class: str
    runs: int


def _class_of(found: Sequence[Finding]) -> str:
    """The result class of the findings a panel draws (benchmark integrity's, as :mod:`workbench.certify.integrity`
    reads it; several joined where a panel's findings differ)."""
    from .certify.integrity import result_class

    ran = [f for f in found if f.verdict != "not-run"] or list(found)
    return " + ".join(dict.fromkeys(result_class(f)[0] for f in ran))


def _runs(found: Sequence[Finding]) -> int:
    """Runs a panel draws of one series' source: the most findings of one probe (each one run of its workload;
    the loop's arms are a probe each)."""
    per: dict[str, int] = {}
    for f in found:
        if f.verdict != "not-run" and f.evidence.get("rows"):
            per[f.probe] = per.get(f.probe, 0) + 1
    return max(per.values(), default=1)


def columns(probe: str, findings: Sequence[Finding], engines: Sequence[str] = ()) -> list[tuple[str, list[Finding]]]:
    """The panels of ``probe``'s side-by-side figures, left to right, as (engine, its findings): one panel per
    engine, version and model that ran (the loop's arms of one engine share it), and one for an engine that ran
    nowhere here, its not-run findings together (a pass for another engine reports it not-run on that pass's model:
    a second panel would repeat it); the claims' subject engine first, then the references by name; an engine's
    versions and models keep the order given; each of ``engines`` without a finding (nor one of its served twin's)
    gets a column with none, which the caption names."""
    from . import probes

    subject = probes.declared(probe).claim.subject
    groups: dict[tuple[str, str | None, str], list[Finding]] = {}
    for f in findings:
        groups.setdefault((f.engine, f.engine_version, model_of(f)), []).append(f)
    ran = {f.engine for f in findings if f.verdict != "not-run"}
    kept: dict[tuple, list[Finding]] = {}
    for k, fs in groups.items():  # an engine's not-run findings: one slim panel, none beside a panel where it ran
        if all(f.verdict == "not-run" for f in fs):
            if k[0] in ran:
                continue
            k = (k[0], None, "")
        kept.setdefault(k, []).extend(fs)
    from . import cells

    # an engine with no finding here is named, unless its served twin (or the engine a served one runs) has one
    present = {f.engine for f in findings} | {cells.runs(f.engine) for f in findings}
    return sorted([(k[0], fs) for k, fs in kept.items()]
                  + [(e, []) for e in dict.fromkeys(engines) if e not in present and cells.runs(e) not in present],
                  key=lambda c: (c[0] != subject, c[0]))


def _panel_title(engine: str, found: Sequence[Finding], subject: str) -> str:
    """A drawn panel's title: the engine and version, its role, the model and verdicts, and which run it shows."""
    role = "subject" if engine == subject else "reference"
    ran = [f for f in found if f.verdict != "not-run"]
    f = max(ran, key=lambda f: f.created)
    version = f.engine_version or "(version unknown)"
    verdicts = " · ".join(dict.fromkeys(f.verdict for f in ran))
    # the date and probe version say which run a panel shows (the standing finding need not be the newest)
    return (f"<b>{engine}</b> {version} · {role}<br>{model_of(f)} · {verdicts}"
            f"<br>{f.created[:10]} · probe v{f.probe_version}")


def _label(engine: str, found: Sequence[Finding]) -> str:
    """An engine as a caption names it: with the version and model of its findings that ran, where any did."""
    ran = [f for f in found if f.verdict != "not-run"]
    if not ran:
        return engine
    f = max(ran, key=lambda f: f.created)
    return f"{engine} {f.engine_version or '(version unknown)'} on {model_of(f)}"


def _panel(build: Builder, fig: Figure, engine: str, found: Sequence[Finding]) -> tuple[go.Figure | None, str]:
    """One engine's panel as a figure of its own, its series drawn with the same points merged
    (:func:`workbench.panels.merge_identical`); or None and why it draws nothing, in a few words (a not-run
    finding's reason: the report gives it in full once; findings whose rows hold nothing this figure draws, e.g.
    an engine with no eviction has no pressure sweep: their verdict, whose summary the report gives)."""
    if not found:
        return None, "no finding here"
    ran = [f for f in found if f.verdict != "not-run"]
    if not ran:
        return None, f"not-run: {short_reason(found[0].reason)}"
    verdicts = ", ".join(dict.fromkeys(f.verdict for f in ran))
    if not any(f.evidence.get("rows") for f in ran):
        return None, f"{verdicts}, no evidence rows"
    drawn = build(rows_of(fig, [f for f in ran if f.evidence.get("rows")]))
    if not drawn.data:
        return None, f"{verdicts}, nothing of this figure in its rows"
    return _panels.merge_identical(drawn), ""


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


def _house() -> dict:
    return pio.templates[plotstyle.TEMPLATE].to_plotly_json()


def page_script(plotlyjs: str) -> str:
    """What the report runs once, in its head: plotly.js gzip-compressed and base64-encoded (0.5 MB where the
    text is 1.2 MB), unpacked by the browser's own ``DecompressionStream`` (no network, works from ``file://``),
    its licence header kept readable. Until it is evaluated ``Plotly.newPlot`` waits on it, so each figure
    :func:`to_div` wrote draws once plotly.js is ready, wearing the house template where it was written without one
    (7 kB a figure, the same in each)."""
    import base64
    import gzip

    from plotly.io.json import to_json_plotly

    header = re.match(r"\s*/\*.*?\*/", plotlyjs, re.S)
    packed = base64.b64encode(gzip.compress(plotlyjs.encode(), 9, mtime=0)).decode()
    return ((header.group(0).strip() + "\n" if header else "")
            + "(function () { var template = " + to_json_plotly(_house()) + ";\n"
            "var packed = \"" + packed + "\";\n"
            "var bytes = Uint8Array.from(atob(packed), function (c) { return c.charCodeAt(0); });\n"
            "var ready = new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream(\"gzip\")))"
            ".text().then(function (js) {\n"
            "  var s = document.createElement(\"script\"); s.textContent = js; document.head.appendChild(s);\n"
            "  var P = window.Plotly, plot = P.newPlot;\n"
            "  P.newPlot = function (div, data, layout, config) {\n"
            "    return plot(div, data, Object.assign({template: template}, layout), config); };\n"
            "  return P; });\n"
            "window.Plotly = {newPlot: function (div, data, layout, config) {\n"
            "  return ready.then(function (P) { return P.newPlot(div, data, layout, config); }); }}; })();")


def to_div(fig: go.Figure, div_id: str) -> str:
    """HTML for the report: the caller's ``div_id`` (deterministic), plotly.js loaded once by the page, and the house
    template left to :func:`page_script` where the figure wears it."""
    d = fig.to_plotly_json()
    if d["layout"].get("template") == _house():
        d["layout"] = {k: v for k, v in d["layout"].items() if k != "template"}
    return pio.to_html(d, include_plotlyjs=False, full_html=False, div_id=div_id, config={"displaylogo": False},
                       validate=False)
