"""The notebooks' explorers (``widgets.py``) as JupyterLab would show them, without a browser: what is displayed is
collected instead. The evidence picker never vanishes without a word: one arm shows everything and says there is
nothing to pick; a picker left with nothing picked says so."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from workbench import widgets


@pytest.fixture
def shown(monkeypatch):
    out: list = []
    monkeypatch.setattr(widgets, "display", out.append)
    monkeypatch.setattr(widgets.plots, "for_finding", lambda f, rows: [])
    return out


def _finding(arms):
    return SimpleNamespace(evidence={"columns": ["arm", "x"], "rows": [{"arm": a, "x": i} for i, a in enumerate(arms)]})


def _text(items) -> str:
    return " ".join(getattr(i, "data", "") or "" for i in items if isinstance(i, widgets.Markdown))


def test_one_arm_shows_all_its_evidence_and_says_there_is_nothing_to_pick(shown):
    widgets.evidence(_finding(["only"]), by="arm", interactive=True)
    assert "one arm in this evidence (only): nothing to pick" in _text(shown)
    assert [len(t) for t in shown if isinstance(t, widgets.pd.DataFrame)] == [1]


def test_no_such_column_says_so_rather_than_dropping_the_picker_silently(shown):
    widgets.evidence(_finding(["a", "b"]), by="case", interactive=True)
    assert "no case in this evidence" in _text(shown)


def test_a_picker_with_nothing_picked_says_so(shown):
    import ipywidgets as w

    widgets.evidence(_finding(["a", "b"]), by="arm", interactive=True)
    box = next(t for t in shown if isinstance(t, w.VBox))
    picker = box.children[0]
    assert picker.options == ("a", "b") and [len(t) for t in shown if isinstance(t, widgets.pd.DataFrame)] == [2]
    shown.clear()
    picker.value = ()
    assert "no arm picked" in _text(shown)
    picker.value = ("b",)
    assert [len(t) for t in shown if isinstance(t, widgets.pd.DataFrame)] == [1]


def test_static_mode_shows_everything_and_no_note(shown):
    widgets.evidence(_finding(["only"]), by="arm", interactive=False)
    assert _text(shown) == "" and [len(t) for t in shown if isinstance(t, widgets.pd.DataFrame)] == [1]


# --------------------------------------------------------------------------- the findings browser


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run folder: a real finding (the static llama.cpp survey, no model runs) and its report; then, after the
    report, a later survey (the report has no card for it) and a not-run finding with a long, HTML-like summary."""
    from dataclasses import replace

    from workbench import findings, probes, report

    out = tmp_path_factory.mktemp("run")
    survey = probes.run("surface.contract_mapping", engine="llamacpp", isolated=False)
    findings.write(survey, out / "findings")
    report.write(out)
    later = replace(survey, id="", created="", summary="later " + survey.summary)
    long = replace(survey, id="", created="", verdict="not-run", engine="trtllm", claim_verdicts={}, metrics={},
                   reason="no GPU here", summary="<b>Not run</b> " + "word " * 120)
    return out, survey, findings.write(later, out / "findings"), findings.write(long, out / "findings")


def _href(cell: str) -> str:
    return cell.split("href='", 1)[1].split("'", 1)[0]


def test_the_browser_links_a_row_to_its_card_in_the_report_else_to_its_json(run):
    from workbench import findings, report

    out, survey, later, long = run
    view = widgets.findings_view(findings.load(out / "findings"), out / "findings", base=out.parent / "notebooks")
    assert list(view.columns) == widgets.BROWSER_COLUMNS and len(view) == 3
    assert view.created.is_monotonic_decreasing
    anchor = report.card_id(survey.id)
    assert f'id="{anchor}"' in (out / "report.html").read_text()  # the anchor the report's card has
    links = {_href(h) for h in view.open}
    assert links == {f"../{out.name}/report.html#{anchor}",  # the report predates the others (and a not-run
                     *(f"../{out.name}/findings/{p.name}" for p in (later, long))}  # finding has no card): JSON
    (card,) = [h for h in view.open if "#" in _href(h)]
    assert card.endswith(">card</a>")


