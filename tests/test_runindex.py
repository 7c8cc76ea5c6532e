"""Runs you can find (``runindex.py``, issue 40 item 3): each ``workbench run`` records itself in its folder's
``run.json`` and in ``index.jsonl`` beside the folder; a folder holds one model per engine, so a run that would
add another model for an engine the folder ran is refused before anything runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workbench import environment, manifest, runindex, runner

FIXTURES = Path(__file__).parent / "fixtures" / "notebooks"


def _batch(out: Path, model: str = "synthetic:tiny") -> int:
    return runner.run_batch(out, engine="llamacpp", model=model, only=["prints_parameters"], progress=False,
                            notebooks_dir=FIXTURES, data_dir=out / "no-data")


@pytest.mark.slow
def test_each_run_records_command_commit_machine_models_and_how_it_ended(tmp_path):
    out = tmp_path / "runs" / "latest"
    assert _batch(out) == 0
    (rec,) = manifest.load(out).runs
    assert rec.folder == str(out.resolve()) and rec.command == tuple(sys.argv)
    assert rec.commit == environment.git_commit() and rec.version == environment.workbench_version()
    assert rec.machine.cpu and rec.machine.cores and rec.machine.hostname
    assert rec.models == {"llamacpp": ("synthetic:tiny",)}
    assert rec.ended >= rec.started and rec.exit_code == 0
    assert rec.notebooks == {"llamacpp/prints_parameters": "ok"}
    index = tmp_path / "runs" / runindex.INDEX
    assert [r.id for r in runindex.read_index(index)] == [rec.id]
    assert runindex.read_index(index)[0].ended == rec.ended  # its end line stands over its start line

    assert _batch(out) == 0  # a resume is a run of its own, listed after the first
    runs = manifest.load(out).runs
    assert len(runs) == 2 and runs[0] == rec
    assert [r.id for r in runindex.read_index(index)] == [r.id for r in runs]
    assert len(index.read_text().splitlines()) == 4  # a start line and an end line each


def test_a_run_with_another_model_for_an_engine_the_folder_ran_is_refused(tmp_path):
    held = {"engine": "llamacpp", "model": "smollm2-135m", "out": str(tmp_path / "findings")}
    manifest.record(tmp_path, manifest.NotebookRun("llamacpp/10_retention", "ok", held, "notebooks/x.ipynb",
                                                   "2026-01-01T00:00:00+00:00", 1.0))
    with pytest.raises(runindex.MixedModels, match=r"holds llamacpp on smollm2-135m .* asks llamacpp on synthetic:tiny"):
        runindex.check_models(tmp_path, [held | {"model": "synthetic:tiny"}])
    runindex.check_models(tmp_path, [held])  # the same model resumes
    runindex.check_models(tmp_path, [held | {"engine": "vllm", "model": "synthetic:cpu"}])  # an engine joins


def test_the_cli_refuses_mixing_with_exit_2_and_one_line_before_any_kernel(tmp_path):
    held = {"engine": "llamacpp", "model": "smollm2-135m", "out": str(tmp_path / "findings")}
    manifest.record(tmp_path, manifest.NotebookRun("llamacpp/10_retention", "ok", held, "notebooks/x.ipynb",
                                                   "2026-01-01T00:00:00+00:00", 1.0))
    before = sorted(p.name for p in tmp_path.iterdir())
    r = subprocess.run([sys.executable, "-m", "workbench.cli", "run", "--out", str(tmp_path), "--only", "retention",
                        "-m", "synthetic:tiny"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert "a run folder holds one model per engine" in line and "RUN=runs/NAME" in line
    assert not (tmp_path / "notebooks").exists() and json.loads((tmp_path / "run.json").read_text())["runs"] == []
    assert sorted(p.name for p in tmp_path.iterdir() if p.name not in (".writer.lock",)) == before


def test_an_index_line_that_is_not_a_run_is_skipped(tmp_path):
    index = tmp_path / runindex.INDEX
    index.write_text('{"not": "a run"}\nnot json\n')
    assert runindex.read_index(index) == []
    assert runindex.read_index(tmp_path / "missing.jsonl") == []


def test_a_run_record_that_does_not_read_leaves_the_notebooks_loaded(tmp_path):
    entry = manifest.NotebookRun("llamacpp/x", "ok", {"engine": "llamacpp", "model": "m"}, "x.ipynb", "t", 1.0)
    manifest.record(tmp_path, entry)
    doc = json.loads((tmp_path / "run.json").read_text())
    (tmp_path / "run.json").write_text(json.dumps(doc | {"runs": [{"id": "r", "later_field": 1}, "junk"]}))
    m = manifest.load(tmp_path)
    assert m.runs == [] and m.notebooks["llamacpp/x"].status == "ok"


def test_the_index_is_kept_only_in_a_folder_of_runs(tmp_path):
    """Issue 51: ``run --out /tmp/r1`` wrote /tmp/index.jsonl, an index a reader takes for a folder of runs. The index
    is the parent's only where the parent is one: named ``runs`` (make run's) or already holding an index."""
    assert runindex.index_path(tmp_path / "runs" / "latest") == (tmp_path / "runs" / runindex.INDEX).resolve()
    assert runindex.index_path(tmp_path / "r1") is None
    (tmp_path / runindex.INDEX).touch()  # a folder of runs by choice
    assert runindex.index_path(tmp_path / "r1") == (tmp_path / runindex.INDEX).resolve()
    out = tmp_path / "elsewhere" / "r2"
    out.mkdir(parents=True)
    rec = runindex.begin(out, [{"engine": "llamacpp", "model": "synthetic:tiny"}], ["workbench", "run"])
    assert not (tmp_path / "elsewhere" / runindex.INDEX).exists()
    assert manifest.load(out).runs == [rec]  # the record is in the folder's own run.json
