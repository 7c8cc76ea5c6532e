"""The one figure style of the engines side by side: a panel only for an engine whose findings draw something, each
engine that draws nothing named in the caption with why, and every trace labelled with the quantity it shows.

``plots.side_by_side`` builds one one-panel figure per engine with the probe's declared builder, then :func:`compose`
lays the ones that drew something out as one row of plotly subplots, each on axes of its own. What can mislead a
reader is ruled out here, once, for every figure kind:

- *two quantities on one axis*: a builder draws one axis pair (one that draws on a second, as plotly's own
  ``make_subplots`` would, is refused: its traces would land on the first panel's axes in another unit), and each
  trace names the metric it draws (:func:`draws`: one :mod:`workbench.metrics` declares, with its unit), from which
  :func:`label_units` stamps the quantity it shows on its axis (``meta``); a trace that names none is refused, never
  labelled with its axis title (which every trace on the axis shares, so two quantities on it looked like one), and a
  page check sees two quantities meet on one axis;
- *a panel with no data*: an engine without a finding, that did not run, or whose rows hold nothing this figure
  draws gets no panel; the caption says which and why (``Absent``);
- *a series hidden under another*: series a builder drew with the same points (arms that reused the same tokens,
  lengths that all survived) become one trace named by all of them (``a = b``), so the legend never lists a series
  the plot does not show;
- *engines compared across models*: panels share their quantity axis only when the same builder drew the same
  quantity on the same model within a decade of each other; otherwise each panel keeps its own axis, titled, and the
  subtitle says why.
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass
from typing import Any, Sequence

import plotly.colors
import plotly.graph_objects as go

from . import metrics, plotstyle

NARROWEST_PLOT_PX, CHAR_PX = 700, 7  # a figure's plot area at its narrowest (two figures side by side on a 1920 px
#                                     page; one alone spans 880 px at 1024); a 12 px character
HALF_PLOT_PX = 390  # a one-panel figure's plot area: the report sets it beside another (half of a 1024 px page)
SUP_PX = 6.2  # a subtitle's (<sup>) character
SHARE_SPAN = 10.0  # panels share their quantity axis only where their largest values lie within this factor


@dataclass(frozen=True)
class Absent:
    """An engine (its panel's label) that gets no panel in a figure, and why: said in the figure's caption."""

    engine: str
    why: str

    def words(self) -> str:
        return f"{self.engine} ({self.why})"


@dataclass(frozen=True)
class SideBySide:
    """One declared figure of a probe with the engines side by side: the figure (None where no engine drew anything)
    and the engines it has no panel for."""

    name: str
    title: str  # the builder's title, plain text
    fig: go.Figure | None
    absent: tuple[Absent, ...] = ()
    panels: int = 0  # engines drawn (1: laid out for half a page, beside another)
    integrity: str = ""  # its result class and p50/p90/p95 with the run count, as its subtitle says them

    @property
    def caption(self) -> str:
        """The engines without a panel, in one sentence (empty where every engine has one)."""
        if not self.absent:
            return ""
        said = "; ".join(a.words() for a in self.absent)
        return (f"Not drawn: no engine has data for this figure: {said}." if self.fig is None
                else f"No panel for {said}.")


def plain(text: str | None) -> str:
    """A plotly title without its markup (line breaks as spaces)."""
    return " ".join(re.sub(r"<[^>]+>", " ", (text or "").replace("<br>", " ")).split())


def _fit(title: str, share: float) -> str:
    """A panel title's lines wrapped to what its column holds on the narrowest page (its ``share`` of the plot
    area): plotly centres a subplot title on its column and never wraps it, so a long line ran into the next
    panel's title. The engine's name (in bold) stays whole on the first line, with its version and role where they
    fit, and no word is broken (a model's name read "SmolL / M2" when cut to the column)."""
    chars = max(10, int(share * NARROWEST_PLOT_PX / CHAR_PX))
    head, *rest = title.split("<br>")
    if len(plain(head)) > chars and "</b>" in head:  # the engine alone, its version and role on the next line
        bold, _, tail = head.partition("</b>")
        head, rest = bold + "</b>", [tail.strip(), *rest]
    return "<br>".join([head] + [w for line in rest
                                 for w in textwrap.wrap(line, chars, break_on_hyphens=False, break_long_words=False)
                                 or [""]])


def wrapped(text: str, width: int = 42) -> str:
    """Plotly does not wrap text: a third of a page holds about 42 characters a line (no word broken)."""
    return "<br>".join(textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False))


