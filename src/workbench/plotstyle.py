"""The house style of every figure: one template, given to a figure as plotly gives its own default.

``update_layout(template=…)`` deep-copies and validates the template's hundreds of properties for each figure
(26 ms here), as does the public ``pio.templates.default`` setter: half of all figure time (the report's 136
figures of a ``make run``: 15.9 s, 8.0 s without). A new figure takes the default template unvalidated (1.5 ms), so
:func:`new` and :func:`subplots` make the house template the default while they build a figure, and only then (a
user's own figures in the same kernel keep theirs). It is set on the registry's own field, as the setter would
after validating a name that is registered (plotly/io/_templates.py); tests/test_plots.py checks that it took.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Iterator

import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

TEMPLATE = "plotly_white"


@contextlib.contextmanager
def _house_default() -> Iterator[None]:
    templates = pio.templates
    before, templates._default = templates._default, TEMPLATE
    try:
        yield
    finally:
        templates._default = before


def new(*data: Any, **kwargs: Any) -> go.Figure:
    """``go.Figure(*data, **kwargs)`` in the house template."""
    with _house_default():
        return go.Figure(*data, **kwargs)


def subplots(**kwargs: Any) -> go.Figure:
    """``make_subplots(**kwargs)`` in the house template."""
    with _house_default():
        return make_subplots(**kwargs)


def axes(title: str, x: str, y: str) -> go.Figure:
    """An empty one-panel figure with its title and axis titles: where each figure builder starts."""
    fig = new()
    fig.update_layout(title=title, xaxis_title=x, yaxis_title=y, height=420, margin=dict(l=60, r=20, t=60, b=50),
                      legend=dict(title=None))
    return fig


NICE = (1, 2, 5)  # the ticks of each decade a log axis labels, in full ("0.02", not plotly's bare "2")
MAX_TICKS = 9


def _values(fig: go.Figure) -> dict[str, list[float]]:
    """Each axis's positive finite values, over every trace drawn on it or on an axis that matches it."""
    out: dict[str, list[float]] = {}
    for t in fig.data:
        for axis in ("x", "y"):
            ref = getattr(t, f"{axis}axis", None) or axis
            name = f"{axis}axis{ref[1:]}"
            root = fig.layout[name].matches if name in fig.layout and fig.layout[name].matches else ref
            values = t[axis] if t[axis] is not None else ()
            out.setdefault(f"{axis}axis{root[1:]}", []).extend(
                float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)
                and math.isfinite(v) and v > 0)
    return out


def _decades(lo: float, hi: float) -> list[float]:
    """1, 2 and 5 of each decade within [lo, hi]; fewer per decade where they would crowd the axis."""
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    for marks in (NICE, (1,)):
        ticks = [m * 10.0 ** k for k in range(first, last + 1) for m in marks if lo <= m * 10.0 ** k <= hi]
        if len(ticks) <= MAX_TICKS:
            return ticks
    step = math.ceil((last - first + 1) / MAX_TICKS)
    return [10.0 ** k for k in range(first, last + 1, step) if lo <= 10.0 ** k <= hi]


def log_ticks(fig: go.Figure) -> go.Figure:
    """Every log axis of ``fig`` labelled in full where its values span a decade or more (plotly's own log ticks
    read "5, 2, 0.1, 5": a digit for each tick between powers of ten), and linear where they span less (one tick
    or two would be all a log axis shows); axes matched to another get the same ticks."""
    values = _values(fig)
    for name, axis in ((k, fig.layout[k]) for k in list(fig.layout.to_plotly_json()) if k[1:5] == "axis"):
        if axis.type != "log":
            continue
        vals = values.get(f"{name[0]}axis{axis.matches[1:]}" if axis.matches else name) or []
        if not vals:
            continue
        lo, hi = min(vals), max(vals)
        if hi < 10 * lo:
            axis.update(type="linear", dtick=None, tickvals=None, ticktext=None)
            continue
        ticks = _decades(lo, hi)
        axis.update(dtick=None, tickvals=ticks, ticktext=[f"{v:g}" for v in ticks])
    return fig
