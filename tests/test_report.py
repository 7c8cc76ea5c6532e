"""The HTML report and the tables behind it: offline, deterministic, metrics rendered one way."""

from __future__ import annotations

import html
import re
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from workbench import claims, findings, manifest, metrics, probes, report, settle


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A run folder with real findings on the synthetic model, one not-run finding and one corrupt file."""
    out = tmp_path_factory.mktemp("run")
    ran = {name: probes.run(name, engine="llamacpp", model="synthetic:tiny", out=out / "findings",
                            params={"repeats": 1} if name.startswith("reuse") else {"pressure": "0.5,2", "expiry_ms": 0})
           for name in ("retention.pinning_under_pressure", "reuse.per_request_metrics")}
    probes.run("surface.contract_mapping", engine="llamacpp", out=out / "findings", isolated=False)
    # the not-run finding is a copy of a real one, as TensorRT-LLM's would be: no second run of the probe for it
    not_run = replace(ran["reuse.per_request_metrics"], id="", created="", verdict="not-run", reason="no GPU here", engine="trtllm", claim_verdicts={},
                      summary="Not run on trtllm: no GPU here", metrics={}, evidence={"rows": [], "notes": []})
    findings.write(not_run, out / "findings")
    (out / "findings" / "broken.json").write_text("{not json")
    manifest.record(out, manifest.NotebookRun("10_retention", "ok", {}, "notebooks/10_retention.ipynb", "t", 3.25))
    manifest.record(out, manifest.NotebookRun("20_reuse_metrics", "error", {}, "notebooks/20_reuse_metrics.ipynb", "t",
                                          1.0, "ValueError: boom (cell 4)"))
    return out


def test_report_is_offline_and_self_contained(run_dir):
    page = report.write(run_dir, manifest.load(run_dir)).read_text()
    assert page.count("Plotly.newPlot") >= 2  # reuse's matrix and timeline (retention's rows hold neither here)
    assert len(re.findall(r"^\* plotly\.js \(basic - minified\) v\d", page, re.M)) == 1  # inlined once: the partial
    assert len(re.findall(r'var packed = "', page)) == 1  # bundle (1.2 MB, the whole of plotly.js 4.8 MB), gzipped:
    assert len(page) < 1_000_000  # 0.5 MB in base64
    assert '"template":' not in page and page.count("var template = {") == 1  # once, not 7 kB in every figure
    assert not re.search(r"<script[^>]+src=", page)  # nothing fetched: no CDN, no file next to it


def test_report_div_ids_are_deterministic(run_dir):
    ids = lambda page: re.findall(r'<div id="([^"]+)" class="plotly-graph-div"', page)  # noqa: E731
    first, second = report.render(run_dir), report.render(run_dir)
    assert ids(first) == ids(second)
    assert all(i.startswith("wb-fig-") for i in ids(first))


def test_report_content(run_dir):
    page = report.render(run_dir, manifest.load(run_dir))
    assert 'href="notebooks/10_retention.ipynb"' in page
    assert "ValueError: boom (cell 4)" in page
    assert "no GPU here" in page  # not-run findings show their reason
    assert "broken.json" in page  # corrupt files are reported, not fatal
    retention = next(f for _, f in findings.scan([run_dir / "findings"]).findings if f.probe.startswith("retention"))
    rendered = metrics.render("engine_resident_tokens", retention.metric("engine_resident_tokens"))
    assert rendered.endswith("tok") and rendered in page


def test_report_leads_with_the_matrix_then_what_did_not_run_and_how_to_resolve_it(run_dir):
    page = report.render(run_dir, manifest.load(run_dir))
    assert page.index('class="matrix"') < page.index('id="not-run"') < page.index('id="open"') \
        < page.index('id="verdicts"')
    assert f"{len(claims.CLAIMS)} of {len(claims.CLAIMS)} claims unresolved" in page
    assert "unresolved — needs tensorrt_llm on an NVIDIA GPU" in page
    assert "workbench probe retention.pinning_under_pressure --engine trtllm" in page
    text = re.sub(r"<script.*?</script>", "", page, flags=re.S)  # the page's words, not the figures' JSON
    assert text.count("no GPU here") == 1  # the reason once per engine, not once per claim or probe


def test_verdict_matrix_puts_the_subject_first_and_folds_versions_into_badges(run_dir):
    found = findings.scan([run_dir / "findings"]).findings
    m = report.verdict_matrix(found)
    assert m.engines[0] == "trtllm" and "llamacpp" in m.engines
    assert [r.claim.id for r in m.rows] == list(claims.CLAIMS)
    row = next(r for r in m.rows if r.claim.id == "unknown.reuse_metrics")
    by = dict(zip(m.engines, row.cells))
    assert [b.verdict for b in by["trtllm"]] == ["not-run"] and not row.resolved
    assert [b.verdict for b in by["llamacpp"]] == ["not-applicable"]
    assert "reuse.per_request_metrics" in by["llamacpp"][0].detail


def test_not_run_rows_fold_into_one_line_per_engine(run_dir):
    found = findings.scan([run_dir / "findings"]).findings
    (trt,) = report.not_run_engines(found)
    assert (trt.engine, trt.probes, trt.short, trt.detailed) == ("trtllm", ("reuse.per_request_metrics",),
                                                                 "no GPU here", ())
    page = report.render(run_dir)
    table = page[page.index('id="verdicts"'):page.index("</table>", page.index('id="verdicts"'))]
    assert table.count('class="folded"') == 1 and table.count(">not-run<") == 1


def test_claim_status_follows_the_blueprint_rule(run_dir):
    found = findings.scan([run_dir / "findings"]).findings
    status = report.claim_status(found, "unknowns")
    assert list(dict.fromkeys(status.claim)) == [c.id for c in claims.in_section("unknowns")]
    reuse = status[status.claim == "unknown.reuse_metrics"]
    subject, reference = reuse.iloc[0], reuse.iloc[1]
    assert (subject.role, subject.engine, subject.resolved) == ("subject", "trtllm", False)
    assert pd.isna(subject.verdict)
    assert "needs tensorrt_llm" in subject.summary and "--engine trtllm" in subject.summary
    assert (reference.role, reference.engine, reference.verdict) == ("reference", "llamacpp", "not-applicable")
    assert not reference.resolved  # another engine's answer never resolves a TensorRT-LLM claim
    connector = status[status.claim == "unknown.connector_granularity"]
    assert len(connector) == 1 and connector.verdict.isna().all()  # still open, still listed
    assert not status.resolved.any()

    risks = report.claim_status(found, "risks").query("engine == 'llamacpp'").set_index("claim")
    assert risks.loc["risk.reuse_metrics", "verdict"] == "not-applicable"  # llama.cpp has no reuse counter
    assert (risks.role == "reference").all()


def test_a_newer_not_run_does_not_mask_an_answer(run_dir, monkeypatch):
    """Ranking only: the relabelled llama.cpp answer is taken as re-derived (which findings settle is
    workbench.settle's rule, tests/test_settle.py; a relabelled one does not)."""
    monkeypatch.setattr(settle, "unsettled", lambda f, claim_id, now=None: ())
    path, ran = next((p, f) for p, f in findings.scan([run_dir / "findings"]).findings
                     if f.probe.startswith("reuse") and f.engine == "llamacpp")
    ran = replace(ran, engine="trtllm", environment=ran.environment | {"engine_version": "1.2.0"})
    later = replace(ran, id="later", created="2999-01-01T00:00:00+00:00", verdict="not-run", reason="later")
    status = report.claim_status([(path, ran), (path, later)], "unknowns").set_index("claim")
    assert status.loc["unknown.reuse_metrics", "verdict"] == "not-applicable"
    assert status.loc["unknown.reuse_metrics", "resolved"]  # a subject-engine answer resolves it
    assert report.verdict_frame([(path, ran), (path, later)]).verdict.tolist() == ["not-run"]  # newest is shown


def test_metrics_frame_renders_every_metric_through_metrics_render(run_dir):
    _, f = next((p, f) for p, f in findings.scan([run_dir / "findings"]).findings if f.probe.startswith("retention"))
    table = report.metrics_frame(f)
    assert table.value.tolist() == [metrics.render(t, m["value"]) for t, m in f.metrics.items()]
    assert report.metric_text("not_declared_yet", 3) == "3"


def test_findings_browser_shows_every_finding_statically(run_dir, monkeypatch):
    from workbench import widgets

    shown = []
    monkeypatch.setattr(widgets, "display", shown.append)
    with pytest.warns(UserWarning, match="broken.json"):
        table = findings.load(run_dir / "findings")
    widgets.findings_browser(table, run_dir / "findings", interactive=False)
    (page,) = shown
    assert page.data.count("<a href=") == len(table) and all(html.escape(s.strip()) in page.data for s in table.summary)


# --------------------------------------------------------------------------- the engines side by side


def plotted(page: str) -> dict[str, dict]:
    """Each plotly figure of the page by its div id, as the JSON the page hands to Plotly.newPlot."""
    import json

    dec, out = json.JSONDecoder(), {}
    for m in re.finditer(r'Plotly\.newPlot\(\s*"([^"]+)",\s*', page):
        data, end = dec.raw_decode(page, m.end())
        layout, _ = dec.raw_decode(page[end:].lstrip(", \n"))
        out[m.group(1)] = {"data": data, "layout": layout}
    return out


def panel_titles(fig: dict) -> list[str]:
    return [a["text"] for a in fig["layout"].get("annotations", []) if a.get("yanchor") == "bottom" and a["y"] == 1]


def with_vllm(run_dir: Path, tmp_path: Path) -> Path:
    """A copy of ``run_dir`` with the llama.cpp reuse finding restated as vLLM's (rendering only)."""
    import shutil

    out = tmp_path / "run"
    shutil.copytree(run_dir, out)
    f = next(f for _, f in findings.scan([out / "findings"]).findings
             if f.probe.startswith("reuse") and f.engine == "llamacpp")
    findings.write(replace(f, id="", engine="vllm", environment=f.environment | {"engine_version": "0.32.0"}),
                   out / "findings")
    return out


def test_each_report_figure_shows_every_engine_with_data_side_by_side_and_names_the_rest(run_dir, tmp_path):
    page = report.render(with_vllm(run_dir, tmp_path))
    section = page[page.index('id="fig-reuse-per-request-metrics">reuse.per_request_metrics</h3>'):]
    lines = re.findall(r"</span> (\w+)[^:<]*:", section[:section.index("</ul>")])
    assert lines == ["trtllm", "llamacpp", "vllm"]  # each engine's verdict line, subject first
    figs = plotted(page)
    reuse = {k: v for k, v in figs.items() if k.startswith("wb-fig-reuse-per-request-metrics-")}
    assert sorted(reuse) == ["wb-fig-reuse-per-request-metrics-matrix", "wb-fig-reuse-per-request-metrics-timeline"]
    for fig in reuse.values():
        titles = panel_titles(fig)
        assert [t.split("</b>")[0].removeprefix("<b>") for t in titles] == ["llamacpp", "vllm"]
        assert sorted({t["xaxis"] for t in fig["data"]}) == ["x", "x2"]  # both engines that ran, each its panel
        assert not any("no GPU here" in a["text"] for a in fig["layout"]["annotations"])  # no panel of grey text
    captions = re.findall(r'<p class="caption">(.*?)</p>', section)
    assert captions[:2] == ['No panel for trtllm (<a href="#not-run">not-run</a>).'] * 2  # named under each figure
    assert "wb-fig-retention-pinning-under-pressure-survival" not in figs  # no engine has its rows: its caption alone
    assert "<b>Survival of the retained prefix under pressure</b>: not drawn, no engine has data for it" in page


def test_report_figures_follow_the_standing_rule(run_dir):
    """A newer not-run finding does not take an engine's panel from one that ran (``standing``'s rule)."""
    found = findings.scan([run_dir / "findings"]).findings
    path, ran = next((p, f) for p, f in found if f.probe.startswith("reuse") and f.engine == "llamacpp")
    later = replace(ran, id="later", created="2999-01-01T00:00:00+00:00", verdict="not-run", reason="later")
    assert report.standing_findings([*found, (path, later)], ran.probe) == report.standing_findings(found, ran.probe)
    assert [f.engine for f in report.standing_findings(found, ran.probe)] == ["llamacpp", "trtllm"]
    assert report.standing_findings(found, "not.a.probe") == []


@pytest.mark.vllm
@pytest.mark.slow
def test_three_real_engines_side_by_side(run_dir, vllm_reuse, tmp_path):
    """The reuse probe run for real on vLLM beside the run folder's llama.cpp and TensorRT-LLM findings: its
    figures draw both engines that ran, each in its own panel, and name TensorRT-LLM with its reason in the caption. The vLLM
    finding is the session's one run of that probe (tests/conftest.py: vllm_reuse)."""
    import shutil

    f, ran = vllm_reuse
    out = tmp_path / "run"
    shutil.copytree(run_dir, out)
    shutil.copy(ran / f"{f.id}.json", out / "findings")
    matrix = plotted(report.render(out))["wb-fig-reuse-per-request-metrics-matrix"]
    titles = panel_titles(matrix)
    assert [t.split("</b>")[0].removeprefix("<b>") for t in titles] == ["llamacpp", "vllm"]
    assert "partial" in titles[1]  # vLLM reports reuse in whole blocks
    assert "x2" in {t["xaxis"] for t in matrix["data"] if t["name"] == "engine accounting"}  # vLLM's own count
    assert {t["xaxis"] for t in matrix["data"]} == {"x", "x2"}


@pytest.fixture(scope="module")
def loop_run(tmp_path_factory) -> Path:
    """A two-turn agentic loop on the real llama.cpp (two arms) with TensorRT-LLM's arm not run (no GPU here)."""
    from workbench import loop

    out = tmp_path_factory.mktemp("loop")
    loop.run("claude-code", arms="llamacpp-cold,llamacpp,trtllm", model="synthetic:tiny", sessions=1, turns=2,
             threads=1, context_tokens=1024, out=out / "findings")
    return out


def test_the_loop_draws_its_declared_figures_through_the_probes_figure_path(loop_run):
    """The loop's findings are declared like a probe's (``probes.declared``): the report draws its figures in the
    same section, one panel per engine with data, each engine's arms in its panel, TensorRT-LLM named in the caption
    with its reason."""
    found = findings.scan([loop_run / "findings"]).findings
    decl = probes.declared("loop.llamacpp")
    assert type(decl) is type(probes.declared("loop.gate")) and decl.claims == ("gate.turn_time",)
    assert [f.probe for _, f in found if probes.family(f.probe) != "loop"] == []
    (pf,) = report.side_by_side(found)
    assert pf.probe == "loop" and [s.name for s in pf.figures] == [fig.name for fig in decl.figures]
    assert {f.probe for f in pf.findings} == {"loop.llamacpp-cold", "loop.llamacpp", "loop.gate"}
    gate = next(f for f in pf.findings if f.probe == "loop.gate")
    assert gate.params["arm"] == "trtllm"  # the subject's arm: its speed-up (on a GPU) is drawn with the others
    page = report.render(loop_run)
    figs = plotted(page)
    assert sorted(k for k in figs if k.startswith("wb-fig-loop-")) == sorted(
        f"wb-fig-loop-{fig.name}" for fig in decl.figures)
    ttft = figs["wb-fig-loop-ttft"]
    titles = panel_titles(ttft)
    assert [t.split("</b>")[0].removeprefix("<b>") for t in titles] == ["llamacpp"]  # TensorRT-LLM: the caption
    assert "workbench loop · claude-code" in ttft["layout"]["title"]["text"]
    assert {t["name"] for t in ttft["data"] if t["xaxis"] == "x"} == {"llamacpp-cold", "llamacpp"}
    assert 'No panel for trtllm (<a href="#not-run">not-run</a>); vllm (no finding here).' in page
    speedup = figs["wb-fig-loop-speedup"]  # drawn from each arm finding's metrics
    bars = {a: y for t in speedup["data"] for a, y in zip(t["x"], t["y"])}
    by_arm = {f.params["arm"]: f for _, f in found}
    assert set(bars) == {a for a, f in by_arm.items() if "speedup_vs_best_llamacpp" in f.metrics} != set()
    assert all(bars[a] == pytest.approx(by_arm[a].metric("speedup_vs_best_llamacpp")) for a in bars)
    assert page.index('id="figures"') < page.index('<h3 id="fig-loop">loop</h3>')  # in the figures' section, beside the probes'


# --------------------------------------------------------------------------- each claim row's reason, and its card


def test_every_claim_row_of_a_finding_has_its_own_reason_from_the_rule(run_dir):
    """A row with a verdict of its own carries its rule's words; a row with the finding's verdict, the summary."""
    found = [f for _, f in findings.scan([run_dir / "findings"]).findings if f.verdict != "not-run"]
    assert found and all(f.claim_reasons.keys() == f.claim_verdicts.keys() for f in found)
    assert all(f.reason_on(c) for f in found for c in f.claims)
    survey = next(f for f in found if f.probe == "surface.contract_mapping")
    for row in ("contract.decode", "contract.embed", "contract.slot_switch"):  # why llama.cpp reads not-applicable
        assert survey.verdict_on(row) == "not-applicable"
        assert survey.reason_on(row).startswith("Not applicable to llamacpp: the row names a TensorRT-LLM mechanism")
    retention = next(f for f in found if f.probe.startswith("retention"))
    if retention.verdict_on("risk.retention_bias") != retention.verdict:  # its own verdict: never the summary
        assert retention.reason_on("risk.retention_bias") != retention.summary


def test_each_badge_links_to_its_findings_card_and_the_cell_shows_the_claims_reason(run_dir):
    found = findings.scan([run_dir / "findings"]).findings
    page = report.render(run_dir, manifest.load(run_dir))
    m = report.verdict_matrix(found)
    badges = [b for r in m.rows for cell in r.cells for b in cell if b.verdict != "not-run"]
    assert badges and all(b.href.startswith("#finding-") and b.reason for b in badges)
    cards = set(re.findall(r'<section class="card" id="([^"]+)"', page))
    assert {b.href[1:] for b in badges} <= cards  # every link lands on a card
    survey = next(f for _, f in found if f.probe == "surface.contract_mapping")
    row = next(r for r in m.rows if r.claim.id == "contract.decode")
    (badge,) = dict(zip(m.engines, row.cells))["llamacpp"]
    assert badge.reason == survey.reason_on("contract.decode") and badge.href == f"#finding-{survey.id}"
    assert f'href="#finding-{survey.id}"' in page and survey.reason_on("contract.decode") in page


def test_older_findings_load_with_the_rows_reason_derived_or_marked_absent(run_dir, tmp_path):
    """A v3 finding (no reasons) still loads: a row's reason derived from the supports it recorded, else absent;
    the card says so rather than show the summary beside another verdict."""
    import json

    path, f = next((p, f) for p, f in findings.scan([run_dir / "findings"]).findings
                   if f.probe == "surface.contract_mapping")
    doc = json.loads(path.read_text())
    doc.pop("claim_reasons")
    (tmp_path / "findings").mkdir()
    (tmp_path / "findings" / path.name).write_text(json.dumps(doc | {"schema": "workbench.finding/v3"}))
    ((_, old),) = findings.scan([tmp_path / "findings"]).findings
    assert old.schema == findings.SCHEMA_ID and old.claim_reasons.keys() == f.claim_verdicts.keys()
    assert set(old.claim_reasons.values()) == {None}  # its rows rest on no reading: absent, not made up
    assert findings.rests_words("refuted", [{"metric": "rows_verified", "op": "==", "value": 0}],
                                {"rows_verified": {"value": 0}}).startswith("refuted, resting on ")  # derived
    assert report.NOT_RECORDED in report.render(tmp_path)


def test_first_screen_tallies_what_was_learned_and_puts_errors_up_front(run_dir, tmp_path):
    import shutil

    scan = findings.scan([run_dir / "findings"])
    t = report.tally(scan, manifest.load(run_dir))
    assert (t.resolved, t.total) == (0, len(claims.CLAIMS)) and t.failed == ("20_reuse_metrics",) and t.corrupt == 1
    assert dict(t.verdicts)["not-applicable"] >= 3 and "llamacpp" in dict(t.engines)
    page = report.render(run_dir, manifest.load(run_dir))
    assert page.index('id="errors"') < page.index('id="tally"') < page.index('class="matrix"')
    assert "1 of 2 notebooks failed" in page and "Every notebook failed" not in page
    assert report.tally_text(run_dir, manifest.load(run_dir)).splitlines()[0].startswith(
        f"claims:    0 of {len(claims.CLAIMS)} resolved")
    out = tmp_path / "failed"
    shutil.copytree(run_dir, out)
    manifest.record(out, manifest.NotebookRun("10_retention", "error", {}, "notebooks/10_retention.ipynb", "t", 1.0,
                                              "RuntimeError: no kernel"))
    page = report.render(out, manifest.load(out))
    assert page.index("Every notebook failed (2)") < page.index('class="matrix"')  # never an empty grid alone
    assert "nothing was measured in this run" in report.tally_text(out, manifest.load(out))
    cut = report.tally(scan, manifest.Manifest({"a": manifest.NotebookRun("a", "running", {}, "a.ipynb", "t")}))
    assert (cut.failed, cut.unfinished, cut.all_failed) == ((), ("a",), False)  # a run stopped midway: not a failure
    assert "unfinished: a (still running, or the run was stopped)" in cut.lines()



def test_a_badges_lead_in_the_grid_leaves_out_the_model_its_tooltip_names():
    """The browser check on a small run: the quality smoke's reason led with "(synthetic-35629653129c)", a word no
    9em grid column holds at 1024 px; the badge's tooltip names the model, so the grid's lead leaves it out (the
    reason in full stays the tooltip of the lead)."""
    b = report.Badge("confirmed", 1, "quality.smoke · 0.3.36 · synthetic-35629653129c",
                     "Quality smoke passed on llamacpp (synthetic-35629653129c): A2 holds")
    assert b.lead == "Quality smoke passed on llamacpp: A2 holds"
    assert report.Badge("confirmed", 1, "p · 1 · m", None).lead is None
