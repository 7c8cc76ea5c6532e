"""The gates' figure kinds (registered in :data:`workbench.plots.BUILDERS`), pure functions of a
``gates.long_context`` finding's evidence rows (:mod:`.long_context`): the cold timed rows, one per arm, tier and run.
Timings the workbench took: they show, never confirm; every point is a raw backend control."""

from __future__ import annotations

from typing import Callable, Sequence

import plotly.graph_objects as go

from .. import plotstyle
from .integrity import Percentiles


def prefill(rows: Sequence[dict]) -> go.Figure:
    """First-output time against the context tier, one line per arm through the p50 over its runs, the bar up to
    the p95 and down to the fastest run; the hover gives p50 · p90 · p95 and the run count."""
    timed = [r for r in rows if r.get("kind") == "timed" and r.get("served") and r.get("first_output_s") is not None]
    fig = plotstyle.axes("First output vs context, cold (raw_backend_control)", "context tier (tokens)",
                         "first output (s)")
    for arm in dict.fromkeys(r["arm"] for r in timed):
        mine = [r for r in timed if r["arm"] == arm]
        tiers = sorted({int(r["tier"]) for r in mine})
        ps = [Percentiles.of(r["first_output_s"] for r in mine if int(r["tier"]) == t) for t in tiers]
        lows = [min(r["first_output_s"] for r in mine if int(r["tier"]) == t) for t in tiers]
        role = mine[0].get("role", "")
        fig.add_trace(go.Scatter(
            x=tiers, y=[p.p50 for p in ps], mode="lines+markers", name=f"{arm} ({role})",
            error_y=dict(type="data", symmetric=False, array=[p.p95 - p.p50 for p in ps],
                         arrayminus=[p.p50 - lo for p, lo in zip(ps, lows)]),
            text=[p.text(lambda v: f"{v:.3g} s") for p in ps], hovertemplate="%{x} tokens: %{text}<extra></extra>"))
    fig.update_xaxes(type="log")
    return fig


BUILDERS: dict[str, Callable[..., go.Figure]] = {"gates_prefill": prefill}

__all__ = ["BUILDERS", "prefill"]
