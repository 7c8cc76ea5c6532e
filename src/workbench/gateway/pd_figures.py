"""The P/D probe's figure kinds (registered in :data:`workbench.plots.BUILDERS`): pure functions of a finding's
evidence rows (:mod:`workbench.probes.gateway_pd`)."""

from __future__ import annotations

from typing import Callable, Sequence

import plotly.graph_objects as go

from .. import metrics, plotstyle
from ..certify.integrity import Percentiles
from ..panels import draws, percentile_traces


def ttft_split(rows: Sequence[dict]) -> go.Figure:
    """Time to the first token on one engine and through P/D, beside the P/D's context leg (its prefill and store;
    the rest is the KV transfer and the first decode step): each its p50, p90 and p95 over the timed pairs (each
    pair a run of the workload on a fresh prompt), the run count in the hover and the subtitle."""
    timed = [r for r in rows if r.get("ttft_s") is not None and r.get("run") in ("single", "P/D")]
    fig = plotstyle.axes("Time to first token: one engine vs P/D", "", "seconds")
    if not timed:
        fig.add_annotation(text="no timed runs", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
        return fig
    runs = list(dict.fromkeys(r["run"] for r in timed))
    for name, key, metric in (("time to first token", "ttft_s", "ttft_s"),
                              ("context leg (prefill, store)", "context_s", "pd_context_s")):
        ps = [Percentiles.of(r.get(key) for r in timed if r["run"] == run) for run in runs]
        fig.add_traces(percentile_traces(name, runs, ps, metric, along="run", line=False,
                                         show=lambda v: metrics.render("ttft_s", v)))
    fig.update_xaxes(type="category")
    fig.update_layout(scattermode="group")
    return fig


def cached_tokens(rows: Sequence[dict]) -> go.Figure:
    """The answering engine's own cached tokens (``usage``) per run, against its prompt tokens."""
    shown = [r for r in rows if r.get("prompt_tokens") is not None and r.get("repeat") is None]
    fig = plotstyle.axes("Engine-reported cached prompt tokens per run", "", "tokens")
    fig.add_trace(go.Bar(name="prompt", x=[r["run"] for r in shown], y=[r["prompt_tokens"] for r in shown],
                         marker_color="#bbb", meta=draws("prompt_tokens", x="run")))
    fig.add_trace(go.Bar(name="cached (engine usage)", x=[r["run"] for r in shown],
                         y=[r.get("cached_tokens") or 0 for r in shown], marker_color="#2e7d32",
                         meta=draws("engine_cached_prompt_tokens", x="run")))
    return fig


BUILDERS: dict[str, Callable[..., go.Figure]] = {"pd_ttft_split": ttft_split, "pd_cached_tokens": cached_tokens}
