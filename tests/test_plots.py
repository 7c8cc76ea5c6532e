"""Figures and notebook views: drawn from evidence rows, offline, deterministic, static without a frontend."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from workbench import findings, metrics, plots, plotstyle, probes, widgets
from workbench import panels as _panels

RETENTION_ROWS = [
    {"arm": arm, "priority": pr, "pressure": x, "survival": s, "reused_tokens": int(256 * s), "baseline_reused": 256,
     "fillers_refused": 0, "rerequest_s": 0.001 * (i + 1)}
    for arm, pr, curve in (("p35", 35, [1.0, 0.5, 0.0]), ("p100", 100, [1.0, 1.0, 1.0]))
    for i, (x, s) in enumerate(zip([0.5, 1.0, 2.0], curve))
]
REUSE_ROWS = [
    {"repeat": r, "case": case, "expected_reused": t, "reported_reused": rep, "engine_reused": t,
     "reported_vs_expected": "exact" if rep == t else "mismatch", "engine_vs_expected": "exact",
     "t_setup_s": 0.002, "ttft_s": 0.001}
    for r in (0, 1) for case, t, rep in (("cold", 0, 0), ("exact repeat", 129, 128 + r))
]


def finding(probe: str, rows: list[dict], verdict: str = "confirmed", reason: str | None = None) -> findings.Finding:
    return findings.Finding(probe=probe, claims=list(probes.get(probe).claims), verdict=verdict, summary="s",
                            engine="llamacpp", environment={}, params={"model": "synthetic:tiny"},
                            evidence={"columns": list(rows[0]) if rows else [], "rows": rows, "notes": []},
                            reason=reason)


def test_survival_has_one_curve_per_arm_against_pressure():
    fig = plots.survival(RETENTION_ROWS)
    assert [t.name for t in fig.data] == ["p35", "p100"]
    assert list(fig.data[0].x) == [0.5, 1.0, 2.0] and list(fig.data[0].y) == [1.0, 0.5, 0.0]
    assert fig.layout.xaxis.type == "log"


def test_survival_draws_each_repeat_as_its_own_curve():
    rows = [r | {"repeat": rep} for rep in (0, 1) for r in RETENTION_ROWS]
    fig = plots.survival(rows)
    assert [t.name for t in fig.data] == ["p35 · repeat 0", "p100 · repeat 0", "p35 · repeat 1", "p100 · repeat 1"]
    assert all(list(t.x) == [0.5, 1.0, 2.0] for t in fig.data)  # no line runs back across a repeat


def test_reuse_matrix_puts_truth_next_to_reported_per_case():
    fig = plots.reuse_matrix(REUSE_ROWS)
    by = {t.name: dict(zip(t.x, t.y)) for t in fig.data}
    assert by["expected (token ids)"] == {"cold": 0, "exact repeat": 129}
    assert by["reported (cell)"]["exact repeat"] == 128.5  # mean over repeats
    assert "mismatch ×1" in fig.data[1].hovertext[1]


def test_timeline_lays_requests_end_to_end():
    fig = plots.timeline(REUSE_ROWS, spans=[("t_setup_s", "setup"), ("ttft_s", "probe")], lane="case", title="t")
    setup, probe = fig.data
    assert list(setup.base) == pytest.approx([0.0, 0.003, 0.006, 0.009])
    assert list(probe.base) == pytest.approx([0.002, 0.005, 0.008, 0.011])


def test_not_run_findings_get_figures_that_say_why():
    figs = plots.for_finding(finding("retention.pinning_under_pressure", [], "not-run", "no GPU here"))
    assert [name for name, _ in figs] == ["survival", "timeline"]
    assert all("no GPU here" in fig.layout.annotations[0].text for _, fig in figs)


@pytest.mark.parametrize("build", [lambda: plots.survival(RETENTION_ROWS),
                                   lambda: plots.side_by_side("reuse.per_request_metrics",
                                                              [finding("reuse.per_request_metrics", REUSE_ROWS)])[0].fig,
                                   lambda: plots.verdicts(pd.DataFrame({"probe": ["p"], "verdict": ["confirmed"]}))])
def test_every_figure_wears_the_house_template_and_a_users_default_stays_theirs(build, monkeypatch):
    import plotly.graph_objects as go
    import plotly.io as pio

    monkeypatch.setattr(pio.templates, "default", "ggplot2")
    fig = build()
    assert fig.layout.template.to_plotly_json() == pio.templates[plotstyle.TEMPLATE].to_plotly_json()
    assert pio.templates.default == "ggplot2"
    assert go.Figure().layout.template.to_plotly_json() == pio.templates["ggplot2"].to_plotly_json()


def test_notebook_bundle_is_offline_and_deterministic():
    f = finding("retention.pinning_under_pressure", RETENTION_ROWS)
    bundles = [plots.show(fig)._repr_mimebundle_() for _, fig in plots.for_finding(f)]
    again = [plots.show(fig)._repr_mimebundle_() for _, fig in plots.for_finding(f)]
    assert json.dumps(bundles, sort_keys=True) == json.dumps(again, sort_keys=True)
    assert set(bundles[0]) == {"application/vnd.plotly.v1+json", "text/plain"}
    assert len(json.dumps(bundles)) < 100_000  # no plotly.js in the notebook


def test_page_script_packs_plotlyjs_and_keeps_its_licence_readable():
    import base64
    import gzip

    js = "/**\n* plotly.js v0 (MIT)\n*/\nwindow.Plotly = {};"
    script = plots.page_script(js)
    assert script.startswith("/**\n* plotly.js v0 (MIT)\n*/\n")  # the licence header, as the bundle has it
    packed = re.search(r'var packed = "([^"]+)"', script).group(1)
    assert gzip.decompress(base64.b64decode(packed)).decode() == js  # unpacked in the page by DecompressionStream
    assert script == plots.page_script(js)  # byte-identical across runs (gzip's mtime 0)


def test_report_div_uses_the_given_id_and_no_script_source():
    div = plots.to_div(plots.survival(RETENTION_ROWS), "wb-fig-0-x")
    assert re.findall(r'<div id="([^"]+)"', div) == ["wb-fig-0-x"]
    assert "<script src" not in div
    assert '"template"' not in div and "var template = {" in plots.page_script("")  # the house template once, for the page
    own = plots.survival(RETENTION_ROWS).update_layout(template="plotly_dark")
    assert '"template"' in plots.to_div(own, "wb-fig-0-y")  # another template stays with its figure


def test_verdict_table_figure():
    table = pd.DataFrame([{"probe": "p", "engine": "llamacpp", "engine_version": "0.3", "model": "m",
                           "verdict": "refuted", "summary": "s", "metrics": "x 1"}])
    fig = plots.verdicts(table)
    assert list(fig.data[0].cells.values[4]) == ["refuted"]


class Shown(list):
    def __call__(self, obj):
        self.append(obj)


@pytest.fixture
def shown(monkeypatch) -> Shown:
    s = Shown()
    monkeypatch.setattr(widgets, "display", s)
    return s


def test_evidence_is_static_without_a_frontend(shown):
    widgets.evidence(finding("retention.pinning_under_pressure", RETENTION_ROWS), by="arm", interactive=False)
    assert [type(o).__name__ for o in shown] == ["Shown", "Shown", "DataFrame"]
    assert len(shown[-1]) == len(RETENTION_ROWS)


def test_evidence_explorer_filters_interactively(shown):
    widgets.evidence(finding("retention.pinning_under_pressure", RETENTION_ROWS), by="arm", interactive=True)
    box = shown[-1]  # outside a kernel the output area does not capture, so figures precede it
    assert type(box).__name__ == "VBox"
    picker = box.children[0]
    assert picker.options == ("p35", "p100")
    picker.value = ("p100",)  # redraws into the output area without error


def test_figures_come_from_each_probes_own_declaration():
    for name in probes.names():
        for fig in probes.get(name).figures:
            assert fig.kind in plots.BUILDERS, (name, fig.kind)
    assert [n for n, _ in plots.figures_of("retention.pinning_under_pressure")] == ["survival", "timeline"]
    assert plots.figures_of("not.a.probe") == []


# --------------------------------------------------------------------------- engines side by side


def on(f: findings.Finding, engine: str, version: str | None, rows: list[dict] | None = None) -> findings.Finding:
    """``f`` as another engine's finding (rendering only: the figures never see a cell)."""
    from dataclasses import replace

    ev = f.evidence | ({"rows": rows} if rows is not None else {})
    return replace(f, engine=engine, id="", environment={"engine_version": version} if version else {}, evidence=ev)


