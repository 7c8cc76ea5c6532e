"""The notebooks' explorers (``widgets.py``) as JupyterLab would show them, without a browser: what is displayed is
collected instead. The evidence picker never vanishes without a word: one arm shows everything and says there is
nothing to pick; a picker left with nothing picked says so."""

from __future__ import annotations

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