# --------------------------------------------------------------------------- what each trace shows


def _axis_title(fig: go.Figure, axis: str) -> str:
    """The title of axis ``axis`` (``xaxis``, ``yaxis2``) of a one-panel figure, or "fraction (%)" where only its
    tick format says so: what :func:`shares_y` compares (the quantities themselves come from the traces)."""
    a = fig.layout[axis] if axis in fig.layout else None
    if a is None:
        return ""
    said = plain(a.title.text if a.title else "")
    if said:
        return said
    return "fraction (%)" if a.tickformat and "%" in a.tickformat else ""


_QUANTITY = {metrics.Unit.TOKENS: "tokens", metrics.Unit.BLOCKS: "blocks", metrics.Unit.BYTES: "bytes",
             metrics.Unit.SECONDS: "time", metrics.Unit.RATIO: "fraction", metrics.Unit.COUNT: "count",
             metrics.Unit.BOOL: "yes/no", metrics.Unit.P: "p-value", metrics.Unit.TIMES: "times",
             metrics.Unit.LOGIT: "logit", metrics.Unit.SD: "standard deviations",
             metrics.Unit.TOKENS_PER_S: "throughput", metrics.Unit.REQUESTS_PER_S: "request rate"}
_BARE = {metrics.Unit.RATIO, metrics.Unit.BOOL, metrics.Unit.P, metrics.Unit.LOGIT}  # no unit to name beside


def quantity(tag: str, unit: str | None = None) -> str:
    """The quantity a trace drawing metric ``tag`` shows, in the unit it is drawn in (``unit``: a display unit its
    declared one converts to, e.g. ms for seconds; default the declared one): ``time (s)``, ``time (ms)``,
    ``fraction``, ``tokens``. Two traces on one axis must show one quantity in one unit."""
    m = metrics.get(tag)
    shown = unit or m.unit.value
    if shown != m.unit.value:
        m.unit.convert(1.0, shown)  # a ValueError names the units it converts to
    name = _QUANTITY[m.unit]
    if shown == name or (unit is None and m.unit in _BARE):
        return name
    return f"{name} ({'×' if shown == 'x' else shown})"


def draws(metric: str, *, x: str | None = None, y: str | None = None, unit: str | None = None,
          stat: str | None = None, runs: Sequence[int] | int | None = None) -> dict:
    """What one trace draws, as a builder gives it in the trace's ``meta``: the declared ``metric`` (its quantity
    from its unit, drawn in ``unit`` where given) on the axis left unnamed, against what the other axis shows (``x``:
    a shape, a turn, a context tier; ``y`` for bars laid horizontally); where both are named (a strip of categories),
    the metric is what each marker's colour shows. ``stat``: what each point is over repeated runs (``p50``, ``p90``,
    ``p95``), with the ``runs`` behind each point (benchmark integrity's run count); absent, each point is one
    measurement or a figure of one run."""
    if (x is None) and (y is None):
        raise ValueError(f"draws({metric!r}): name what the other axis shows (x= or y=)")
    quantity(metric, unit)  # declared, and the unit is one it converts to
    out: dict[str, Any] = {"metric": metric, "unit": unit, "x": x, "y": y}
    if stat is not None:
        out |= {"stat": stat, "runs": [runs] if isinstance(runs, int) else list(runs or ())}
    return out


def label_units(panel: go.Figure, engine: str) -> None:
    """Stamp each trace of a one-panel figure with the quantities it shows (``meta``: ``x``, ``y``, the ``metric`` and
    its panel): on the axis the builder's :func:`draws` left unnamed, the quantity of the metric it draws (from the
    metric's declared unit, never from the axis title, which every trace on the axis shares); on the other, what the
    builder named. Refused: a trace that names no declared metric (its quantity cannot be told from its axis's), and
    a trace drawn on a second axis pair (:func:`compose` lays out one axis pair per panel)."""
    for t in panel.data:
        own = t.meta if isinstance(t.meta, dict) else {}
        axes = (getattr(t, "xaxis", None) or "x", getattr(t, "yaxis", None) or "y")
        if axes != ("x", "y"):
            raise ValueError(f"a figure builder drew {t.name or 'a trace'!r} on axes {axes[0]}/{axes[1]}: a panel has "
                             "one axis pair; draw each quantity as a figure of its own")
        tag = own.get("metric")
        if not tag or tag not in metrics.METRICS:
            raise ValueError(f"a figure builder drew {t.name or 'a trace'!r} without naming the declared metric it "
                             f"draws (panels.draws; got {tag!r}): its quantity would be its axis title, which every "
                             "trace on the axis shares, so two quantities on one axis would read as one")
        q = quantity(tag, own.get("unit"))
        t.meta = {"panel": engine, "metric": tag, "x": own.get("x") or q, "y": own.get("y") or q,
                  **{k: own[k] for k in ("stat", "runs") if k in own}}