def test_the_browser_shows_whole_summaries_escaped(run):
    from workbench import findings

    out, *_ = run
    view = widgets.findings_view(findings.load(out / "findings"), out / "findings", base=out)
    (long,) = [s for s in view.summary if s.startswith("&lt;b&gt;Not run")]
    assert long == "&lt;b&gt;Not run&lt;/b&gt; " + "word " * 120  # whole, and text, not markup


def test_without_a_report_every_row_links_its_json(run, tmp_path):
    from workbench import findings

    out, *_ = run
    moved = tmp_path / "elsewhere" / "findings"
    moved.mkdir(parents=True)
    for p in (out / "findings").glob("*.json"):
        (moved / p.name).write_bytes(p.read_bytes())
    view = widgets.findings_view(findings.load(moved), moved, base=tmp_path)
    assert [_href(h).split("/")[:2] for h in view.open] == [["elsewhere", "findings"]] * 3


def test_links_resolve_from_the_notebook_jupyter_names(monkeypatch, tmp_path):
    monkeypatch.setenv(widgets.envvars.NOTEBOOK, str(tmp_path / "run" / "notebooks" / "llamacpp" / "90.ipynb"))
    assert widgets.notebook_dir() == (tmp_path / "run" / "notebooks" / "llamacpp").resolve()
    monkeypatch.delenv(widgets.envvars.NOTEBOOK)
    monkeypatch.chdir(tmp_path)
    assert widgets.notebook_dir() == tmp_path.resolve()


def test_the_static_browser_is_one_table_of_every_finding(run, shown):
    from workbench import findings

    out, *_ = run
    widgets.findings_browser(findings.load(out / "findings"), out / "findings", interactive=False)
    (page,) = shown
    body = page.data[page.data.index("<tbody>"):]
    assert body.count("<tr>") == 3 and ("word " * 120).strip() in page.data and page.data.count("<a href=") == 3
    # issue 51: JupyterLab's fixed, right-aligned tables clipped the summary and the links off the right edge
    assert "table-layout: auto; width: 100%" in page.data and page.data.index("<a href=") < page.data.index("word ")


def test_the_interactive_browser_is_an_offline_datatable(run, shown, monkeypatch):
    """itables' table with DataTables inlined from its wheel: nothing is loaded from elsewhere; every row kept."""
    import IPython.display
    from workbench import findings

    out, *_ = run
    monkeypatch.setattr(IPython.display, "display", shown.append)  # what itables displays itself (the bundle)
    widgets.findings_browser(findings.load(out / "findings"), out / "findings", interactive=True)
    page = "".join(getattr(o, "data", "") or "" for o in shown)
    assert "injectModule" in page and "new ITable(" in page  # the bundle, inlined, and the table using it
    assert not re.search(r"<script[^>]+src=|import [^;]*from ['\"]https?:|unpkg|jsdelivr", page)
    assert '"pageLength": 10' in page and "word " * 120 in page and "downsampl" not in page.lower()


def test_an_executed_summary_reads_the_findings_of_the_run_folder_it_sits_in(tmp_path, monkeypatch):
    """Issue 51: the summary's ``out`` is the absolute path it ran with, so a copied run folder read the original's
    findings. An executed notebook inside a run folder reads that run's own."""
    copy = tmp_path / "copied-run"
    (copy / "findings").mkdir(parents=True)
    (copy / "run.json").write_text("{}")
    monkeypatch.setenv(widgets.envvars.NOTEBOOK, str(copy / "notebooks" / "llamacpp" / "90_summary.ipynb"))
    assert widgets.run_findings("/somewhere/else/findings") == copy / "findings"
    monkeypatch.setenv(widgets.envvars.NOTEBOOK, str(tmp_path / "notebooks" / "90_summary.ipynb"))  # the repo's own
    assert widgets.run_findings("../runs/findings") == Path("../runs/findings")
