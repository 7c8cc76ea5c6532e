"""The report of a small run, opened in a real Chromium at the widths researchers use: every figure the
probes declare renders, nothing is fetched from the network, no JavaScript error, no two text boxes of a
figure overlap (read from the DOM's bounding boxes), and nothing :mod:`browser.checks` guards against (two
quantities on one axis, a series hidden under another, a panel with no data, a table column narrower than its
longest word), each check shown failing on a deliberately broken page. ``WORKBENCH_REPORT_RUN`` names a real run
folder (a ``make run``'s) whose report gets the same checks. Screenshots stay in the test's temporary folder."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from browser.checks import page_figure_problems, table_problems
from browser.pages import TEXT_BOXES, WIDTHS, overlapping
from workbench import findings, loop, manifest, probes, report

pytestmark = pytest.mark.slow
RUN_ENV = "WORKBENCH_REPORT_RUN"  # a run folder whose report the last tests check too (a real make run's)

SMALL = {  # every figure kind, on the tiny synthetic model, sized for seconds
    "retention.pinning_under_pressure": {"pressure": "0.5,2", "expiry_ms": 0, "repeats": 1},
    "reuse.per_request_metrics": {"repeats": 1},
    "prefix.warmup_materialization": {"blocks": "2", "pressure": "0,2", "capacity_tokens": 256, "filler_slots": 2},
    "isolation.cache_salt": {"prompt_tokens": 64, "trials": 16, "resamples": 200},
    "capacity.budget_policy": {},
    "contract.conformance": {},
    "contract.benchreport": {"stable_words": 16, "curve": "0,64", "context_tokens": 512, "max_decode": 2},
}


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    """A run folder: each figure-declaring probe on the real llama.cpp, TensorRT-LLM's not-run findings (the
    real reason this machine gives), and a three-turn agentic loop (llama.cpp's arms; TensorRT-LLM's not run)."""
    out = tmp_path_factory.mktemp("run")
    for name, params in SMALL.items():
        for engine in ("llamacpp", "trtllm"):  # in this process: no child per probe, the same findings
            probes.run(name, engine=engine, model="synthetic:tiny", params=params if engine == "llamacpp" else {},
                       out=out / "findings", isolated=False)
    loop.run("claude-code", arms="llamacpp-cold,llamacpp,llamacpp-spec,trtllm", model="synthetic:tiny", sessions=1,
             turns=3, threads=1, context_tokens=1024, out=out / "findings")
    report.write(out, manifest.load(out))
    return out


def declared(run: Path) -> list[str]:
    """The div id of every figure the report should draw: each probe's declared figures and the loop's that some
    engine has data for (one that none has is its caption alone, which :func:`undrawn` checks)."""
    found = findings.scan([run / "findings"]).findings
    families = sorted({probes.family(f.probe) for _, f in found} - {None})
    assert "loop" in families
    drawn = {f"wb-fig-{report._slug(pf.probe)}-{s.name}" for pf in report.side_by_side(found) for s in pf.figures
             if s.fig is not None}
    ids = [f"wb-fig-{report._slug(p)}-{fig.name}" for p in families for fig in probes.declared(p).figures]
    assert len(ids) == sum(len(pf.figures) for pf in report.side_by_side(found))  # every declared figure: a div or
    return [i for i in ids if i in drawn]  # a caption


def measured(run: Path) -> set[str]:
    """The div ids of the figures whose llama.cpp finding rests on rows it measured (not ``not-applicable``): each
    must draw data, where an engine without the mechanism leaves its panel empty with the reason."""
    found = findings.scan([run / "findings"]).findings
    families = {probes.family(f.probe) for _, f in found
                if f.engine == "llamacpp" and f.verdict not in ("not-applicable", "not-run")}
    return {f"wb-fig-{report._slug(p)}-{fig.name}" for p in families - {None} for fig in probes.declared(p).figures}


def open_report(w, run: Path) -> None:
    w.page.goto((run / "report.html").as_uri())
    w.page.wait_for_function("() => [...document.querySelectorAll('.plotly-graph-div')]"
                             ".every(d => d._fullLayout && d.querySelector('.main-svg'))", timeout=60_000)


WITH_DATA = "(d) => d.data.filter(t => ['x', 'y', 'values'].some(k => t[k] && t[k].length)).length"  # traces with points


@pytest.mark.parametrize("width", WIDTHS)
def test_report_renders_every_figure_offline_without_overlapping_text(small_run, watched, tmp_path, width):
    w = watched(width, 1000)
    open_report(w, small_run)
    w.page.screenshot(path=str(tmp_path / f"first-screen-{width}.png"))
    w.shot(tmp_path / f"report-{width}.png")
    divs = w.page.locator(".plotly-graph-div")
    assert [d.get_attribute("id") for d in divs.all()] == declared(small_run)
    must_draw = measured(small_run)
    assert {"wb-fig-loop-ttft", "wb-fig-capacity-budget-policy-capacity"} <= must_draw
    for d in divs.all():
        traces = d.evaluate("(d) => d.data.length")
        assert d.locator("g.trace").count() >= traces, f"{d.get_attribute('id')}: traces not drawn"
        if d.get_attribute("id") in must_draw:  # an empty figure saying "no data" would pass the line above
            assert d.evaluate(WITH_DATA) > 0, f"{d.get_attribute('id')}: no data drawn, though llama.cpp measured it"
        clash = overlapping(d.evaluate(TEXT_BOXES))
        if clash:
            d.screenshot(path=str(tmp_path / f"{d.get_attribute('id')}-{width}.png"))
        assert clash == [], f"{d.get_attribute('id')} at {width} px: text overlaps {clash[:5]}"
    assert page_figure_problems(w.page) == {}  # no mixed quantities, hidden series or empty panels
    assert table_problems(w.page) == []  # no column narrower than its longest word
    assert w.refused == []
    assert w.errors == []


def test_first_screen_states_what_the_run_established_with_contents_then_the_matrix(small_run, watched, tmp_path):
    """Issue 51: the first screen counted verdicts summed across engines and said nothing learned. It states the
    subject's state and each established answer as a sentence linked to its card; a contents list leads to the
    rest; the claims × engines grid follows."""
    w = watched(1400, 900)
    open_report(w, small_run)
    w.page.screenshot(path=str(tmp_path / "first-screen.png"))
    said = w.page.locator("ul.established").first
    assert said.bounding_box()["y"] < 900  # on the first screen
    sentences = said.locator("li")
    assert sentences.count() >= 1
    first = sentences.first
    href = first.locator("a.verdict").first.get_attribute("href")
    assert href.startswith("#finding-") and w.page.locator(f"section.card[id='{href[1:]}']").count() == 1
    assert "(reference)" in first.inner_text()  # the subject did not run here: what stands is a reference's
    assert "did not run here" in w.page.locator("p.subject").inner_text()
    assert w.page.locator("nav.toc a[href='#cards']").count() == 1
    assert w.page.locator("nav.toc a[href^='#fig-']").count() == len(report.side_by_side(
        findings.scan([small_run / "findings"]).findings))
    matrix = w.page.locator("table.matrix")
    heads = matrix.locator("tr").first.locator("th").all_inner_texts()
    assert heads[:2] == ["claim", "trtllm (subject)"] and "llamacpp" in heads
    assert matrix.locator(".verdict").count() >= len(SMALL)
    reason = next(f.reason for _, f in findings.scan([small_run / "findings"]).findings if f.verdict == "not-run")
    text = w.page.locator("body").text_content()  # closed <details> and the figures' JSON included
    assert text.count(reason) == 1  # the full install text once, in the collapsible block
    assert w.page.locator("#install").evaluate("(d) => !d.open")


def test_a_verdict_badge_opens_its_findings_card_with_the_claims_reason(small_run, watched, tmp_path):
    """Issue 40's done-when: at 1024 px the grid fits the page; clicking llama.cpp's LoRA badge lands on its
    finding's card, in view, whose LoRA row gives that row's own reason, the one the cell shows."""
    w = watched(1024, 800)
    open_report(w, small_run)
    assert w.page.evaluate("() => document.documentElement.scrollWidth") <= 1024  # no sideways scrolling
    matrix = w.page.locator("table.matrix")
    assert matrix.bounding_box()["x"] + matrix.bounding_box()["width"] <= 1024
    col = matrix.locator("tr").first.locator("th").all_inner_texts().index("llamacpp")
    row = matrix.locator("tr", has=w.page.locator("td.claim code", has_text=re.compile(r"^contract\.lora$")))
    cell = row.locator("td").nth(col)
    badge = cell.locator("a.verdict").first
    href = badge.get_attribute("href")
    assert href and href.startswith("#finding-")
    badge.click()
    w.page.wait_for_function("(h) => location.hash === h", arg=href)
    card = w.page.locator("section.card:target")
    assert card.count() == 1 and card.get_attribute("id") == href[1:]
    assert 0 < card.bounding_box()["y"] < 800  # scrolled to it (its top just below the window's)
    w.shot(tmp_path / "card.png")
    finding = next(f for _, f in findings.scan([small_run / "findings"]).findings if f"finding-{f.id}" == href[1:])
    said = card.locator("tr.claim-row", has=w.page.locator("code", has_text=re.compile(r"^contract\.lora$")))
    reason = said.locator("td.reason").inner_text()
    assert reason == finding.reason_on("contract.lora") != finding.summary  # the row's own, not the summary
    assert cell.locator(".why").first.get_attribute("title") == reason  # the cell shows the same reason
    arms = w.page.locator("table.arms")  # the loop's arms × metrics, within the page's width too
    assert arms.locator("tr").count() == 1 + 3 and "ITL (TPOT) p50" in arms.locator("tr").first.inner_text()
    assert arms.bounding_box()["x"] + arms.bounding_box()["width"] <= 1024
    assert w.errors == [] and w.refused == []


# every badge of the matrix but not-run's (which link to the list of engines that did not run): its row's claim, its
# link, the reason its cell shows, and what the card it links to says on that claim (None: no card, or no such row)
BADGES = """() => [...document.querySelectorAll('table.matrix tr')].flatMap(tr => {
    const claim = tr.querySelector('td.claim code');
    return claim ? [...tr.querySelectorAll('a.verdict')].filter(a => !a.textContent.startsWith('not-run'))
        .map(a => { const href = a.getAttribute('href') || '';
                    const card = href.startsWith('#finding-') ? document.getElementById(href.slice(1)) : null;
                    const why = a.nextElementSibling && a.nextElementSibling.classList.contains('why')
                                ? a.nextElementSibling.getAttribute('title') : null;
                    const row = card && [...card.querySelectorAll('tr.claim-row')]  // claims one reason covers share a row
                        .find(r => [...r.querySelectorAll('code')].some(c => c.textContent === claim.textContent));
                    return {claim: claim.textContent, href: href, why: why,
                            card: card ? card.tagName : null,
                            said: row ? row.querySelector('td.reason').textContent : null}; }) : []; })"""


def badges_off_their_cards(w) -> tuple[int, list[dict]]:
    """How many badges there are (not-run's aside), and those that link to no finding's card, or to one that lacks
    their claim's row or gives another reason than the cell (a subject's cell may lead with why it settles nothing)."""
    badges = w.page.evaluate(BADGES)
    return len(badges), [b for b in badges if b["card"] != "SECTION" or not b["said"] or not b["why"]
                         or not b["why"].endswith(b["said"])]


def test_every_badge_lands_on_a_card_that_gives_its_cells_reason(small_run, watched):
    w = watched(1400, 900)
    open_report(w, small_run)
    n, off = badges_off_their_cards(w)
    assert n >= len(SMALL) and off == []


@pytest.mark.skipif(not os.environ.get(RUN_ENV), reason=f"{RUN_ENV} names no run folder (e.g. a make run's)")
def test_a_named_runs_report_every_badge_lands_on_its_card(watched, tmp_path):
    """The same on a run folder given by hand, such as a real ``make run``'s (``WORKBENCH_REPORT_RUN=runs/latest``):
    its report redrawn into a copy, every badge checked and the last clicked, and every figure and table checked
    (``tests/browser/checks.py``: no mixed quantities on an axis, no hidden series, no empty panel, no column
    narrower than its longest word)."""
    run = tmp_path / "run"
    shutil.copytree(os.environ[RUN_ENV], run, ignore=shutil.ignore_patterns("report.html", "*.lock"))
    report.redraw(run)
    w = watched(1024, 800)
    open_report(w, run)
    n, off = badges_off_their_cards(w)
    assert n > 0 and off == [], off[:3]
    for width in (1024, 1920):  # issue 51's done-when, on the named run's real report; overlaps too (4 engines)
        w.page.set_viewport_size({"width": width, "height": 800})
        open_report(w, run)
        assert page_figure_problems(w.page, overlaps=True) == {}, width
        assert table_problems(w.page) == [], width
    w.page.set_viewport_size({"width": 1024, "height": 800})
    w.page.goto((run / "report.html").as_uri())  # the checks opened every <details>
    badge = w.page.locator("table.matrix a.verdict[href^='#finding-']").last
    href = badge.get_attribute("href")
    badge.click()
    w.page.wait_for_function("(h) => location.hash === h", arg=href)
    assert w.page.locator("section.card:target").get_attribute("id") == href[1:]
    assert w.errors == [] and w.refused == []


def test_the_overlap_check_sees_overlapping_text(watched, tmp_path):
    """The check the figures pass can fail: two notes drawn on top of each other are caught."""
    import plotly.graph_objects as go

    fig = go.Figure(layout=dict(xaxis_visible=False, yaxis_visible=False))
    for text in ("first note", "second note"):
        fig.add_annotation(text=text, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False)
    page = tmp_path / "clash.html"
    page.write_text(fig.to_html(include_plotlyjs=True, full_html=True, div_id="clash"))
    w = watched(1024, 800)
    w.page.goto(page.as_uri())
    w.page.wait_for_selector("#clash .main-svg")
    assert overlapping(w.page.locator("#clash").evaluate(TEXT_BOXES)) == [("first note", "second note")]


BROKEN = {  # each check's own failure, as the issue found them in a make run's report
    "mixed": "two quantities on one axis (TTFT's seconds on the hit rate's axis)",
    "unnamed": "a trace that names no metric (its quantity would be a guess from its axis title)",
    "hidden": "a series drawn exactly under another",
    "empty": "a panel with no data",
}


def broken_page(path: Path) -> Path:
    """A page of deliberately broken figures (one per check) beside a sound one, and a table too narrow for a word."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from workbench import plots

    from workbench import panels

    mixed = original_gateway_bug(panels.draws("shape_hit_rate", x="shape"), panels.draws("ttft_s", x="shape"))
    unnamed = go.Figure([go.Bar(x=["kv-exact"], y=[0.6], name="hit rate", meta={"x": "shape", "y": "hit rate"})])
    unnamed.update_yaxes(title_text="hit rate")
    reuse = {"metric": "engine_reuse_fraction", "x": "load", "y": "fraction"}
    line = {"x": [0, 1, 2], "y": [1.0, 1.0, 1.0], "mode": "lines", "meta": reuse}
    hidden = go.Figure([go.Scatter(name="64 tok", **line), go.Scatter(name="128 tok", **line)])
    hidden.update_yaxes(title_text="reuse")
    empty = make_subplots(rows=1, cols=2)
    empty.add_trace(go.Scatter(name="llamacpp", **line), row=1, col=1)
    empty.update_yaxes(title_text="reuse")
    sound = go.Figure([go.Scatter(name="64 tok", **line)])
    sound.update_yaxes(title_text="reuse")
    divs = "".join(plots.to_div(fig, name) for name, fig in
                   (("mixed", mixed), ("unnamed", unnamed), ("hidden", hidden), ("empty", empty), ("sound", sound)))
    table = ("<table style='width: 9em; table-layout: fixed'><tr><td>probe</td><td style='overflow-wrap: anywhere'>"
             "retention.pinning_under_pressure</td></tr></table>")
    path.write_text(f"<!doctype html><meta charset='utf-8'><script>{plots.page_script(_plotlyjs())}</script>"
                    f"<body style='width: 1000px'>{divs}{table}</body>")
    return path