def panels(fig) -> list[str]:
    """The subplot titles (one per panel), left to right."""
    return [a.text for a in fig.layout.annotations if a.yanchor == "bottom" and a.y == 1.0]


def drawn_on(fig) -> list[str]:
    """The x axes that carry traces: which panels draw data."""
    return sorted({t.xaxis for t in fig.data})


def three_engines(probe: str, rows: list[dict], vllm_rows: list[dict]) -> list[findings.Finding]:
    ran = finding(probe, rows)
    return [on(ran, "vllm", "0.32.0", vllm_rows), on(ran, "llamacpp", "0.3.36"),
            on(finding(probe, [], "not-run", "tensorrt_llm is not installed"), "trtllm", None)]


def test_side_by_side_draws_a_panel_per_engine_with_data_and_names_the_rest_in_the_caption():
    """Issue 51: a panel for an engine without data gave 60 % of each gateway figure to grey text. An engine draws a
    panel only where its findings hold data for the figure; the caption names each one that does not, and why."""
    fs = three_engines("reuse.per_request_metrics", REUSE_ROWS, REUSE_ROWS[:2])
    figs = plots.side_by_side("reuse.per_request_metrics", fs)
    assert [s.name for s in figs] == ["matrix", "timeline"]  # every figure the probe declares
    for s in figs:
        titles = panels(s.fig)
        assert len(titles) == 2 and len([k for k in s.fig.layout if k.startswith("xaxis")]) == 2
        assert [t.split("</b>")[0].removeprefix("<b>") for t in titles] == ["llamacpp", "vllm"]
        assert all("reference" in t for t in titles)
        assert all(" · probe v" in t.replace("<br>", " ") for t in titles)  # which run each panel shows
        assert "0.3.36" in titles[0] and "0.32.0" in titles[1] and "synthetic:tiny" in titles[1]
        assert drawn_on(s.fig) == ["x", "x2"]  # both engines that ran draw their own panel
        assert s.caption == "No panel for trtllm (not-run: tensorrt_llm is not installed)."
        assert all(isinstance(t.meta, dict) and t.meta["y"] for t in s.fig.data)  # each trace says what it draws