PERCENTILE_MARKS = (("p50", "circle"), ("p90", "diamond-open"), ("p95", "triangle-up-open"))
"""How a figure over repeated runs marks each percentile (one colour and one legend entry per series): p50 a filled
marker on the series' line, p90 ◇, p95 △; the figure's subtitle says so and gives the run count."""
MARKS_WORDS = "p50 ●, p90 ◇, p95 △"


def percentile_traces(name: str, x: Sequence[Any], ps: Sequence[Any], metric: str, *, along: str,
                      unit: str | None = None, show: Any = None, line: bool = True) -> list[go.Scatter]:
    """A series over repeated runs as benchmark integrity publishes it: at each ``x`` its p50, p90 and p95 over the
    runs (``ps``: :class:`workbench.certify.integrity.Percentiles`, None where no run gave a value), drawn in
    ``unit`` (a display unit of the metric's); the p50's marker on the series' line (``line``), the p90's and
    p95's beside it, all under one name (one colour, one legend entry), the hover giving all three with the run
    count. Grouped beside other series at one category where the layout's ``scattermode`` is ``group``."""
    scale = metrics.get(metric).unit.convert(1.0, unit) if unit else 1.0
    out = []
    for stat, symbol in PERCENTILE_MARKS:
        first = stat == "p50"  # p90 and p95 only where several runs spread them (over one run they are its value)
        kept = [(xv, p) for xv, p in zip(x, ps) if p is not None and (first or p.runs > 1)]
        if not kept:
            continue
        xs, runs = [xv for xv, _ in kept], [p.runs for _, p in kept]
        text = [p.text(show) if show else p.text() for _, p in kept]
        out.append(go.Scatter(
            x=xs, y=[getattr(p, stat) * scale for _, p in kept], name=name, offsetgroup=name,
            mode="lines+markers" if first and line else "markers", showlegend=first,
            marker=dict(symbol=symbol, size=9 if first else 10), text=text,
            hovertemplate=f"%{{x}} · {stat} %{{y:.3g}}<br>%{{text}}<extra>{name}</extra>",
            meta=draws(metric, x=along, unit=unit, stat=stat, runs=runs)))
    return out


def integrity_words(classes: Sequence[str], panels: Sequence[go.Figure], runs: Sequence[int]) -> str:
    """What a figure publishes, in one line of its subtitle (benchmark integrity): the result class of the findings
    it draws (each engine's where they differ: mixed classes are never compared) and its p50/p90/p95 over repeated
    runs with the run count, from the traces' ``stat`` (:func:`percentile_traces`); a figure with none draws each
    run's own values, and says how many runs (``runs``: per panel) and that it gives no percentiles across them."""
    said = list(dict.fromkeys(classes))
    head = (f"result class {said[0]}" if len(said) == 1 else
            f"result classes {', '.join(said)} (mixed classes: not compared)") if said else "no result class"
    counts = [n for p in panels for t in p.data if isinstance(t.meta, dict) and t.meta.get("stat")
              for n in t.meta.get("runs") or ()]
    if counts:
        lo, hi = min(counts), max(counts)
        n = f"{lo}" if lo == hi else f"{lo}–{hi}"
        one = "; 1 run: no spread" if lo == 1 else ""
        return f"{head} · p50 · p90 · p95 over {n} run{'' if n == '1' else 's'} of the whole workload " \
               f"({MARKS_WORDS}){one}"
    n = max(runs or [1])
    each = "1 run: its own values" if n == 1 else f"{n} runs drawn together, each point one run's own"
    return f"{head} · {each}, no p50 · p90 · p95 across runs"


def quantities(panel: go.Figure, axis: str = "y") -> set[str]:
    """The quantities a labelled panel's traces show on ``axis``."""
    return {t.meta.get(axis) for t in panel.data if isinstance(t.meta, dict) and t.meta.get(axis)}


