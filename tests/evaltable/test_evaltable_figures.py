"""The eval table's figures draw what the prefix-caching finding's evidence holds (each AIPerf run's throughput,
each shared-prefix request's TTFT), each row kind in its own figure, and draw nothing out of no rows."""

from workbench import plots
from workbench.evaltable import figures, finding

ROWS = [{"kind": "cell", "workload": "prefix-1k", "concurrency": c, "run": f"r{k}", "output_tokens_per_s": tps,
         "requests_per_s": 1.0, "ttft_s": 0.5} for c, k, tps in ((1, 1, 10.0), (1, 2, 12.0), (2, 1, 18.0))] + [
        {"kind": "request", "concurrency": 2, "repeat": i >= 2, "ttft_s": t, "cached_tokens": 0}
        for i, t in enumerate((2.0, 3.0, 0.4, 0.6))]


def test_throughput_is_the_median_over_repeats_per_concurrency_with_each_repeat_marked():
    line, marks = figures.throughput(ROWS).data
    assert list(line.x) == [1, 2] and list(line.y) == [11.0, 18.0] and list(marks.y) == [10.0, 12.0, 18.0]


def test_ttft_puts_each_runs_first_requests_beside_the_repeats():
    cold, cached = figures.ttft_split(ROWS).data
    assert (list(cold.y), list(cold.error_y.array), list(cold.error_y.arrayminus)) == ([2.5], [0.5], [0.5])
    assert list(cached.y) == [0.5]
    assert all(not fig.data for fig in (figures.throughput([]), figures.ttft_split([])))


def test_the_finding_declares_both_and_the_report_can_draw_them():
    assert [f.kind for f in finding.PrefixCaching.figures] == ["evaltable_throughput", "evaltable_ttft"]
    assert {"evaltable_throughput", "evaltable_ttft"} <= plots.BUILDERS.keys()