def test_each_panel_draws_its_own_engines_rows():
    fs = three_engines("reuse.per_request_metrics", REUSE_ROWS, [r | {"reported_reused": 64} for r in REUSE_ROWS])
    matrix = plots.side_by_side("reuse.per_request_metrics", fs)[0].fig
    reported = {t.xaxis: dict(zip(t.x, t.y)) for t in matrix.data if t.name == "reported (cell)"}
    assert reported["x"]["exact repeat"] == 128.5 and reported["x2"]["exact repeat"] == 64


def test_an_engine_without_data_is_named_once_with_its_reason_and_gets_no_panel():
    long = "tensorrt_llm is not installed: " + "install the 'trtllm' extra, then CUDA, torch and MPI; " * 6
    fs = three_engines("retention.pinning_under_pressure", RETENTION_ROWS, RETENTION_ROWS)
    fs[2] = on(finding("retention.pinning_under_pressure", [], "not-run", long), "trtllm", None)
    for s in plots.side_by_side("retention.pinning_under_pressure", fs, engines=("llamacpp", "trtllm", "vllm")):
        assert [t.split("</b>")[0].removeprefix("<b>") for t in panels(s.fig)] == ["llamacpp", "vllm"]
        assert s.caption == "No panel for trtllm (not-run: tensorrt_llm is not installed)."  # the rest, once, in
        assert not any("tensorrt_llm" in (a.text or "") for a in s.fig.layout.annotations)  # the report's install text
    (s, _) = plots.side_by_side("retention.pinning_under_pressure", [finding("retention.pinning_under_pressure",
                                RETENTION_ROWS)], engines=("llamacpp", "trtllm", "vllm"))
    assert s.caption == "No panel for trtllm (no finding here); vllm (no finding here)."


def test_a_figure_no_engine_has_data_for_is_its_caption_alone():
    fs = [on(finding("retention.pinning_under_pressure", [], "not-run", "no GPU here"), "trtllm", None)]
    (survival, timeline) = plots.side_by_side("retention.pinning_under_pressure", fs)
    assert survival.fig is None and survival.caption == ("Not drawn: no engine has data for this figure: trtllm "
                                                         "(not-run: no GPU here).")


