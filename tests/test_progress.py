"""What a long notebook is doing, for ``workbench run``'s progress bar (issue 51: the 118 s loop notebook showed
nothing inside it): an experiment rewrites its job's progress file, the bar reads it back beside the notebook's time."""

from __future__ import annotations

import datetime as _dt

from workbench import loop, manifest, progress, runner


def test_a_line_is_said_into_the_jobs_file_and_nothing_outside_a_batch(tmp_path, monkeypatch):
    monkeypatch.delenv(progress.ENV, raising=False)
    progress.say("nowhere")  # outside a batch: nothing, no error
    assert list(tmp_path.iterdir()) == []
    path = progress.path_for(tmp_path / "logs" / "x.log")
    path.parent.mkdir()
    monkeypatch.setenv(progress.ENV, str(path))
    progress.say("probe a on llamacpp")
    progress.say("turn 2 of 9   (arm b)")
    assert progress.read(path) == "turn 2 of 9 (arm b)" and progress.read(tmp_path / "none") is None
    monkeypatch.setenv(progress.ENV, str(tmp_path / "no-such-folder" / "x.progress"))
    progress.say("cannot be written")  # never raises: a progress line is never worth a failed experiment


def test_the_loop_says_each_turn_it_measures(tmp_path, monkeypatch):
    path = tmp_path / "loop.log.progress"
    monkeypatch.setenv(progress.ENV, str(path))
    loop.run("claude-code", arms="llamacpp", model="synthetic:tiny", sessions=1, turns=2, threads=1,
             context_tokens=1024)
    assert progress.read(path) == "turn 2 of 2 (arm llamacpp)"


def test_the_bar_shows_each_running_notebooks_time_and_what_it_says(tmp_path):
    started = (_dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(seconds=42)).isoformat(timespec="seconds")
    entry = manifest.NotebookRun("llamacpp/60_agentic_loop", "running", {}, "nb.ipynb", started,
                                 log="logs/llamacpp/60_agentic_loop.log")
    (tmp_path / "logs" / "llamacpp").mkdir(parents=True)
    column = runner._inside(tmp_path, {"a": entry})
    assert column.render(None).plain.startswith("60_agentic_loop 4")  # 42 s, or 43 on a slow machine
    progress.path_for(tmp_path / entry.log).write_text("turn 7 of 30 (arm llamacpp-spec)")
    column = runner._inside(tmp_path, {"a": entry})  # a new column: the old one keeps its line for a second
    assert column.render(None).plain.endswith(": turn 7 of 30 (arm llamacpp-spec)")
