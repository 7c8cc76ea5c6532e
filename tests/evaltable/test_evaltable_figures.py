"""The eval table's figures draw what the prefix-caching finding's evidence holds (each AIPerf run's throughput,
each shared-prefix request's TTFT), each row kind in its own figure, and draw nothing out of no rows."""

import pytest

from workbench import plots
from workbench.evaltable import figures, finding

ROWS = [{"kind": "cell", "workload": "prefix-1k", "concurrency": c, "run": f"r{k}", "output_tokens_per_s": tps,
         "requests_per_s": 1.0, "ttft_s": 0.5} for c, k, tps in ((1, 1, 10.0), (1, 2, 12.0), (2, 1, 18.0))] + [
        {"kind": "request", "concurrency": 2, "repeat": i >= 2, "ttft_s": t, "cached_tokens": 0}
        for i, t in enumerate((2.0, 3.0, 0.4, 0.6))]


def by_stat(fig) -> dict:
    """A percentile figure's traces by (series, stat): benchmark integrity's p50, p90 and p95 of each series."""
    return {(t.name, t.meta["stat"]): t for t in fig.data}


def test_throughput_is_p50_p90_p95_over_repeats_per_concurrency_with_the_run_count():
    """Issue 50: "p50/p90/p95 across repeated runs of the whole workload, with the run count beside each figure"
    (the figure drew the median and each repeat, and named neither)."""
    got = by_stat(figures.throughput(ROWS))
    assert sorted(got) == [("prefix-1k", "p50"), ("prefix-1k", "p90"), ("prefix-1k", "p95")]
    p50, p90, p95 = (got[("prefix-1k", s)] for s in ("p50", "p90", "p95"))
    assert list(p50.x) == [1, 2] and list(p50.y) == [11.0, 18.0] and p50.meta["runs"] == [2, 1]
    assert list(p90.x) == [1] and list(p90.y) == [pytest.approx(11.8)] and list(p95.y) == [pytest.approx(11.9)]
    assert p50.text[0].endswith("(2 runs)") and p50.text[1].endswith("(1 run: no spread)")  # in the hover


def test_ttft_puts_each_runs_first_requests_beside_the_repeats():
    cold, cached = figures.ttft_split(ROWS).data  # one run each: its p50, no p90 or p95 to spread
    assert list(cold.y) == [2.5] and cold.meta == {"metric": "load_ttft_cold_p50_s", "unit": None, "x": "concurrency",
                                                   "y": None, "stat": "p50", "runs": [1]}
    assert list(cached.y) == [0.5] and (cold.name, cached.name) == ("TTFT cold", "TTFT cached")
    assert all(not fig.data for fig in (figures.throughput([]), figures.ttft_split([])))


def test_ttft_splits_and_summarises_as_the_table_does():
    """Issue 51: at concurrency 2 the table gave a cold TTFT (by the server's cached tokens: a later phase's request
    the server computed whole) where the figure drew no bar, and the figure's "repeats" bar was the median over
    every repeat, not the table's cached median: both now read the same rows the same way (the table's
    :func:`split.split`, each run's median, then the median over runs with least–greatest)."""
    from workbench.evaltable import split
    from workbench.evaltable.exports import Request
    from workbench.evaltable.table import Spread

    def req(run, order, ttft, cached, repeat):
        return {"kind": "request", "run": run, "concurrency": 2, "order": order, "repeat": repeat, "ttft_s": ttft,
                "prompt_tokens": 1100, "cached_tokens": cached}

    rows = [req("r1/b", 0, 3.9, 0, True), req("r1/b", 1, 0.5, 1024, True), req("r1/b", 2, 0.6, 1024, True),
            req("r2/b", 0, 3.8, 0, True), req("r2/b", 1, 0.7, 1024, True), req("r2/b", 2, 0.4, 1024, True)]
    got = by_stat(figures.ttft_split(rows))
    cold, cached = got[("TTFT cold", "p50")], got[("TTFT cached", "p50")]
    table = {which: Spread.of([split.split([Request(0, r["ttft_s"], r["prompt_tokens"], r["cached_tokens"])
                                            for r in rows if r["run"] == run], 0).p50(which) for run in ("r1/b", "r2/b")])
             for which in ("cold", "cached")}
    assert list(cold.x) == ["2"] and cold.y[0] == table["cold"].median == pytest.approx(3.85)  # the table's cold figure, drawn
    assert cached.y[0] == table["cached"].median == pytest.approx(0.55)
    p = table["cached"].percentiles()  # the table's cell: p50 · p90 · p95 over the runs, the count beside
    assert [got[("TTFT cached", s)].y[0] for s in ("p50", "p90", "p95")] == [p.p50, p.p90, p.p95]
    assert got[("TTFT cached", "p50")].meta["runs"] == [2]


def test_the_finding_declares_both_and_the_report_can_draw_them():
    assert [f.kind for f in finding.PrefixCaching.figures] == ["evaltable_throughput", "evaltable_ttft"]
    assert {"evaltable_throughput", "evaltable_ttft"} <= plots.BUILDERS.keys()
