"""The cell's figures (registered in :data:`workbench.plots.BUILDERS`): pure functions of a finding's evidence rows.

* ``conformance_rows``: each check the conformance probe made through the daemon, by contract row, held (green),
  contradicted (red) or unread (grey);
* ``suffix_ttft_curve``: benchreport's headline curve, time to first token as the changed suffix grows (the
  suffix's tokens as the daemon counted them): ``run.go``'s TTFT (from Decode) and PrefillSuffix + TTFT (what a
  backend that prefills the suffix when asked pays before its first token), beside the cold full prefill's;
* ``bench_stages``: each turn's EnsurePrefix, PrefillSuffix and decode times, stacked, as the report's sections ran.
"""

from __future__ import annotations

from typing import Callable, Sequence

import plotly.graph_objects as go

from .. import plotstyle
from ..panels import draws

_OK = {True: ("held", "#2e7d32"), False: ("contradicted", "#c62828"), None: ("not read", "#9e9e9e")}


def _empty(title: str, why: str) -> go.Figure:
    fig = plotstyle.axes(title, "", "")
    fig.add_annotation(text=why, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    return fig


def conformance_rows(rows: Sequence[dict]) -> go.Figure:
    """One marker per check, its contract row on the y axis: green where the check held, red where it did not."""
    rows = [r for r in rows if r.get("row") and "check" in r]
    title = "Contract rows through the daemon: each check held or not"
    if not rows:
        return _empty(title, "no checks recorded")
    order = list(dict.fromkeys(r["row"] for r in rows))
    fig = plotstyle.axes(title, "check (in the order run)", "")
    for state, (label, colour) in _OK.items():
        mine = [(i, r) for i, r in enumerate(rows) if r.get("ok") is state or (state is None and r.get("ok") is None)]
        if not mine:
            continue
        fig.add_trace(go.Scatter(x=[i for i, _ in mine], y=[r["row"] for _, r in mine], mode="markers", name=label,
                                 marker=dict(color=colour, size=11, symbol="square"),
                                 meta=draws("check_held", x="check (in the order run)", y="contract row"),
                                 text=[r["check"] for _, r in mine], hovertemplate="%{y}<br>%{text}<extra></extra>"))
    fig.update_yaxes(categoryorder="array", categoryarray=order[::-1], type="category")
    fig.update_layout(height=max(360, 28 * len(order) + 120))
    return fig


def suffix_ttft_curve(rows: Sequence[dict]) -> go.Figure:
    """TTFT (ms) against the changed suffix's tokens, warm on the live session, with the cold full prefill's TTFT."""
    pts = sorted((r for r in rows if r.get("section") == "suffix_ttft_curve" and r.get("suffix_tokens") is not None
                  and r.get("ttft_ms") is not None), key=lambda r: r["suffix_tokens"])
    title = "TTFT as the changed suffix grows (benchreport's headline curve)"
    if not pts:
        return _empty(title, "no curve points")
    fig = plotstyle.axes(title, "changed suffix (tokens, as the daemon counted them)", "ms")
    both = [r for r in pts if r.get("suffix_and_ttft_ms") is not None]
    if both:  # a backend that prefills in PrefillSuffix pays the suffix there, not in Decode's TTFT
        fig.add_trace(go.Scatter(x=[r["suffix_tokens"] for r in both], y=[r["suffix_and_ttft_ms"] for r in both],
                                 mode="lines+markers", name="PrefillSuffix + TTFT",
                                 meta=draws("step_s", x="changed suffix", unit="ms")))
    fig.add_trace(go.Scatter(x=[r["suffix_tokens"] for r in pts], y=[r["ttft_ms"] for r in pts],
                             mode="lines+markers", name="TTFT from Decode (benchreport's ttft_ms)",
                             meta=draws("bench_ttft_warm_changed_s", x="changed suffix", unit="ms"),
                             customdata=[[r.get("prefix_tokens"), r.get("engine_computed_tokens")] for r in pts],
                             hovertemplate="suffix %{x} tok<br>TTFT %{y:.3g} ms<br>prefix %{customdata[0]} tok"
                                           "<br>engine computed %{customdata[1]}<extra></extra>"))
    cold = [r for r in rows if r.get("section") == "cold_full_prefill" and r.get("ttft_ms") is not None]
    if cold:
        fig.add_hline(y=cold[0]["ttft_ms"], line_dash="dot", line_color="#999",
                      annotation_text="cold full prefill's TTFT", annotation_position="top left")
    return fig


def bench_stages(rows: Sequence[dict]) -> go.Figure:
    """Each turn's stage times (EnsurePrefix, PrefillSuffix, decode) stacked, in the order benchreport ran them."""
    turns = [r for r in rows if r.get("turn") and r.get("prefix_ms") is not None]
    title = "Stage times per turn (EnsurePrefix → PrefillSuffix → Decode)"
    if not turns:
        return _empty(title, "no turns recorded")
    fig = plotstyle.axes(title, "turn", "ms")
    for key, label in (("prefix_ms", "EnsurePrefix"), ("suffix_ms", "PrefillSuffix"), ("decode_ms", "Decode")):
        fig.add_trace(go.Bar(x=[r["turn"] for r in turns], y=[r.get(key) or 0 for r in turns], name=label,
                             meta=draws("step_s", x="turn", unit="ms")))
    fig.update_layout(barmode="stack")
    return fig


BUILDERS: dict[str, Callable[..., go.Figure]] = {"conformance_rows": conformance_rows,
                                                "suffix_ttft_curve": suffix_ttft_curve, "bench_stages": bench_stages}

__all__ = ["BUILDERS", "bench_stages", "conformance_rows", "suffix_ttft_curve"]
