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
