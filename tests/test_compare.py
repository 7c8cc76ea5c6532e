"""``workbench compare A B`` and the report's "what changed": verdicts that flipped, metrics beyond their spread."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from workbench import compare, findings, manifest, probes, report, runner
from workbench.cli import app


@pytest.fixture(scope="module")
def survey() -> findings.Finding:
    """A real finding: the static contract survey of the installed llama.cpp (no model runs)."""
    return probes.run("surface.contract_mapping", engine="llamacpp", isolated=False)


def folder(tmp: Path, name: str, *found: findings.Finding) -> Path:
    findings.write_all(found, tmp / name / "findings")
    return tmp / name


def flipped(f: findings.Finding, **kw) -> findings.Finding:
    """``f`` again, later, with its Decode row's verdict changed (comparison only: such a finding is no evidence)."""
    return replace(f, id="", created="", claim_verdicts=f.claim_verdicts | {"contract.decode": "partial"},
                   claim_reasons=f.claim_reasons | {"contract.decode": "a changed row"}, **kw)


def test_compare_names_the_verdicts_that_flipped_marking_those_that_settle_nothing(survey, tmp_path):
    """The changed row does not re-derive from the survey's own rows, so it, and every other answer of that finding,
    settles nothing in B: each flip to it is marked so, with the reason (issue 48 item 5)."""
    a, b = folder(tmp_path, "a", survey), folder(tmp_path, "b", flipped(survey))
    c = compare.compare(a, b)
    decode = next(f for f in c.flips if f.claim == "contract.decode")
    assert (decode.engine, decode.before, decode.after, decode.reason) == (
        "llamacpp", "not-applicable", "partial", "a changed row")
    assert not decode.settled_after and decode.why_after
    assert all(not f.settled_after for f in c.flips)  # the finding's other answers no longer settle either
    assert any(f.settled_before for f in c.flips)  # one that did in A is a flip, though its verdict is the same
    assert c.compared == len(survey.claims) and compare.compare(a, a).flips == ()
    r = CliRunner().invoke(app, ["compare", str(a), str(b)])
    assert r.exit_code == 0 and "not-applicable (settles nothing) → partial (settles nothing: " in r.stdout, r.stdout
    assert r.stdout.startswith(f"{len(c.flips)} of {len(survey.claims)} verdicts flipped")


def test_a_metric_moved_only_beyond_its_spread_is_a_change(survey, tmp_path):
    def ratio(value: float, low: float, high: float) -> findings.Finding:
        return replace(survey, id="", created="", metrics=survey.metrics | findings.metric_values(
            {"ttft_ratio": value, "ttft_ratio_ci_low": low, "ttft_ratio_ci_high": high,
             "ttft_ratio_other": 9.0, "ttft_ratio_other_ci_low": 8.0, "ttft_ratio_other_ci_high": 10.0}))

    a = folder(tmp_path, "a", ratio(1.0, 0.9, 1.1))
    assert compare.compare(a, folder(tmp_path, "inside", ratio(1.05, 0.95, 1.15))).shifts == ()  # noise
    (moved,) = compare.compare(a, folder(tmp_path, "beyond", ratio(1.5, 1.3, 1.7))).shifts
    assert (moved.metric, moved.before, moved.after) == ("ttft_ratio", (1.0, 0.9, 1.1), (1.5, 1.3, 1.7))


def test_a_path_that_is_no_run_folder_exits_2_naming_it(survey, tmp_path):
    a = folder(tmp_path, "a", survey)
    (tmp_path / "empty").mkdir()
    for bad in (tmp_path / "empty", tmp_path / "absent"):
        r = CliRunner().invoke(app, ["compare", str(a), str(bad)])
        assert r.exit_code == 2 and str(bad) in r.stderr and "run folder" in r.stderr and "Traceback" not in r.stderr