def test_side_by_side_shares_the_quantity_axis_only_for_one_quantity_on_one_model():
    fs = three_engines("retention.pinning_under_pressure", RETENTION_ROWS, RETENTION_ROWS[3:])
    survival, timeline = (s.fig for s in plots.side_by_side("retention.pinning_under_pressure", fs))
    assert survival.layout.yaxis2.matches == "y"
    assert survival.layout.xaxis2.matches is None  # each engine sweeps its own range
    # the builder's log axes, per panel: pressures 0.5 to 2 span under a decade, so they read linear
    assert survival.layout.xaxis.type == survival.layout.xaxis2.type == "linear"
    assert survival.layout.yaxis2.title.text is None and survival.layout.yaxis.title.text
    assert sorted(s.xref for s in survival.layout.shapes) == ["x", "x2"]  # the capacity line, in each panel
    by_name: dict[str, set] = {}
    for t in survival.data:
        by_name.setdefault(t.name, set()).add(t.line.color)
    assert all(len(c) == 1 for c in by_name.values()) and len({c for cs in by_name.values() for c in cs}) == 2
    assert [t.name for t in survival.data if t.showlegend] == ["p35", "p100"]  # each series once in the legend
    assert timeline.layout.yaxis2.matches is None and timeline.layout.yaxis2.title.text  # lanes: each panel its own
    other = [fs[0], replace_model(fs[1], "SmolLM2-135M")]  # two models: never one axis, and the figure says why
    (survival, _) = plots.side_by_side("retention.pinning_under_pressure", other)
    assert survival.fig.layout.yaxis2.matches is None and survival.fig.layout.yaxis2.title.text
    assert "the models differ (SmolLM2-135M, synthetic:tiny)" in survival.fig.layout.title.text


def replace_model(f: findings.Finding, model: str) -> findings.Finding:
    from dataclasses import replace

    return replace(f, params=f.params | {"model": model})


def test_series_with_the_same_points_are_drawn_as_one_named_by_all():
    """Issue 51: the warm-up figure listed three prefix lengths and showed one (each survived whole): identical
    series hid each other. They are one trace, named by all of them."""
    rows = [{"prefix_tokens": n, "boundary": "block", "pressure": x, "fraction": 1.0}
            for n in (64, 128, 256) for x in (0.0, 2.0)]
    (fig,) = [s.fig for s in plots.side_by_side("prefix.warmup_materialization",
                                                [finding("prefix.warmup_materialization", rows)])][:1]
    assert [t.name for t in fig.data] == ["64 tok (block) = 128 tok (block) = 256 tok (block)"]


