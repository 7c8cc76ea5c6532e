"""The P/D probe's figure kinds (registered in :data:`workbench.plots.BUILDERS`): pure functions of a finding's
evidence rows (:mod:`workbench.probes.gateway_pd`)."""

from __future__ import annotations

import statistics
from typing import Callable, Sequence

import plotly.graph_objects as go

from .. import plotstyle


def ttft_split(rows: Sequence[dict]) -> go.Figure:
    """Median time to the first token on one engine and through P/D, the P/D bar split into its context leg and
    the rest (the KV transfer and the first decode step)."""
    timed = [r for r in rows if r.get("ttft_s") is not None and r.get("run") in ("single", "P/D")]
    fig = plotstyle.axes("Time to first token: one engine vs P/D (median)", "", "seconds")
    if not timed:
        fig.add_annotation(text="no timed runs", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
        return fig
    runs = list(dict.fromkeys(r["run"] for r in timed))
    ttft = [statistics.median(r["ttft_s"] for r in timed if r["run"] == run) for run in runs]
    context = [statistics.median(r.get("context_s") or 0.0 for r in timed if r["run"] == run) for run in runs]
    fig.add_trace(go.Bar(name="context leg (prefill, store)", x=runs, y=context, marker_color="#90caf9"))
    fig.add_trace(go.Bar(name="transfer + first decode step", x=runs, y=[t - c for t, c in zip(ttft, context)],
                         marker_color="#1565c0"))
    fig.update_layout(barmode="stack")
    return fig


def cached_tokens(rows: Sequence[dict]) -> go.Figure:
    """The answering engine's own cached tokens (``usage``) per run, against its prompt tokens."""
    shown = [r for r in rows if r.get("prompt_tokens") is not None and r.get("repeat") is None]
    fig = plotstyle.axes("Engine-reported cached prompt tokens per run", "", "tokens")
    fig.add_trace(go.Bar(name="prompt", x=[r["run"] for r in shown], y=[r["prompt_tokens"] for r in shown],
                         marker_color="#bbb"))
    fig.add_trace(go.Bar(name="cached (engine usage)", x=[r["run"] for r in shown],
                         y=[r.get("cached_tokens") or 0 for r in shown], marker_color="#2e7d32"))
    return fig


BUILDERS: dict[str, Callable[..., go.Figure]] = {"pd_ttft_split": ttft_split, "pd_cached_tokens": cached_tokens}