def test_the_first_screen_says_what_changed_since_the_previous_run_in_the_folder(survey, tmp_path):
    """The previous run in a folder is what no notebook's current attempt wrote; a named folder can stand for it."""
    old = replace(survey, id="", created="2026-01-01T00:00:00+00:00", attempt="old-attempt")
    new = flipped(survey, attempt="new-attempt")
    out = folder(tmp_path, "run", old, new)
    manifest.record(out, manifest.NotebookRun("15_survey", "ok", {}, "notebooks/15_survey.ipynb", "t", 1.0,
                                              attempt="new-attempt"))
    found = findings.scan([out / "findings"]).findings
    assert [f.attempt for _, f in compare.previous(found, manifest.load(out))] == ["old-attempt"]
    page = report.render(out, manifest.load(out))
    changed = compare.compare_found(compare.previous(found, manifest.load(out)), found)
    assert f"Since the previous run in this folder:</b> {len(changed.flips)} of" in page
    assert "not-applicable (settles nothing) → partial (settles nothing: " in page
    page = report.render(out, manifest.load(out), against=folder(tmp_path, "other", survey))
    assert f"Since {tmp_path / 'other'}:</b> {len(changed.flips)} of" in page


def test_findings_that_are_gone_or_unreadable_are_named_never_dropped_silently(survey, tmp_path):
    """Issue 52: "0 of 70 verdicts flipped" with two findings deleted. What a run's records list and the folder no
    longer holds, and what cannot be read, are said, one line each with what to do."""
    a = folder(tmp_path, "a", survey, flipped(survey))
    b = tmp_path / "b"
    shutil.copytree(a, b)
    gone = sorted((b / "findings").glob("*.json"))[0]
    gone.unlink()
    (b / "findings" / "new.json").write_text(json.dumps(survey.to_dict() | {"schema": "workbench.finding/v9"}))
    c = compare.compare(a, b)
    assert c.dropped == 2 and "2 finding(s) not compared (unreadable or gone: see below)" in c.head()
    text = "\n".join(c.lines())
    assert f"1 finding(s) its run records list are no longer in the folder, so they are not compared: {gone.stem}" \
        in text and "restore them from a copy, or re-run" in text
    assert "1 finding file(s) could not be read" in text and "workbench.finding/v9" in text and "upgrade" in text


@pytest.mark.slow
def test_compare_on_two_real_runs_prints_a_table_to_act_on(tmp_path):
    """Issue 51 item 7: two real batches on the same model (another seed), and one on another model. What was compared
    (runs, commits, machines, models), what only one run has, metric deltas with their spreads, notebook times,
    parameter differences; across two models, verdicts compared across them and the rest "not comparable"."""
    notebooks = Path(__file__).parent / "fixtures" / "notebooks"

    def batch(out: Path, model: str, seed: int) -> Path:
        assert runner.run_batch(out, engine="llamacpp", model=model, params={"seed": seed}, only=["writes_finding"],
                                progress=False, notebooks_dir=notebooks, data_dir=out / "no-data") == 0
        return out

    a, b = batch(tmp_path / "a", "synthetic:tiny", 0), batch(tmp_path / "b", "synthetic:tiny", 1)
    other = batch(tmp_path / "c", "synthetic:small", 0)
    same = CliRunner().invoke(app, ["compare", str(a), str(b)])
    assert same.exit_code == 0, same.output
    out = same.stdout
    (run_a,), (run_b,) = manifest.load(a).runs, manifest.load(b).runs
    assert " verdicts flipped" in out.splitlines()[0] and "across models" not in out.splitlines()[0]
    for said in (f"A = {a}", f"B = {b}", f"run {run_a.id} · commit", f"run {run_b.id} · commit", "llamacpp=synthetic:tiny",
                 run_a.machine.cpu, "notebook times", "writes_finding", "parameters that differ:", "seed"):
        assert said in out, (said, out)
    assert "metrics that differ (" in out and "spread" in out
    across = CliRunner().invoke(app, ["compare", str(a), str(other)])
    assert across.exit_code == 0, across.output
    text = across.stdout
    assert "across models, " in text.splitlines()[0], text
    assert "not comparable: it ran synthetic:tiny in A and synthetic:small in B" in text
    assert "llamacpp=synthetic:small" in text and "model" in text.split("parameters that differ:")[1]
    assert "notebook times" not in text  # the one engine's times are not comparable across its models
