"""The event-plane probes' figure kinds (registered in :data:`workbench.plots.BUILDERS`): pure functions of a
finding's evidence rows, like every figure of the report."""

from __future__ import annotations

from typing import Callable, Sequence

import plotly.graph_objects as go

from .. import plotstyle
from ..panels import draws


def _figure(title: str, x: str, y: str, why: str | None = None) -> go.Figure:
    fig = plotstyle.axes(title, x, y)
    if why:
        fig.add_annotation(text=why, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    return fig


def fidelity(rows: Sequence[dict]) -> go.Figure:
    """Predicted (the event inventory, per client arm) against reported (the engine) cached tokens per request."""
    rows = [r for r in rows if r.get("request") is not None and r.get("predicted") is not None]
    title = "Inventory prediction vs engine-reported reuse, per request"
    fig = _figure(title, "request", "cached tokens", None if rows else "no requests")
    if not rows:
        return fig
    first = rows[0].get("arm")
    engine = [r for r in rows if r.get("arm") == first]
    fig.add_trace(go.Bar(name="engine reported", x=[r["request"] for r in engine],
                         y=[r["reported"] or 0 for r in engine], marker_color="#bbb",
                         meta=draws("engine_reused_tokens", x="request")))
    for arm in dict.fromkeys(r.get("arm") for r in rows):
        mine = [r for r in rows if r.get("arm") == arm]
        fig.add_trace(go.Scatter(name=f"predicted · {arm or 'inventory'}", mode="markers+lines",
                                 x=[r["request"] for r in mine], y=[r["predicted"] for r in mine],
                                 meta=draws("inventory_predicted_hit_tokens", x="request")))
    return fig


def timeline(rows: Sequence[dict]) -> go.Figure:
    """The consumer's timeline: polls that brought events, gaps, replays and clears, by time and sequence number."""
    marks = [r for r in rows if r.get("t_s") is not None and r.get("mark")]
    fig = _figure("Event timeline: gaps and resyncs", "seconds since the consumer started", "",
                  None if marks else "no timeline")
    colours = {"events": "#1565c0", "gap": "#c62828", "replayed": "#2e7d32", "cleared": "#ef6c00"}
    for kind in dict.fromkeys(r["mark"] for r in marks):
        mine = [r for r in marks if r["mark"] == kind]
        fig.add_trace(go.Scatter(name=kind, mode="markers", x=[r["t_s"] for r in mine], y=[kind] * len(mine),
                                 meta=draws("elapsed_s", y="event kind"),
                                 marker=dict(size=[8 + min(r.get("count") or 0, 20) for r in mine],
                                             color=colours.get(kind)),
                                 hovertext=[f"seq {r.get('seq')} · {r.get('count')} · {r.get('detail') or ''}"
                                            for r in mine], hovertemplate="%{hovertext}<extra></extra>"))
    return fig


def loss_curve(rows: Sequence[dict]) -> go.Figure:
    """The share of the engine's stream each of several consumers on one endpoint received."""
    rows = [r for r in rows if r.get("seen_fraction") is not None]
    fig = _figure("Consumers on one endpoint: share of the stream each received", "consumer (1 holds the lease)",
                  "events received / stream", None if rows else "no consumers")
    if rows:
        fig.add_trace(go.Bar(name="share received", x=[f"{r['consumer']} ({r.get('lease')})" for r in rows],
                             y=[r["seen_fraction"] for r in rows], marker_color="#1565c0",
                             meta=draws("consumer_seen_fraction", x="consumer")))
        fig.update_yaxes(range=[0, 1.05], tickformat=".0%")
        fig.update_layout(showlegend=False)  # one series, which the axis title names
    return fig


BUILDERS: dict[str, Callable[..., go.Figure]] = {
    "events_fidelity": fidelity, "events_timeline": timeline, "events_loss_curve": loss_curve}
