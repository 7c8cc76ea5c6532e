"""The summary notebook's findings browser (``widgets.findings_browser``, interactive) as a page in a real Chromium:
the output the notebook shows, saved beside a run folder, opened from disk. It sorts, searches and pages with
nothing fetched (DataTables comes inlined from itables' wheel), and a row's link lands on its finding's card."""

from __future__ import annotations

from dataclasses import replace

import IPython.display
import pytest

from workbench import findings, probes, report, widgets

pytestmark = pytest.mark.slow
SHOWN = 12  # findings: more than a page (10)


@pytest.fixture(scope="module")
def page_file(tmp_path_factory):
    """``notebooks/summary.html``: the browser's output over ``run/findings`` (a real survey with a card in the
    report, and later not-run ones), its links relative to ``notebooks/`` as in the notebook Jupyter names."""
    root = tmp_path_factory.mktemp("browse")
    out = root / "run"
    survey = probes.run("surface.contract_mapping", engine="llamacpp", isolated=False)
    findings.write(survey, out / "findings")
    report.write(out)
    for i in range(SHOWN - 1):
        findings.write(replace(survey, id="", created="", verdict="not-run", engine="trtllm", claim_verdicts={},
                               metrics={}, reason="no GPU here", summary=f"Not run, number {i:02d}: no GPU here"),
                       out / "findings")
    shown: list = []
    mp = pytest.MonkeyPatch()
    mp.setattr(widgets, "display", shown.append)
    mp.setattr(IPython.display, "display", shown.append)
    mp.setenv(widgets.envvars.NOTEBOOK, str(root / "notebooks" / "summary.ipynb"))
    try:
        widgets.findings_browser(findings.load(out / "findings"), out / "findings", interactive=True)
    finally:
        mp.undo()
    (root / "notebooks").mkdir()
    path = root / "notebooks" / "summary.html"
    path.write_text("<!doctype html><meta charset='utf-8'><body>" + "".join(o.data for o in shown) + "</body>")
    return path, survey


def rows(page) -> list[list[str]]:
    return page.locator("table.dataTable tbody tr").evaluate_all(
        "(rs) => rs.map(r => [...r.children].map(c => c.textContent.trim()))")


def test_the_browser_sorts_searches_and_pages_offline_and_opens_a_card(watched, page_file, tmp_path):
    path, survey = page_file
    w = watched(1400, 1000)
    w.page.goto(path.as_uri())
    w.page.locator("table.dataTable tbody tr").first.wait_for(timeout=30_000)
    assert len(rows(w.page)) == 10 and f"of {SHOWN} entries" in w.page.locator(".dt-info").inner_text()
    # a quoted phrase: DataTables' smart search would match "07" alone in every row's date on the 7th
    w.page.locator(".dt-search input").fill('"number 07"')
    w.page.wait_for_function("() => document.querySelectorAll('table.dataTable tbody tr').length == 1")
    assert [r[8] for r in rows(w.page)] == ["Not run, number 07: no GPU here"]
    w.page.locator(".dt-search input").fill("")
    summary = w.page.locator("table.dataTable thead th", has_text="summary")
    first = "(s) => document.querySelector('table.dataTable tbody tr td:nth-child(9)').textContent.trim() == s"
    summary.click()  # sort ascending ("Not run, ..." before "The contract rows ..."), then descending
    w.page.wait_for_function(first, arg="Not run, number 00: no GPU here")
    summary.click()
    w.page.wait_for_function(first, arg=survey.summary.strip())
    w.shot(tmp_path / "findings-browser.png")
    card = w.page.locator("table.dataTable tbody tr").first.locator("a", has_text="card")
    card.evaluate("(a) => a.removeAttribute('target')")  # the same tab, to read where it lands
    card.click()
    w.page.wait_for_url(f"**/run/report.html#{report.card_id(survey.id)}")
    assert w.page.locator(f'section.card[id="{report.card_id(survey.id)}"]:target').count() == 1
    assert w.refused == [] and w.errors == []