def test_a_builder_that_draws_two_quantities_on_two_axes_is_refused():
    """The gateway's shapes figure drew TTFT on a second axis; composed, it landed on the hit rate's percent axis."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from workbench import panels as _panels

    two = make_subplots(rows=1, cols=2)
    two.add_trace(go.Bar(x=["a"], y=[0.6], name="hit rate", meta=_panels.draws("shape_hit_rate", x="shape")),
                  row=1, col=1)
    two.add_trace(go.Bar(x=["a"], y=[0.05], name="TTFT", meta=_panels.draws("ttft_s", x="shape")), row=1, col=2)
    with pytest.raises(ValueError, match="a panel has one axis pair"):
        _panels.label_units(two, "llamacpp")


def test_a_trace_says_the_quantity_of_the_metric_it_draws_and_one_that_names_none_is_refused():
    """Review of issue 51 (item 6): every trace was stamped with its axis title, so the original gateway bug (TTFT's
    seconds as bars on the hit rate's percent axis) read as one quantity and passed the page check. A trace's
    quantity is now the declared unit of the metric its builder names (:mod:`workbench.metrics`), and a trace that
    names none is refused instead of labelled with its axis's title."""
    import plotly.graph_objects as go

    from workbench import panels as _panels

    def gateway(hit, ttft):  # the reviewer's construction (/tmp/rev-b/mixed.py), with what each builder names
        p = go.Figure([go.Bar(x=["kv-exact"], y=[0.6], name="hit rate", meta=hit),
                       go.Bar(x=["kv-exact"], y=[0.053], name="TTFT p50 (s)", meta=ttft)])
        p.update_yaxes(title_text="hit rate", tickformat=".0%")
        return p

    with pytest.raises(ValueError, match="'hit rate' without naming the declared metric it draws"):
        _panels.label_units(gateway(None, None), "llamacpp")
    with pytest.raises(ValueError, match="without naming the declared metric"):  # a tag no declaration has
        _panels.label_units(gateway({"metric": "hit_rate_percent", "x": "shape"}, None), "llamacpp")
    p = gateway(_panels.draws("shape_hit_rate", x="shape"), _panels.draws("ttft_s", x="shape"))
    _panels.label_units(p, "llamacpp")
    assert [(t.meta["metric"], t.meta["x"], t.meta["y"]) for t in p.data] == [
        ("shape_hit_rate", "shape", "fraction"), ("ttft_s", "shape", "time (s)")]  # two quantities: a page check sees
    assert _panels.quantities(p) == {"fraction", "time (s)"}
    assert _panels.quantity("step_s", "ms") == "time (ms)" and _panels.quantity("speedup_vs_best_llamacpp") == "times (×)"
    with pytest.raises(ValueError, match="cannot convert s to 'MiB'"):
        _panels.draws("ttft_s", x="shape", unit="MiB")
    timeline = _panels.draws("step_s", y="procedure")  # bars laid horizontally: the quantity on x
    strip = _panels.draws("check_held", x="check", y="contract row")  # categories both ways: the colour shows it
    h = go.Figure([go.Bar(x=[0.1], y=["cold"], orientation="h", meta=timeline),
                   go.Scatter(x=[0], y=["Describe"], mode="markers", meta=strip)])
    _panels.label_units(h, "llamacpp")
    assert [(t.meta["x"], t.meta["y"]) for t in h.data] == [("time (s)", "procedure"), ("check", "contract row")]


SAMPLES = {  # rows each figure kind draws something of, in the shape its probe's evidence has
    "survival": RETENTION_ROWS,
    "warmup": [{"prefix_tokens": 64, "boundary": "block", "pressure": x, "fraction": 1.0} for x in (0.0, 2.0)],
    "reuse_matrix": REUSE_ROWS,
    "timeline": REUSE_ROWS,
    "latency": [{"procedure": p, "ttft_s": 0.01 * (i + 1)} for i, p in enumerate(("cold", "same", "other"))],
    "capacity": [{"budget_tokens": 256, "measured_capacity_tokens": 240}],
    "loop_ttft": [{"arm": "a", "step": i, "ttft_s": 0.1, "prompt": 10, "computed": 2} for i in range(3)],
    "loop_reuse": [{"arm": "a", "step": i, "reused": 8, "theoretical": 8} for i in range(3)],
    "loop_attribution": [{"arm": "a", "step": 0, "reused": 8, "unexplained": 2}],
    "loop_speedup": [{"arm": "a", "speedup_vs_best_llamacpp": 1.2, "speedup_ci_low": 1.0, "speedup_ci_high": 1.4}],
    "events_fidelity": [{"request": 0, "arm": "right", "predicted": 64, "reported": 64}],
    "events_timeline": [{"t_s": 0.1, "mark": "gap", "seq": 7, "count": 7}],
    "events_loss_curve": [{"consumer": 1, "lease": "held", "seen_fraction": 1.0}],
    "pd_ttft_split": [{"run": "single", "ttft_s": 0.2}, {"run": "P/D", "ttft_s": 0.15, "context_s": 0.05}],
    "pd_cached_tokens": [{"run": "P/D", "prompt_tokens": 200, "cached_tokens": 192}],
    "gateway_hit_rate": [{"kind": "shape", "shape": "kv-exact", "engine_hit_rate": 0.6, "hit_ci_low": 0.5,
                          "hit_ci_high": 0.7, "best_hit_rate": 0.62}],
    "gateway_ttft": [{"kind": "shape", "shape": "kv-exact", "ttft_p50_s": 0.09, "ttft_p50_ci_low": 0.05,
                      "ttft_p50_ci_high": 0.12, "ttft_p95_s": 0.2}],
    "gateway_inventory": [{"kind": "inventory", "endpoint": "ep0", "t_s": 0.1, "inventory_blocks": 4}],
    "evaltable_throughput": [{"kind": "cell", "workload": "w", "concurrency": 1, "output_tokens_per_s": v}
                             for v in (10.0, 12.0)],
    "evaltable_ttft": [{"kind": "request", "concurrency": 1, "run": r, "repeat": i > 0, "ttft_s": 0.5 + i,
                        "cached_tokens": 0} for r in ("r1", "r2") for i in range(2)],
    "conformance_rows": [{"row": "Describe", "check": "c", "ok": ok} for ok in (True, False, None)],
    "suffix_ttft_curve": [{"section": "suffix_ttft_curve", "suffix_tokens": n, "ttft_ms": 5.0, "suffix_and_ttft_ms": 6.0}
                          for n in (0, 64)],
    "bench_stages": [{"turn": 1, "prefix_ms": 1.0, "suffix_ms": 2.0, "decode_ms": 3.0}],
    "gates_prefill": [{"kind": "timed", "served": True, "arm": "a", "role": "baseline", "tier": 8192, "run": k,
                       "first_output_s": 1.0 + k} for k in range(3)],
}
OPTIONS = {"timeline": {"spans": (("t_setup_s", "setup"), ("ttft_s", "probe to first token")), "lane": "case",
                         "title": "Per-request timeline"}}


@pytest.mark.parametrize("kind", sorted(plots.BUILDERS))
def test_every_figure_kind_names_the_declared_metric_of_each_trace_it_draws(kind):
    """Review of issue 51 (item 6): each trace's quantity comes from the metric its builder names, so a figure kind
    whose trace names none cannot reach a page (label_units refuses it); a new kind brings its sample rows here."""
    assert kind in SAMPLES, f"no sample rows for figure kind {kind!r}: add them to SAMPLES"
    fig = plots.BUILDERS[kind](SAMPLES[kind], **OPTIONS.get(kind, {}))
    assert fig.data, kind
    _panels.label_units(fig, "llamacpp")
    assert all(t.meta["metric"] in metrics.METRICS and t.meta["x"] and t.meta["y"] for t in fig.data)


def test_every_figure_names_its_result_class_and_its_p50_p90_p95_with_the_run_count():
    """Issue 50's Done-when: "Every published figure names its result class and its p50/p90/p95 with the run count"
    (review item 14: only the gates' figure named its class, its percentiles on hover only). Each side-by-side figure
    says in its subtitle the class benchmark integrity reads of the findings it draws and, where it draws timings
    over repeated runs, their p50 ●, p90 ◇ and p95 △ with the run count; one of a single run says it has none."""
    from dataclasses import replace

    from workbench.certify.integrity import result_class

    def aiperf(engine: str) -> findings.Finding:
        rows = [{"kind": "cell", "workload": "prefix-1k", "concurrency": c, "run": f"r{k}", "output_tokens_per_s": tps}
                for c, k, tps in ((1, 1, 10.0), (1, 2, 12.0), (1, 3, 13.0), (2, 1, 18.0), (2, 2, 19.0), (2, 3, 17.0))]
        return findings.Finding(probe="evaltable.prefix_caching", claims=list(probes.declared(
            "evaltable.prefix_caching").claims), verdict="confirmed", summary="s", engine=engine, environment={},
            params={"model": "synthetic:tiny"}, evidence={"columns": list(rows[0]), "rows": rows, "notes": []},
            result_class="raw_backend_control")

    throughput = plots.side_by_side("evaltable.prefix_caching", [aiperf("llamacpp-server")])[0]
    said = "result class raw_backend_control · p50 · p90 · p95 over 3 runs of the whole workload (p50 ●, p90 ◇, p95 △)"
    assert throughput.integrity == said and said in _panels.plain(throughput.fig.layout.title.text)
    assert sorted({t.meta["stat"] for t in throughput.fig.data}) == ["p50", "p90", "p95"]
    f = finding("reuse.per_request_metrics", REUSE_ROWS)
    (matrix, _) = plots.side_by_side("reuse.per_request_metrics", [f])
    assert result_class(f)[0] == "microbenchmark"  # read from integrity, not decided here
    assert matrix.integrity == "result class microbenchmark · 1 run: its own values, no p50 · p90 · p95 across runs"
    assert matrix.integrity in _panels.plain(matrix.fig.layout.title.text)
    # two engines of two classes: named each, and never on one axis (mixed classes are never compared)
    mixed = plots.side_by_side("evaltable.prefix_caching", [aiperf("llamacpp-server"),
                                                            replace(aiperf("vllm-server"), result_class="microbenchmark")])[0]
    assert mixed.integrity.startswith("result classes raw_backend_control, microbenchmark (mixed classes: not compared)")
    assert mixed.fig.layout.yaxis2.matches is None and "their result classes differ" in mixed.fig.layout.title.text
    (one,) = [fig for name, fig in plots.for_finding(f) if name == "matrix"]  # a notebook's figure of one finding too
    assert "result class microbenchmark · 1 run" in _panels.plain(one.layout.title.text)


def test_side_by_side_is_deterministic_and_offline():
    fs = three_engines("retention.pinning_under_pressure", RETENTION_ROWS, RETENTION_ROWS)
    bundles = [[plots.show(s.fig)._repr_mimebundle_() for s in plots.side_by_side(fs[0].probe, fs)]
               for _ in range(2)]
    assert json.dumps(bundles[0], sort_keys=True) == json.dumps(bundles[1], sort_keys=True)
    assert plots.side_by_side("not.a.probe", fs) == []


def test_summary_view_shows_each_probes_figures_side_by_side(shown):
    from pathlib import Path

    fs = three_engines("retention.pinning_under_pressure", RETENTION_ROWS, RETENTION_ROWS)
    widgets.side_by_side([(Path(f"{i}.json"), f) for i, f in enumerate(fs)])
    assert [type(o).__name__ for o in shown] == ["Markdown", "Shown", "Markdown", "Shown", "Markdown"]
    assert all(len(panels(o.fig)) == 2 for o in shown if type(o).__name__ == "Shown")
    assert "No panel for trtllm (not-run: tensorrt_llm is not installed)." in shown[2].data


def test_the_loop_is_declared_like_a_probe_and_its_figures_are_figure_kinds():
    """The loop's arm and gate findings resolve to one declaration (claims, version, figures) whose kinds are
    builders of this module: the report draws them through the probes' path."""
    from workbench.loop import results

    arm, gate = probes.declared("loop.llamacpp"), probes.declared("loop.gate")
    assert isinstance(arm, probes.Declared) and type(arm) is type(gate) is results.Loop
    assert probes.family("loop.llamacpp-spec") == "loop" and probes.family("not.a.probe") is None
    assert probes.family("retention.pinning_under_pressure") == "retention.pinning_under_pressure"
    assert [n for n, _ in plots.figures_of("loop.llamacpp")] == ["ttft", "reuse", "attribution", "speedup"]
    assert all(fig.kind in plots.BUILDERS for fig in arm.figures)
    assert not hasattr(plots, "loop_figures")  # one figure path


def test_a_metrics_figure_draws_one_row_per_finding():
    f = finding("retention.pinning_under_pressure", RETENTION_ROWS)
    f = findings.Finding(**{**f.__dict__, "params": {"arm": "a", "model": "m"},
                            "metrics": {"speedup_vs_best_llamacpp": {"value": 2.0, "source": "derived"}}})
    rows = plots.rows_of(probes.Figure("s", "loop_speedup", rows="metrics"), [f, f])
    assert rows == [{"arm": "a", "model": "m", "speedup_vs_best_llamacpp": 2.0}] * 2
    assert plots.rows_of(probes.Figure("s", "survival"), [f]) == RETENTION_ROWS


def test_a_loop_speed_up_over_few_turns_says_so_under_its_arm():
    """make run's loop compares 3 turns; its bars were titled 95% CIs like any other."""
    rows = [{"arm": arm, "speedup_vs_best_llamacpp": 1.0, "speedup_ci_low": 0.9, "speedup_ci_high": 1.1,
             **({"speedup_turns": n} if n is not None else {})} for arm, n in (("a", 3), ("b", 25), ("c", None))]
    assert list(plots.loop_speedup(rows).layout.xaxis.ticktext) == ["a<br>CI over 3 turns", "b", "c"]


def test_log_axes_label_their_ticks_in_full_or_turn_linear_under_a_decade():
    """Plotly's own log ticks read "5, 2, 0.1, 5" (a bare digit between powers of ten); a log axis spanning decades
    gets 1, 2 and 5 of each decade written out, one spanning less reads linear, matched panels get one set of ticks."""
    fig = plotstyle.subplots(rows=1, cols=2)
    fig.add_scatter(x=[1, 2], y=[0.004, 0.03], row=1, col=1)
    fig.add_scatter(x=[1, 2], y=[0.2, 0.3], row=1, col=2)
    fig.update_yaxes(type="log", dtick="D2")
    fig.update_yaxes(matches="y", row=1, col=2)
    plotstyle.log_ticks(fig)
    for axis in (fig.layout.yaxis, fig.layout.yaxis2):
        assert axis.type == "log" and axis.dtick is None
        assert list(axis.ticktext) == ["0.005", "0.01", "0.02", "0.05", "0.1", "0.2"]  # the union's: 0.004 to 0.3
    fig.data[0].y, fig.data[1].y = [0.02, 0.03], [0.025, 0.035]
    assert plotstyle.log_ticks(fig).layout.yaxis.type == plotstyle.log_ticks(fig).layout.yaxis2.type == "linear"
    wide = plotstyle.new(dict(type="scatter", x=[1, 2], y=[1e-6, 1e6]))
    wide.update_yaxes(type="log")
    ticks = list(plotstyle.log_ticks(wide).layout.yaxis.ticktext)
    assert len(ticks) <= plotstyle.MAX_TICKS and ticks[0] == "1e-06" and ticks[-1] == "1e+06"


def test_an_unnamed_series_stays_out_of_the_side_by_side_legend():
    """Plotly names an unnamed trace "trace 0" in the legend: a composed figure leaves it out, named ones stay."""
    one = plotstyle.axes("t", "x", "y").add_bar(x=["a"], y=[1]).add_scatter(x=["a"], y=[2], name="named")
    fig = _panels.compose([one, one], ["<b>e1</b>", "<b>e2</b>"], "title", ["m", "m"])
    assert [t.name for t in fig.data if t.showlegend] == ["named"]


def test_a_series_keeps_the_colour_its_builder_gave_it_side_by_side():
    """The isolation lanes' medians are dark lines over coloured trials: composing the panels keeps them so."""
    rows = [{"procedure": p, "ttft_s": 0.01 * (k + 1) * (1 if p == "cold A" else 20)} for p in ("cold A", "other B")
            for k in range(3)]
    fig = _panels.compose([plots.latency(rows)], ["<b>e</b>"], "title", ["m"])
    medians = [t for t in fig.data if t.name.endswith("median")]
    assert len(medians) == 2 and {t.line.color for t in medians} == {"#333"}
    assert fig.layout.yaxis.type == "log" and "0.1" in fig.layout.yaxis.ticktext  # 0.01 to 0.6: over a decade


def test_an_engine_gets_one_panel_for_its_not_run_findings_and_none_beside_one_where_it_ran():
    """make run's loop: the llama.cpp pass reports vLLM's and TensorRT-LLM's arms not-run on its model, vLLM's own pass
    runs them on another; each engine is one panel, not one per model a pass reported it on."""
    from dataclasses import replace

    probe = "reuse.per_request_metrics"
    fs = three_engines(probe, REUSE_ROWS, REUSE_ROWS[:2])
    vllm_not_run = on(finding(probe, [], "not-run", "no GGUF on vLLM"), "vllm", "0.32.0")
    trtllm_again = on(finding(probe, [], "not-run", "tensorrt_llm is not installed"), "trtllm", None)
    fs += [replace(vllm_not_run, params={"model": "smollm2-135m"}), replace(trtllm_again, params={"model": "other"})]
    cols = plots.columns(probe, fs, ["llamacpp", "trtllm"])
    assert [e for e, _ in cols] == ["trtllm", "llamacpp", "vllm"]
    assert [f.verdict for f in dict(cols)["vllm"]] == ["confirmed"] and len(dict(cols)["trtllm"]) == 2
    for s in plots.side_by_side(probe, fs, ["llamacpp", "trtllm"]):
        assert len(panels(s.fig)) == 2 and s.caption == "No panel for trtllm (not-run: tensorrt_llm is not installed)."


def test_a_loop_speed_up_whose_arms_share_few_turns_says_so_once_under_the_axis():
    """Said under each of five arms, the two-line ticks ran into one another on the real report at 1024 px."""
    rows = [{"arm": arm, "speedup_vs_best_llamacpp": 1.0, "speedup_ci_low": 0.9, "speedup_ci_high": 1.1,
             "speedup_turns": 3} for arm in ("a", "b")]
    fig = plots.loop_speedup(rows)
    assert fig.layout.xaxis.title.text == "arm (CI over 3 turns)" and fig.layout.xaxis.ticktext is None


def test_a_panel_title_is_wrapped_to_its_column_the_engine_line_whole_and_no_word_broken():
    """Issue 51: panel headers broke model names mid-word ("SmolLM2-135M-Instr / uct-Q4_1")."""
    title = "<b>llamacpp</b> 0.3.36 · reference<br>SmolLM2-135M-Instruct-Q4_1 · inconclusive<br>2026-12-07 · probe v4"
    lines = _panels._fit(title, 0.15).split("<br>")
    assert lines[0] == "<b>llamacpp</b>" and lines[1] == "0.3.36 ·" and len(lines) > 3  # a narrow column: the name alone
    assert _panels._fit(title, 0.8).split("<br>")[0] == "<b>llamacpp</b> 0.3.36 · reference"  # a wide one: all of it
    assert "SmolLM2-135M-Instruct-Q4_1" in lines  # whole, on a line of its own, longer than the column's share
    assert max(len(x) for x in lines[1:] if " " in x) <= int(0.15 * _panels.NARROWEST_PLOT_PX / _panels.CHAR_PX)
