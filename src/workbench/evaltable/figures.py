"""The eval-backend table's figure kinds (registered in :data:`workbench.plots.BUILDERS`), pure functions of the
prefix-caching finding's evidence rows (:mod:`.finding`): each AIPerf run's throughput (``kind`` ``cell``) and
each shared-prefix request's TTFT (``kind`` ``request``). Both are AIPerf's timings: they show, never confirm; each
point is a p50, p90 or p95 over the repeats (whole AIPerf runs), as the table's cells give them."""

from __future__ import annotations

import statistics
from typing import Callable, Sequence

import plotly.graph_objects as go

from .. import metrics, plotstyle
from ..certify.integrity import Percentiles
from ..panels import percentile_traces
from .exports import Request
from .split import ENGINE, split


def throughput(rows: Sequence[dict]) -> go.Figure:
    """Output tokens/s against concurrency, one series per workload: its p50, p90 and p95 over the repeats (whole
    AIPerf runs) at each concurrency, as the table gives them (:meth:`.table.Spread.percentiles`)."""
    cells = [r for r in rows if r.get("kind") == "cell" and r.get("output_tokens_per_s") is not None]
    fig = plotstyle.axes("Throughput vs concurrency (AIPerf)", "concurrency", "output tokens/s")
    for workload in dict.fromkeys(r["workload"] for r in cells):
        mine = [r for r in cells if r["workload"] == workload]
        levels = sorted({r["concurrency"] for r in mine})
        ps = [Percentiles.of(r["output_tokens_per_s"] for r in mine if r["concurrency"] == c) for c in levels]
        fig.add_traces(percentile_traces(workload, levels, ps, "output_tokens_per_s", along="concurrency",
                                         show=lambda v: metrics.render("output_tokens_per_s", v)))
    fig.update_xaxes(type="category")
    fig.update_layout(scattermode="group")
    return fig


def _cold_cached(run: Sequence[dict]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """One AIPerf run's phase's requests (in the order sent) split as the table splits them (:func:`.split.split`):
    by the server's own cached tokens where every response counted them, else by position (the finding's
    ``repeat``: a run's first ``concurrency`` requests of its first phase cold, every later one cached)."""
    requests = [Request(0, r["ttft_s"], r.get("prompt_tokens"), r.get("cached_tokens")) for r in run]
    by_engine = split(requests, 0)
    if by_engine.source == ENGINE:
        return by_engine.cold, by_engine.cached
    return (tuple(r["ttft_s"] for r in run if not r["repeat"]), tuple(r["ttft_s"] for r in run if r["repeat"]))


def ttft_split(rows: Sequence[dict]) -> go.Figure:
    """TTFT cold and cached per concurrency, as the table gives them: each run's median over its cold (cached)
    requests, split as the table splits them, then p50, p90 and p95 over the runs (a concurrency whose requests
    all found the prefix has no cold figure, and says so in the table too)."""
    requests = [r for r in rows if r.get("kind") == "request" and r.get("ttft_s") is not None]
    fig = plotstyle.axes("TTFT cold vs cached (shared prefix, AIPerf)", "concurrency", "time to first token (s)")
    runs: dict[tuple, list[dict]] = {}
    for r in sorted(requests, key=lambda r: r.get("order", 0)):
        runs.setdefault((r["concurrency"], r.get("run", "")), []).append(r)
    per_run = {key: _cold_cached(rs) for key, rs in runs.items()}
    for which, tag in ((0, "load_ttft_cold_p50_s"), (1, "load_ttft_cached_p50_s")):
        levels, ps = [], []
        for c in sorted({k[0] for k in per_run}):
            p50s = [statistics.median(got[which]) for k, got in per_run.items() if k[0] == c and got[which]]
            if p50s:
                levels.append(str(c))
                ps.append(Percentiles.of(p50s))
        fig.add_traces(percentile_traces(metrics.get(tag).header.removesuffix(" p50"), levels, ps, tag,
                                         along="concurrency",
                                         show=lambda v: metrics.render(tag, v), line=False))
    fig.update_xaxes(type="category")
    fig.update_layout(scattermode="group")
    return fig


BUILDERS: dict[str, Callable[..., go.Figure]] = {"evaltable_throughput": throughput, "evaltable_ttft": ttft_split}
