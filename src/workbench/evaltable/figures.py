"""The eval-backend table's figure kinds (registered in :data:`workbench.plots.BUILDERS`), pure functions of the
prefix-caching finding's evidence rows (:mod:`.finding`): each AIPerf run's throughput (``kind`` ``cell``) and
each shared-prefix request's TTFT (``kind`` ``request``). Both are AIPerf's timings: they show, never confirm."""

from __future__ import annotations

import statistics
from typing import Callable, Sequence

import plotly.graph_objects as go

from .. import plotstyle


def throughput(rows: Sequence[dict]) -> go.Figure:
    """Output tokens/s against concurrency, one line per workload through the median over repeats, each repeat
    a marker."""
    cells = [r for r in rows if r.get("kind") == "cell" and r.get("output_tokens_per_s") is not None]
    fig = plotstyle.axes("Throughput vs concurrency (AIPerf)", "concurrency", "output tokens/s")
    for workload in dict.fromkeys(r["workload"] for r in cells):
        mine = [r for r in cells if r["workload"] == workload]
        levels = sorted({r["concurrency"] for r in mine})
        medians = [statistics.median(r["output_tokens_per_s"] for r in mine if r["concurrency"] == c) for c in levels]
        fig.add_trace(go.Scatter(x=levels, y=medians, mode="lines+markers", name=workload, legendgroup=workload))
        fig.add_trace(go.Scatter(x=[r["concurrency"] for r in mine], y=[r["output_tokens_per_s"] for r in mine],
                                 mode="markers", marker=dict(symbol="circle-open", size=7), showlegend=False,
                                 legendgroup=workload, name=f"{workload}, each repeat"))
    fig.update_xaxes(type="category")
    return fig


def ttft_split(rows: Sequence[dict]) -> go.Figure:
    """Median TTFT of the shared-prefix requests per concurrency, with their least and greatest: each run's first
    requests (cold: sent before the prefix could be cached) beside the repeats (which could find it)."""
    requests = [r for r in rows if r.get("kind") == "request" and r.get("ttft_s") is not None]
    fig = plotstyle.axes("TTFT cold vs cached (shared prefix, AIPerf)", "concurrency", "TTFT (s)")
    for repeat, name in ((False, "first requests (cold)"), (True, "repeats (prefix cacheable)")):
        mine = [r for r in requests if bool(r["repeat"]) == repeat]
        if not mine:
            continue
        levels = sorted({r["concurrency"] for r in mine})
        got = [[r["ttft_s"] for r in mine if r["concurrency"] == c] for c in levels]
        mid = [statistics.median(g) for g in got]
        fig.add_trace(go.Bar(x=[str(c) for c in levels], y=mid, name=name, error_y=dict(
            type="data", symmetric=False, array=[max(g) - m for g, m in zip(got, mid)],
            arrayminus=[m - min(g) for g, m in zip(got, mid)])))
    fig.update_layout(barmode="group")
    return fig


BUILDERS: dict[str, Callable[..., go.Figure]] = {"evaltable_throughput": throughput, "evaltable_ttft": ttft_split}
