"""The P/D probe's figure kinds (registered in :data:`workbench.plots.BUILDERS`): pure functions of a finding's
evidence rows (:mod:`workbench.probes.gateway_pd`)."""

from __future__ import annotations

from typing import Callable, Sequence

import plotly.graph_objects as go

from .. import plotstyle


def ttft_split(rows: Sequence[dict]) -> go.Figure:
    """Time to the first token on one engine and through P/D, the P/D bar split into its context leg and the rest
    (the KV transfer and the first decode step)."""
    timed = {r["run"]: r for r in rows if r.get("ttft_s") is not None and r.get("run") in ("single", "P/D")}
    fig = plotstyle.axes("Time to first token: one engine vs P/D", "", "seconds")
    if not timed:
        fig.add_annotation(text="no timed runs", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
        return fig
    runs = list(timed)
    context = [timed[r].get("context_s") or 0.0 for r in runs]
    fig.add_trace(go.Bar(name="context leg (prefill, store)", x=runs, y=context, marker_color="#90caf9"))
    fig.add_trace(go.Bar(name="transfer + first decode step", x=runs,
                         y=[timed[r]["ttft_s"] - c for r, c in zip(runs, context)], marker_color="#1565c0"))
    fig.update_layout(barmode="stack")
    return fig


def cached_tokens(rows: Sequence[dict]) -> go.Figure:
    """The answering engine's own cached tokens (``usage``) per run, against its prompt tokens."""
    shown = [r for r in rows if r.get("prompt_tokens") is not None]
    fig = plotstyle.axes("Engine-reported cached prompt tokens per run", "", "tokens")
    fig.add_trace(go.Bar(name="prompt", x=[r["run"] for r in shown], y=[r["prompt_tokens"] for r in shown],
                         marker_color="#bbb"))
    fig.add_trace(go.Bar(name="cached (engine usage)", x=[r["run"] for r in shown],
                         y=[r.get("cached_tokens") or 0 for r in shown], marker_color="#2e7d32"))
    return fig


BUILDERS: dict[str, Callable[..., go.Figure]] = {"pd_ttft_split": ttft_split, "pd_cached_tokens": cached_tokens}
