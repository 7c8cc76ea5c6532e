"""The gateway probes' figure kinds (registered in :data:`workbench.plots.BUILDERS`): pure functions of a
finding's evidence rows."""

from __future__ import annotations

from typing import Callable, Sequence

import plotly.graph_objects as go

from .. import plotstyle
from ..panels import draws


def _shapes(rows: Sequence[dict], title: str, y: str) -> tuple[list[dict], go.Figure]:
    rows = [r for r in rows if r.get("kind") == "shape"]
    fig = plotstyle.axes(title, "shape", y)
    if not rows:
        fig.add_annotation(text="no shapes", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    return rows, fig


def hit_rate(rows: Sequence[dict]) -> go.Figure:
    """Per shape: the engine-read hit rate (with its interval) beside the workbench-computed best placement. One
    quantity on one axis: the shapes' TTFT is a figure of its own (:func:`ttft`; drawn in one figure, its seconds
    sat on this axis's percent)."""
    rows, fig = _shapes(rows, "Prefix-cache hit rate per shape", "hit rate (engine-read)")
    if not rows:
        return fig
    x = [r["shape"] for r in rows]
    fig.add_trace(go.Bar(name="engine-read hit rate", x=x, y=[r["engine_hit_rate"] for r in rows],
                         marker_color="#1565c0", meta=draws("shape_hit_rate", x="shape"), error_y=dict(
                             type="data", symmetric=False,
                             array=[r["hit_ci_high"] - r["engine_hit_rate"] for r in rows],
                             arrayminus=[r["engine_hit_rate"] - r["hit_ci_low"] for r in rows])))
    fig.add_trace(go.Scatter(name="best placement (workbench-computed)", x=x, y=[r["best_hit_rate"] for r in rows],
                             mode="markers", marker=dict(symbol="line-ew-open", size=28, color="#c62828"),
                             meta=draws("routing_best_hit_rate", x="shape")))
    fig.update_yaxes(tickformat=".0%", range=[0, 1.05])
    return fig


def ttft(rows: Sequence[dict]) -> go.Figure:
    """Per shape: time to the first token, p50 (with its interval) and p95."""
    rows, fig = _shapes(rows, "Time to first token per shape", "time to first token (s)")
    if not rows:
        return fig
    x = [r["shape"] for r in rows]
    fig.add_trace(go.Bar(name="TTFT p50", x=x, y=[r["ttft_p50_s"] for r in rows], marker_color="#2e7d32",
                         meta=draws("ttft_s", x="shape"),
                         error_y=dict(type="data", symmetric=False,
                                      array=[r["ttft_p50_ci_high"] - r["ttft_p50_s"] for r in rows],
                                      arrayminus=[r["ttft_p50_s"] - r["ttft_p50_ci_low"] for r in rows])))
    fig.add_trace(go.Scatter(name="TTFT p95", x=x, y=[r["ttft_p95_s"] for r in rows], mode="markers",
                             marker=dict(color="#ef6c00", size=10), meta=draws("ttft_s", x="shape")))
    return fig


def inventory(rows: Sequence[dict]) -> go.Figure:
    """Blocks in each endpoint's event inventory over the run."""
    rows = [r for r in rows if r.get("kind") == "inventory"]
    fig = plotstyle.axes("Inventory per endpoint over time", "seconds since the pool started", "blocks")
    for ep in dict.fromkeys(r["endpoint"] for r in rows):
        mine = [r for r in rows if r["endpoint"] == ep]
        fig.add_trace(go.Scatter(name=ep, mode="lines", line_shape="hv", x=[r["t_s"] for r in mine],
                                 y=[r["inventory_blocks"] for r in mine], meta=draws("inventory_blocks", x="elapsed time")))
    if not rows:
        fig.add_annotation(text="no inventory", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    return fig


BUILDERS: dict[str, Callable[..., go.Figure]] = {"gateway_hit_rate": hit_rate, "gateway_ttft": ttft,
                                                 "gateway_inventory": inventory}
