"""Figures and notebook views: drawn from evidence rows, offline, deterministic, static without a frontend."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from workbench import findings, plots, widgets

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
    return findings.Finding(probe=probe, claims=["unknown.reuse_metrics"], verdict=verdict, summary="s",
                            engine="llamacpp", environment={}, params={"model": "synthetic:tiny"},
                            evidence={"columns": list(rows[0]) if rows else [], "rows": rows, "notes": []},
                            reason=reason)


def test_survival_has_one_curve_per_arm_against_pressure():
    fig = plots.survival(RETENTION_ROWS)
    assert [t.name for t in fig.data] == ["p35", "p100"]
    assert list(fig.data[0].x) == [0.5, 1.0, 2.0] and list(fig.data[0].y) == [1.0, 0.5, 0.0]
    assert fig.layout.xaxis.type == "log"


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


def test_notebook_bundle_is_offline_and_deterministic():
    f = finding("retention.pinning_under_pressure", RETENTION_ROWS)
    bundles = [plots.show(fig)._repr_mimebundle_() for _, fig in plots.for_finding(f)]
    again = [plots.show(fig)._repr_mimebundle_() for _, fig in plots.for_finding(f)]
    assert json.dumps(bundles, sort_keys=True) == json.dumps(again, sort_keys=True)
    assert set(bundles[0]) == {"application/vnd.plotly.v1+json", "text/plain"}
    assert len(json.dumps(bundles)) < 100_000  # no plotly.js in the notebook


def test_report_div_uses_the_given_id_and_no_script_source():
    div = plots.to_div(plots.survival(RETENTION_ROWS), "wb-fig-0-x")
    assert re.findall(r'<div id="([^"]+)"', div) == ["wb-fig-0-x"]
    assert "<script src" not in div


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
    from workbench import probes

    for name in probes.names():
        for fig in probes.get(name).figures:
            assert fig.kind in plots.BUILDERS, (name, fig.kind)
    assert [n for n, _ in plots.figures_of("retention.pinning_under_pressure")] == ["survival", "timeline"]
    assert plots.figures_of("not.a.probe") == []