# --------------------------------------------------------------------------- series that would hide each other


def _points(t: Any) -> str | None:
    """What a trace draws, where an identical one would hide it: its kind and points (None: it cannot hide)."""
    if t.type not in ("scatter", "bar"):
        return None
    key = {k: t[k] for k in ("x", "y", "base", "orientation") if k in t and t[k] is not None}
    if "x" not in key and "y" not in key:
        return None
    mode = t.mode if t.type == "scatter" else ""
    own = t.meta if isinstance(t.meta, dict) else {}
    shows = quantity(own["metric"], own.get("unit")) if own.get("metric") in metrics.METRICS else None
    return json.dumps([t.type, mode, shows, {k: list(v) if isinstance(v, (tuple, list)) else v
                                             for k, v in key.items()}], sort_keys=True, default=str)


def _joined(names: Sequence[str]) -> str:
    """Names of series drawn as one: ``reused · a = b`` where they share a leading ``… · ``."""
    names = [n for n in dict.fromkeys(names) if n]
    if not names:
        return ""
    head = names[0].rsplit(" · ", 1)[0] + " · " if " · " in names[0] else ""
    if head and all(n.startswith(head) for n in names):
        return head + " = ".join(n[len(head):] for n in names)
    return " = ".join(names)


def merge_identical(panel: go.Figure) -> go.Figure:
    """One trace for each set of series drawn with the same points, named by all of them (bars of a group, or
    stacked, sit side by side or on each other and hide nothing: only overlaid ones merge)."""
    overlaid = panel.layout.barmode in (None, "overlay")
    seen: dict[str, int] = {}
    names: list[list[str]] = []
    kept: list[Any] = []
    for t in panel.data:
        key = _points(t) if (t.type != "bar" or overlaid) else None
        if key is not None and key in seen:
            names[seen[key]].append(t.name or "")
            continue
        if key is not None:
            seen[key] = len(kept)
        kept.append(t)
        names.append([t.name or ""])
    if len(kept) == len(panel.data):
        return panel
    for t, ns in zip(kept, names):
        if len(ns) > 1:
            t.name = _joined(ns)
            if t.hovertemplate and "<extra>" in t.hovertemplate:
                t.hovertemplate = re.sub(r"<extra>.*?</extra>", f"<extra>{t.name}</extra>", t.hovertemplate)
    panel.data = kept
    return panel


# --------------------------------------------------------------------------- composing the panels


def _numeric(trace: Any, axis: str) -> bool:
    values = trace[axis]
    return values is not None and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                      for v in values if v is not None)


def _largest(panel: go.Figure) -> float:
    """The largest value a panel draws on its quantity axis (bars and error bars included)."""
    top = 0.0
    for t in panel.data:
        for v in (t.y or ()):
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                top = max(top, abs(v))
    return top


def shares_y(panels: Sequence[go.Figure], models: Sequence[str], classes: Sequence[str] = ()) -> tuple[bool, str]:
    """Whether the drawn panels share their quantity axis, and where they do not (and there are several), why: the
    same quantity (one builder's axis title, one quantity of its traces), numbers on every panel, one result class
    (mixed classes are never compared), one model, and largest values within :data:`SHARE_SPAN` of each other (a
    shared linear axis flattened 0.09 s bars beside 3.9 s ones)."""
    if len(panels) < 2:
        return False, ""
    if not all(_numeric(t, "y") for p in panels for t in p.data):
        return False, ""  # categorical lanes: each panel its own, as its labels need
    if len({_axis_title(p, "yaxis") for p in panels}) > 1 or len(set().union(*(quantities(p) for p in panels))) > 1:
        return False, "each panel on its own axes: they show different quantities"
    if len(set(classes)) > 1:
        return False, "each panel on its own axes: their result classes differ, and mixed classes are never compared"
    if len(set(models)) > 1:
        return False, f"each panel on its own axes: the models differ ({', '.join(dict.fromkeys(models))}), so " \
                      "the panels do not compare engines"
    tops = [t for t in (_largest(p) for p in panels) if t > 0]
    if tops and max(tops) > SHARE_SPAN * min(tops):
        return False, "each panel on its own axes: their values lie over a decade apart"
    return True, ""


