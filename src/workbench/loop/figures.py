"""The loop's figures, pure functions of the per-turn rows (or an arm finding's evidence rows).

Drawn with plotly like :mod:`workbench.plots`, and shown in notebooks through :func:`workbench.plots.show`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ..plots import TEMPLATE
from .attribution import CATEGORIES


def _figure(title: str, x: str, y: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(template=TEMPLATE, title=title, xaxis_title=x, yaxis_title=y, height=420,
                      margin=dict(l=60, r=20, t=60, b=50), legend=dict(title=None))
    return fig


def _arms(rows: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(rows["arm"]))


def ttft_per_turn(rows: pd.DataFrame) -> go.Figure:
    fig = _figure("TTFT per turn", "turn (in replay order)", "TTFT (s)")
    for arm in _arms(rows):
        d = rows[rows.arm == arm]
        fig.add_scatter(x=d["step"], y=d["ttft_s"], mode="lines+markers", name=arm,
                        customdata=d[["prompt", "computed"]], hovertemplate="prompt %{customdata[0]} · computed "
                        "%{customdata[1]}<br>TTFT %{y:.3f} s<extra>" + arm + "</extra>")
    fig.update_yaxes(type="log")
    return fig


def reuse_per_turn(rows: pd.DataFrame) -> go.Figure:
    fig = _figure("Reused against theoretically reusable tokens, per turn", "turn (in replay order)", "tokens")
    first = rows[rows.arm == _arms(rows)[0]]
    fig.add_scatter(x=first["step"], y=first["theoretical"], mode="lines", name="theoretical",
                    line=dict(dash="dash", color="black"))
    fig.add_scatter(x=first["step"], y=first["prompt"], mode="lines", name="prompt", line=dict(dash="dot", color="grey"))
    for arm in _arms(rows):
        d = rows[rows.arm == arm]
        fig.add_scatter(x=d["step"], y=d["reused"], mode="markers", name=f"reused · {arm}")
    return fig


def attribution(rows: pd.DataFrame) -> go.Figure:
    """Per arm, where every prompt token went: reused, or recomputed and why (summed over the loop)."""
    fig = _figure("Per-miss attribution (summed over the loop)", "arm", "prompt tokens")
    sums = rows.groupby("arm", sort=False)[["reused", *CATEGORIES]].sum()
    for col in ["reused", *CATEGORIES]:
        if sums[col].abs().sum() or col == "unexplained":
            fig.add_bar(x=list(sums.index), y=sums[col], name=col.replace("_", " "))
    fig.update_layout(barmode="relative")
    return fig


def ttft_cdf(rows: pd.DataFrame) -> go.Figure:
    fig = _figure("TTFT distribution", "TTFT (s)", "share of turns ≤ x")
    for arm in _arms(rows):
        x = np.sort(rows[rows.arm == arm]["ttft_s"].to_numpy(float))
        fig.add_scatter(x=x, y=np.arange(1, len(x) + 1) / len(x), mode="lines", line_shape="hv", name=arm)
    fig.update_xaxes(type="log")
    return fig


def speedup(summaries: Sequence) -> go.Figure:
    """Loop-time speed-up over the best llama.cpp arm on compared turns, with its 95% bootstrap CI; not-run and
    disqualified arms marked."""
    fig = _figure("Speed-up over the best llama.cpp arm (loop time, 95% CI)", "arm", "×")
    ran = [s for s in summaries if not s.reason and "speedup_vs_best_llamacpp" in s.ci]
    if ran:
        ci = [s.ci["speedup_vs_best_llamacpp"] for s in ran]
        fig.add_bar(x=[s.arm for s in ran], y=[c["value"] for c in ci], name="speed-up",
                    error_y=dict(type="data", symmetric=False, array=[c["high"] - c["value"] for c in ci],
                                 arrayminus=[c["value"] - c["low"] for c in ci]))
    for s in summaries:  # no bar for an arm that did not run or whose turns could not be compared
        if s.reason or s.disqualified:
            fig.add_bar(x=[s.arm], y=[0], name=f"{s.arm}: {'not run' if s.reason else 'disqualified'}",
                        hovertext=s.reason or s.disqualified, showlegend=False)
    fig.add_hline(y=1, line_dash="dot")
    return fig


__all__ = ["attribution", "reuse_per_turn", "speedup", "ttft_cdf", "ttft_per_turn"]
