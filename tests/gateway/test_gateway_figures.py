"""The gateway figures: drawn from a finding's evidence rows, each kind picking its own rows."""

from __future__ import annotations

from workbench.gateway.figures import hit_rate, inventory, ttft

SHAPE = {"kind": "shape", "engine_hit_rate": 0.6, "hit_ci_low": 0.5, "hit_ci_high": 0.7, "best_hit_rate": 0.62,
         "ttft_p50_s": 0.09, "ttft_p50_ci_low": 0.05, "ttft_p50_ci_high": 0.12, "ttft_p95_s": 0.2}


def test_shapes_draw_the_hit_rate_and_ttft_as_figures_of_their_own():
    """Issue 51: one figure drew TTFT's seconds on the hit rate's percent axis (53 ms read as 5 %)."""
    rows = [SHAPE | {"shape": s} for s in ("round-robin", "least-load", "kv-exact")] + [{"kind": "request"}]
    hits, times = hit_rate(rows), ttft(rows)
    assert [t.name for t in hits.data] == ["engine-read hit rate", "best placement (workbench-computed)"]
    assert [t.name for t in times.data] == ["TTFT p50", "TTFT p95"]
    assert list(hits.data[0].x) == ["round-robin", "least-load", "kv-exact"]
    assert hits.layout.yaxis.tickformat == ".0%" and "hit rate" in hits.layout.yaxis.title.text
    assert times.layout.yaxis.title.text == "time to first token (s)"
    assert {t.yaxis for f in (hits, times) for t in f.data} == {None}  # one axis pair each


def test_inventory_draws_one_line_per_endpoint_and_empty_rows_say_so():
    rows = [{"kind": "inventory", "endpoint": e, "t_s": t, "inventory_blocks": b}
            for e, t, b in (("ep0", 0.1, 4), ("ep1", 0.2, 0), ("ep0", 0.5, 9))]
    assert [(t.name, list(t.y)) for t in inventory(rows).data] == [("ep0", [4, 9]), ("ep1", [0])]
    assert "no inventory" in str(inventory([]).layout.annotations[0].text)
    assert all("no shapes" in str(f([]).layout.annotations[0].text) for f in (hit_rate, ttft))