def _moved(item: Any, fig: go.Figure, col: int) -> dict:
    """A shape or note of a one-panel figure, moved to column ``col`` of ``fig``: axis references renamed, paper
    coordinates scaled into the column's domain."""
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


def _colour(fig: go.Figure) -> None:
    """A series keeps one colour and one legend entry across the panels; an unnamed trace (one series, said by the
    axis title) stays out of the legend (plotly would call it "trace 0")."""
    palette, colours = plotly.colors.qualitative.Plotly, {}
    for t in fig.data:
        first_seen = t.name not in colours
        own = t.marker.color or (t.line.color if "line" in t else None)  # a builder's own colour (a median's grey)
        colours.setdefault(t.name, own or palette[len(colours) % len(palette)])
        t.update(legendgroup=t.name, showlegend=first_seen and bool(t.name), marker_color=colours[t.name])
        if "line" in t:
            t.update(line_color=colours[t.name])


def _subtitle(lines: Sequence[str], width_px: float) -> str:
    """Subtitle lines (small type) wrapped to the figure's width, each as plotly's ``<sup>``."""
    chars = max(30, int(width_px / SUP_PX))
    return "".join(f"<br><sup>{w}</sup>" for line in lines if line
                   for w in textwrap.wrap(line, chars, break_long_words=False, break_on_hyphens=False))


def compose(panels: Sequence[go.Figure], titles: Sequence[str], title: str, models: Sequence[str],
            subtitle: str | Sequence[str] = "", classes: Sequence[str] = ()) -> go.Figure:
    """One row of plotly subplots from one-panel figures that each drew something (traces, axes, shapes and notes
    moved to their column), each panel on axes of its own unless :func:`shares_y` says they share the quantity
    axis (then named once). x is never shared: engines sweep their own ranges. A one-panel figure is laid out for
    half a page (the report sets two side by side): its titles wrapped to that width."""
    shared, why = shares_y(panels, models, classes)
    lanes = len(panels) > 1 and not all(_numeric(t, "y") for p in panels for t in p.data)
    spacing = 0.07 if shared else 0.11 if not lanes else 0.13
    width = HALF_PLOT_PX if len(panels) == 1 else NARROWEST_PLOT_PX
    share = (1 - spacing * (len(panels) - 1)) / len(panels) * width / NARROWEST_PLOT_PX
    titles = [_fit(t, share) for t in titles]
    fig = plotstyle.subplots(rows=1, cols=len(panels), subplot_titles=titles, horizontal_spacing=spacing)
    fig.update_annotations(font_size=12)  # the panel titles
    for col, p in enumerate(panels, 1):
        for t in p.data:
            fig.add_trace(t, row=1, col=col)
        for axis, update in (("xaxis", fig.update_xaxes), ("yaxis", fig.update_yaxes)):
            update({k: v for k, v in p.layout[axis].to_plotly_json().items() if k not in ("domain", "anchor")},
                   row=1, col=col)
        fig.update_xaxes(title_text=wrapped(p.layout.xaxis.title.text or "", 50), row=1, col=col)
        fig.update_yaxes(title_text=wrapped(p.layout.yaxis.title.text or "", 40), row=1, col=col)
        for shape in p.layout.shapes:
            fig.add_shape(_moved(shape, fig, col))
        for note in p.layout.annotations:
            fig.add_annotation(_moved(note, fig, col))
    for col in range(2, len(panels) + 1) if shared else ():
        fig.update_yaxes(matches="y", title_text=None, row=1, col=col)
    _colour(fig)
    lead = panels[0].layout
    sub = title + _subtitle([*([subtitle] if isinstance(subtitle, str) else subtitle), why], width + 90)
    # the title at the top of the figure, the panels' titles below it, the legend at the bottom: each in its own
    # band, so no text overlaps at any page width (tests/browser checks 1024–1920 px)
    fig.update_layout(height=560, barmode=lead.barmode, scattermode=lead.scattermode,
                      showlegend=lead.showlegend is not False,
                      title=dict(text=sub, x=0.5, xanchor="center", y=0.97, yref="container", yanchor="top"),
                      margin=dict(l=70, r=20, t=70 + 16 * (sub.count("<br>") - 1)
                                  + 16 * max(t.count("<br>") + 1 for t in titles), b=140),
                      legend=dict(orientation="h", x=0, y=0.01, yref="container", yanchor="bottom", title=None))
    return plotstyle.log_ticks(fig)
