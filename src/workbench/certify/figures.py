"""The gates' figure kinds (registered in :data:`workbench.plots.BUILDERS`), pure functions of a
``gates.long_context`` finding's evidence rows (:mod:`.long_context`): the cold timed rows, one per arm, tier and run.
Timings the workbench took: they show, never confirm; the figure's subtitle names the findings' result class."""

from __future__ import annotations

from typing import Callable, Sequence

import plotly.graph_objects as go

from .. import plotstyle
from ..panels import percentile_traces
from .integrity import Percentiles


def prefill(rows: Sequence[dict]) -> go.Figure:
    """First-output time against the context tier, one series per arm: its p50, p90 and p95 over the runs at each
    tier (:func:`workbench.panels.percentile_traces`), the hover giving them with the run count; the figure's
    subtitle names the findings' result class and the run count (:func:`workbench.plots.side_by_side`)."""
    timed = [r for r in rows if r.get("kind") == "timed" and r.get("served") and r.get("first_output_s") is not None]
    fig = plotstyle.axes("First output vs context, cold", "context tier (tokens)", "first output (s)")
    for arm in dict.fromkeys(r["arm"] for r in timed):
        mine = [r for r in timed if r["arm"] == arm]
        tiers = sorted({int(r["tier"]) for r in mine})
        ps = [Percentiles.of(r["first_output_s"] for r in mine if int(r["tier"]) == t) for t in tiers]
        role = mine[0].get("role", "")
        fig.add_traces(percentile_traces(f"{arm} ({role})", tiers, ps, "ttft_cold_s", along="context tier",
                                         show=lambda v: f"{v:.3g} s"))
    fig.update_xaxes(type="log")
    return fig


BUILDERS: dict[str, Callable[..., go.Figure]] = {"gates_prefill": prefill}

__all__ = ["BUILDERS", "prefill"]