def original_gateway_bug(hit: dict | None, ttft: dict | None):
    """Issue 51's gateway figure as a builder draws it (the reviewer's /tmp/rev-b/mixed.py): the engine-read hit
    rate and TTFT's seconds as bars on one percent axis titled "hit rate", each trace with what its builder names
    in ``meta`` (``hit``, ``ttft``: :func:`workbench.panels.draws`, or None: nothing), through the one figure style
    (:func:`workbench.panels.label_units`, :func:`workbench.panels.compose`)."""
    import plotly.graph_objects as go

    from workbench import panels

    p = go.Figure([go.Bar(x=["kv-exact", "round-robin"], y=[0.6, 0.2], name="hit rate", meta=hit),
                   go.Bar(x=["kv-exact", "round-robin"], y=[0.053, 0.09], name="TTFT p50 (s)", meta=ttft)])
    p.update_yaxes(title_text="hit rate", tickformat=".0%")
    panels.label_units(p, "llamacpp")
    return panels.compose([p], ["<b>llamacpp</b>"], "Hit rate and TTFT per shape", ["m"])


def _plotlyjs() -> str:
    import plotly.offline

    return plotly.offline.get_plotlyjs()


def test_each_check_fails_on_the_figure_or_table_it_guards_against(watched, tmp_path):
    """The checks the report passes can fail: each on the deliberately broken figure or table it is for, and a
    sound figure passes them all."""
    w = watched(1024, 800)
    w.page.goto(broken_page(tmp_path / "broken.html").as_uri())
    w.page.wait_for_function("() => [...document.querySelectorAll('.plotly-graph-div')]"
                             ".every(d => d._fullLayout && d.querySelector('.main-svg'))", timeout=60_000)
    found = page_figure_problems(w.page)
    assert sorted(found) == ["empty", "hidden", "mixed", "unnamed"], found
    # issue 51's gateway bug, each trace's quantity derived from the metric its builder names (the reviewer's
    # construction: with each trace stamped with its axis title the check saw one quantity and passed it)
    assert found["mixed"] == ["axis y mixes quantities: fraction | time (s)",
                              "axis y reads its ticks as percent but draws time (s)"]
    assert found["unnamed"] == ["trace 'hit rate' names no metric it draws (meta.metric): its quantity cannot be "
                                "checked"]
    assert found["hidden"] == ["series '128 tok' is drawn exactly under '64 tok' on axes x/y"]
    assert found["empty"] == ["panel x2y2 has no data"]
    (narrow,) = table_problems(w.page)
    assert "'retention.pinning_under_pressure' does not fit" in narrow and "broken over" in narrow
    assert w.errors == [] and w.refused == []
