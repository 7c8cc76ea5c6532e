"""Batch runs: resume after an interruption, a failing notebook, two runs sharing one findings folder.

The notebooks are fixtures named after their behaviour (tests/fixtures/notebooks); each runs in its
own kernel on the synthetic model, as a real batch does.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import gone_within
from workbench import findings, manifest, probes, runner

FIXTURES = Path(__file__).parent / "fixtures" / "notebooks"
FLEET = Path(__file__).parent / "fixtures" / "fleet"
pytestmark = pytest.mark.slow


def batch(out: Path, only: list[str], params: dict | None = None, data_dir: Path | None = None) -> int:
    """A fixture batch; no blueprint write-back unless ``data_dir`` holds one."""
    return runner.run_batch(out, engine="llamacpp", model="synthetic:tiny", params=params or {}, only=only,
                            progress=False, notebooks_dir=FIXTURES, data_dir=data_dir or out / "no-data")


def finding_files(out: Path) -> set[str]:
    return {p.name for p in (out / "findings").glob("*.json")}


def test_plan_passes_engine_model_out_and_declared_parameters(tmp_path):
    planned = runner.plan(tmp_path, "trtllm", "/models/x", {"seed": "3", "verbose": "false"},
                          ["writes_finding", "prints_parameters"], FIXTURES)
    by = {p.name: p.parameters for p in planned}
    assert by["writes_finding"] == {"engine": "trtllm", "model": "/models/x",
                                    "out": str(tmp_path.resolve() / "findings"), "seed": 3}
    assert by["prints_parameters"]["verbose"] is False  # "false" must not arrive as a truthy string


def test_plan_rejects_unknown_names(tmp_path):
    with pytest.raises(runner.RunError, match="valid: logs_like_an_engine, prints_parameters, raises_error, reports_forkserver, reports_lane, writes_finding"):
        runner.plan(tmp_path, "llamacpp", "synthetic:tiny", {}, ["nope"], FIXTURES)
    with pytest.raises(runner.RunError, match="seeed"):
        runner.plan(tmp_path, "llamacpp", "synthetic:tiny", {"seeed": "1"}, None, FIXTURES)
    with pytest.raises(runner.RunError, match="--engine"):
        runner.plan(tmp_path, "llamacpp", "synthetic:tiny", {"engine": "trtllm"}, None, FIXTURES)
    with pytest.raises(runner.RunError, match="interactive is for JupyterLab"):
        runner.plan(tmp_path, "llamacpp", "synthetic:tiny", {"interactive": "true"}, None, FIXTURES)


def test_failing_notebook_keeps_the_others_results(tmp_path):
    earlier = _one_finding(tmp_path / "findings")
    before = earlier.read_bytes()

    code = batch(tmp_path, ["raises_error", "writes_finding"])

    assert code == 1
    m = manifest.load(tmp_path)
    assert m.notebooks["llamacpp/raises_error"].status == "error"
    assert "RuntimeError: this notebook fails on purpose" in m.notebooks["llamacpp/raises_error"].error
    assert m.notebooks["llamacpp/writes_finding"].status == "ok"  # ran after the failure
    assert earlier.read_bytes() == before
    assert len(finding_files(tmp_path)) == 2
    assert (tmp_path / "notebooks" / "llamacpp" / "raises_error.ipynb").exists()  # the executed notebook shows the error
    assert "raises_error" in (tmp_path / "report.html").read_text()


def test_interrupted_batch_resumes(tmp_path):
    done, interrupted = runner.plan(tmp_path, "llamacpp", "synthetic:tiny", {}, ["writes_finding", "prints_parameters"],
                                    FIXTURES)[::-1]
    assert done.name == "writes_finding"
    manifest.record(tmp_path, manifest.NotebookRun(done.key, "ok", done.parameters, done.output,
                                               "2026-01-01T00:00:00+00:00", 1.0))
    manifest.record(tmp_path, manifest.NotebookRun(interrupted.key, "running", interrupted.parameters,
                                               interrupted.output, "2026-01-01T00:00:01+00:00"))

    assert batch(tmp_path, ["writes_finding", "prints_parameters"]) == 0

    m = manifest.load(tmp_path)
    assert m.notebooks["llamacpp/writes_finding"].duration_s == 1.0  # skipped: still the earlier run's entry
    assert not (tmp_path / done.output).exists()
    assert finding_files(tmp_path) == set()
    assert m.notebooks["llamacpp/prints_parameters"].status == "ok"

    assert batch(tmp_path, ["writes_finding"], {"seed": "1"}) == 0  # other parameters: not the same work
    assert len(finding_files(tmp_path)) == 1


def test_a_run_killed_after_writing_findings_but_before_ok_does_not_duplicate_them(tmp_path):
    assert batch(tmp_path, ["writes_finding"]) == 0
    (first,) = finding_files(tmp_path)
    entry = manifest.load(tmp_path).notebooks["llamacpp/writes_finding"]
    entry.status = "running"  # killed between "findings written" and "ok recorded"
    manifest.record(tmp_path, entry)

    assert batch(tmp_path, ["writes_finding"]) == 0
    assert len(finding_files(tmp_path)) == 1 and first not in finding_files(tmp_path)
    assert [p.name for p in (tmp_path / "superseded").rglob("*.json")] == [first]  # set aside, not lost


def test_two_runs_into_one_findings_folder_lose_nothing(tmp_path):
    """Queued with wait=True, two runs with different parameters both run, one after the other."""
    code = ("import sys; from pathlib import Path; from workbench import runner; "
            "sys.exit(runner.run_batch(Path(sys.argv[1]), 'llamacpp', 'synthetic:tiny', {'seed': sys.argv[2]}, "
            "['writes_finding'], progress=False, notebooks_dir=Path(sys.argv[3]), wait=True))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(seed), str(FIXTURES)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for seed in (1, 2)]
    for p in procs:
        log, _ = p.communicate(timeout=300)
        assert p.returncode == 0, log.decode()
    assert batch(tmp_path, ["writes_finding"], {"seed": "3"}) == 0

    scan = findings.scan([tmp_path / "findings"])
    assert scan.errors == []
    assert sorted(f.params["seed"] for _, f in scan.findings) == [1, 2, 3]
    json.loads((tmp_path / "run.json").read_text())  # merged, never torn


def test_blueprint_is_written_back_into_the_run_folder(tmp_path):
    pytest.importorskip("workbench.blueprint")
    data = runner.REPO_ROOT / "data"
    if not (data / "blueprint" / "blueprint.md").exists():
        pytest.skip("no blueprint in data/")
    assert batch(tmp_path, ["writes_finding"], data_dir=data) == 0
    written = (tmp_path / "blueprint.md").read_text()
    assert "workbench:begin unknown.reuse_metrics" in written
    assert 'href="blueprint.md"' in (tmp_path / "report.html").read_text()
    assert "workbench:begin gateway.inventory" in (tmp_path / "trtllm-gateway.md").read_text()  # the gateway guide
    assert 'href="trtllm-gateway.md"' in (tmp_path / "report.html").read_text()


def _one_finding(out: Path) -> Path:
    from workbench import probes

    f = probes.run("reuse.per_request_metrics", engine="llamacpp", model="synthetic:tiny", params={"repeats": 1},
                   out=out)
    return out / f"{f.id}.json"


def test_a_notebooks_kernel_is_told_where_its_executed_copy_lives(tmp_path):
    """As Jupyter tells a kernel its notebook's path (``JPY_SESSION_NAME``), so the copy's relative links resolve."""
    assert batch(tmp_path, ["prints_parameters"]) == 0
    copy = tmp_path / manifest.load(tmp_path).notebooks["llamacpp/prints_parameters"].output
    printed = "".join("".join(o["text"]) for c in json.loads(copy.read_text())["cells"] for o in c["outputs"]
                      if o.get("name") == "stdout")
    assert f"notebook: {copy.resolve()}\n" in printed


def test_cell_options_arrive_as_a_json_object(tmp_path):
    nb = Path(__file__).resolve().parents[1] / "notebooks"
    planned = runner.plan(tmp_path, "trtllm", "/models/x", {"cell_options": '{"dummy_weights": true}'},
                          ["10_retention"], nb)
    assert planned[0].parameters["cell_options"] == {"dummy_weights": True}
    with pytest.raises(runner.RunError, match="JSON object"):
        runner.plan(tmp_path, "trtllm", "/models/x", {"cell_options": "dummy_weights"}, ["10_retention"], nb)


def test_engines_share_one_run_folder_side_by_side(tmp_path):
    assert runner.run_batch(tmp_path, engine=["llamacpp", "trtllm"], model="synthetic:tiny", only=["writes_finding"],
                            progress=False, notebooks_dir=FIXTURES, data_dir=tmp_path / "no-data") == 0
    m = manifest.load(tmp_path)
    assert set(m.notebooks) == {"llamacpp/writes_finding", "trtllm/writes_finding"}
    assert all((tmp_path / e.output).is_file() for e in m.notebooks.values())
    engines = {f.engine for _, f in findings.scan([tmp_path / "findings"]).findings}
    assert engines == {"llamacpp", "trtllm"}


def test_an_engine_crash_in_a_notebook_is_reported_with_its_cause(tmp_path, crashing_llama):
    """The kernel survives (the probe runs in a child), so the run table says why, not papermill's "Kernel died"."""
    code = ("import sys; from pathlib import Path; from workbench import runner; "
            "sys.exit(runner.run_batch(Path(sys.argv[1]), 'llamacpp', 'synthetic:tiny', {}, ['writes_finding'], "
            "progress=False, notebooks_dir=Path(sys.argv[2]), data_dir=Path(sys.argv[1]) / 'no-data'))")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path), str(FIXTURES)], capture_output=True, text=True,
                       env=crashing_llama, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    entry = manifest.load(tmp_path).notebooks["llamacpp/writes_finding"]
    assert entry.status == "error"
    assert entry.error.startswith("EngineCrashed: engine crashed with SIGSEGV (signal 11) during _eval")
    assert "Kernel died" not in entry.error
    assert not (tmp_path / "findings").exists() or not list((tmp_path / "findings").glob("*.json"))


# --------------------------------------------------------------------------- issue 23: resume, one writer


def _unfinished_attempt(out: Path, key: str, attempt: str, parameters: dict, output: str) -> Path:
    """What a `kill -9` mid-notebook leaves: a running entry with its attempt id, and a finding it wrote."""
    manifest.record(out, manifest.NotebookRun(key, "running", parameters, output, "2026-01-01T00:00:00+00:00",
                                              attempt=attempt))
    env = {findings.ATTEMPT_ENV: attempt}
    code = ("import sys; from workbench import probes; probes.run('reuse.per_request_metrics', engine='llamacpp', "
            "model='synthetic:tiny', params={'repeats': 1}, out=sys.argv[1])")
    subprocess.run([sys.executable, "-c", code, str(out / "findings")], check=True, env=os.environ | env, timeout=300)
    (written,) = [p for p, f in findings.scan([out / "findings"]).findings if f.attempt == attempt]
    return written


def test_resume_sets_aside_only_what_the_interrupted_attempt_wrote(tmp_path):
    """The issue's sequence: llama.cpp killed mid-notebook, a trtllm pass into the same folder, then the llama.cpp
    resume. The resume used to move every finding newer than the unfinished notebook: trtllm's among them."""
    (planned,) = runner.plan(tmp_path, "llamacpp", "synthetic:tiny", {}, ["writes_finding"], FIXTURES)
    partial = _unfinished_attempt(tmp_path, planned.key, "deadbeef0001", planned.parameters, planned.output)
    assert runner.run_batch(tmp_path, engine="trtllm", model="synthetic:tiny", only=["writes_finding"],
                            progress=False, notebooks_dir=FIXTURES, data_dir=tmp_path / "no-data") == 0
    trtllm = {p.name for p, f in findings.scan([tmp_path / "findings"]).findings if f.engine == "trtllm"}
    assert len(trtllm) == 1

    assert batch(tmp_path, ["writes_finding"]) == 0  # the llama.cpp resume

    kept = {p.name: f for p, f in findings.scan([tmp_path / "findings"]).findings}
    assert trtllm <= kept.keys()  # the other engine's finished finding stays
    assert partial.name not in kept
    assert [p.name for p in (tmp_path / "superseded").rglob("*.json")] == [partial.name]  # set aside, not lost
    assert sorted(f.engine for f in kept.values()) == ["llamacpp", "trtllm"]
    m = manifest.load(tmp_path)
    assert all(e.status == "ok" and e.attempt for e in m.notebooks.values())
    (fresh,) = [f for f in kept.values() if f.engine == "llamacpp"]
    assert fresh.attempt == m.notebooks[planned.key].attempt  # each finding names the attempt that wrote it


def _hold_lock(out: Path, seconds: float) -> subprocess.Popen:
    code = ("import sys, time; from pathlib import Path; from workbench import runlock\n"
            "with runlock.writer(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(float(sys.argv[2]))")
    out.mkdir(parents=True, exist_ok=True)
    p = subprocess.Popen([sys.executable, "-c", code, str(out), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_second_writer_is_refused_naming_the_holder_and_runs_nothing(tmp_path):
    from workbench import runlock

    holder = _hold_lock(tmp_path, 60)
    try:
        with pytest.raises(runlock.RunLocked, match=rf"pid {holder.pid} .*--wait"):
            batch(tmp_path, ["writes_finding"])
        assert finding_files(tmp_path) == set() and manifest.load(tmp_path).notebooks == {}
    finally:
        holder.kill()
        holder.wait()
    assert batch(tmp_path, ["writes_finding"]) == 0  # the kernel released a dead holder's lock: taken over


def test_wait_queues_behind_the_writer(tmp_path):
    holder = _hold_lock(tmp_path, 3)
    try:
        assert runner.run_batch(tmp_path, "llamacpp", "synthetic:tiny", {}, ["writes_finding"], progress=False,
                                notebooks_dir=FIXTURES, data_dir=tmp_path / "no-data", wait=True) == 0
        assert holder.poll() is not None  # it ran only after the holder let go
    finally:
        holder.kill()
        holder.wait()


def test_two_identical_runs_at_once_leave_one_finding(tmp_path):
    code = ("import sys; from pathlib import Path; from workbench import runner; "
            "sys.exit(runner.run_batch(Path(sys.argv[1]), 'llamacpp', 'synthetic:tiny', {}, ['writes_finding'], "
            "progress=False, notebooks_dir=Path(sys.argv[2]), data_dir=Path(sys.argv[1]) / 'no-data', wait=True))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(FIXTURES)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT) for _ in range(2)]
    logs = [p.communicate(timeout=300)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs
    assert len(finding_files(tmp_path)) == 1 and not (tmp_path / "superseded").exists()  # the second one skipped


def test_a_run_folder_that_cannot_be_written_fails_before_any_notebook(tmp_path):
    from workbench.files import OutputError

    (tmp_path / "a-file").write_text("")
    with pytest.raises(OutputError, match="cannot be written"):
        batch(tmp_path / "a-file" / "run", ["writes_finding"])


def test_a_deeply_nested_or_fifo_file_in_findings_still_gets_a_report(tmp_path):
    (tmp_path / "findings").mkdir()
    (tmp_path / "findings" / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    os.mkfifo(tmp_path / "findings" / "pipe.json")
    assert batch(tmp_path, ["writes_finding"]) == 0
    page = (tmp_path / "report.html").read_text()
    assert "deep.json" in page and "pipe.json" in page


def _console(tmp_path: Path, only: list[str], verbose: bool = False) -> subprocess.CompletedProcess:
    """A batch in a child process, as ``workbench run`` prints it (progress on), its console captured."""
    code = ("import sys; from pathlib import Path; from workbench import runner; "
            "sys.exit(runner.run_batch(Path(sys.argv[1]), 'llamacpp', 'synthetic:tiny', {}, sys.argv[3].split(','), "
            "notebooks_dir=Path(sys.argv[2]), data_dir=Path(sys.argv[1]) / 'no-data', verbose=sys.argv[4] == '1'))")
    return subprocess.run([sys.executable, "-c", code, str(tmp_path), str(FIXTURES), ",".join(only), str(int(verbose))],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def console_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """One batch as ``workbench run`` prints it (not verbose): a notebook that logs as an engine does, one that
    fails, one that writes a finding; its run folder and console. (The console tests below each ran a batch of
    their own: one child and one kernel start less.)"""
    out = tmp_path_factory.mktemp("console")
    return out, _console(out, ["logs_like_an_engine", "raises_error", "writes_finding"])


def test_engine_logs_go_to_the_notebooks_log_and_the_console_gets_one_line(console_run):
    tmp_path, r = console_run
    console = r.stdout + r.stderr
    assert r.returncode == 1, console
    entry = manifest.load(tmp_path).notebooks["llamacpp/logs_like_an_engine"]
    assert entry.log == "logs/llamacpp/logs_like_an_engine.log" and entry.duration_s > 0
    log = (tmp_path / entry.log).read_text()
    assert "ENGINE INFO loading weights" in log and "ENGINE WARNING from the kernel's own fd" in log
    assert "ENGINE" not in console  # the engine's lines stay in the log
    assert [line.split()[:2] for line in r.stderr.splitlines() if "llamacpp/" in line and "log:" not in line] == [
        ["ok", "llamacpp/logs_like_an_engine"], ["fail", "llamacpp/raises_error"], ["ok", "llamacpp/writes_finding"]]
    failed = manifest.load(tmp_path).notebooks["llamacpp/raises_error"]
    assert f"log: {tmp_path / failed.log}" in console  # where to look, then its last lines
    assert "RuntimeError: this notebook fails on purpose" in console
    assert "claims:    0 of" in r.stdout and "errors:    1 of 3 notebooks failed (llamacpp/raises_error)" in r.stdout


def test_verbose_brings_the_engine_logs_back_to_the_console(tmp_path):
    r = _console(tmp_path, ["logs_like_an_engine"], verbose=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ENGINE INFO loading weights" in r.stderr
    assert "ENGINE INFO loading weights" in (tmp_path / "logs/llamacpp/logs_like_an_engine.log").read_text()


def test_the_console_line_names_the_verdicts_the_notebook_wrote(console_run):
    tmp_path, r = console_run
    (line,) = [x for x in r.stderr.splitlines() if "llamacpp/writes_finding" in x]
    (f,) = [f for _, f in findings.scan([tmp_path / "findings"]).findings]
    assert line.split()[:2] == ["ok", "llamacpp/writes_finding"] and line.endswith(f"{f.probe.split('.')[0]} {f.verdict}")


# --------------------------------------------------------------------------- issue 21: what a batch runs once


def _notebooks(tmp_path: Path, copies: dict[str, str], per_batch: dict[str, str] | None = None) -> Path:
    """A notebooks folder of fixture copies (new name → fixture), with ``metadata.workbench.per_batch`` set."""
    folder = tmp_path / "nbs"
    folder.mkdir()
    for name, fixture in copies.items():
        nb = json.loads((FIXTURES / f"{fixture}.ipynb").read_text())
        if name in (per_batch or {}):
            nb["metadata"]["workbench"] = {"per_batch": per_batch[name]}
        (folder / f"{name}.ipynb").write_text(json.dumps(nb))
    return folder


def test_the_notebooks_of_one_engine_fork_their_probes_from_one_forkserver_that_ends_with_the_batch(tmp_path):
    nbs = _notebooks(tmp_path, {"a": "reports_forkserver", "b": "reports_forkserver"})
    out = tmp_path / "run"
    assert runner.run_batch(out, engine="llamacpp", model="synthetic:tiny", progress=False, notebooks_dir=nbs,
                            data_dir=out / "no-data") == 0
    a, b = [json.loads(line) for line in (out / "forkservers.jsonl").read_text().splitlines()]
    assert a["kernel"] != b["kernel"] and a["ppid"] == b["ppid"]  # two kernels, one forkserver
    assert a["driver"] == os.getpid()  # this process (the batch's driver) started it, not a kernel
    assert gone_within(5, [a["ppid"]]) == []
    assert "forkserver-llamacpp.log" in os.listdir(out / "logs")


def test_a_notebook_that_covers_the_batch_runs_once_with_its_first_or_last_engine(tmp_path):
    nbs = _notebooks(tmp_path, {"00_env": "prints_parameters", "50_probe": "prints_parameters",
                                "90_sum": "prints_parameters"}, {"00_env": "first", "90_sum": "last"})
    out = tmp_path / "run"  # llama-server last, not vLLM: its forkserver's imports take seconds, vLLM's ~15 s
    assert runner.run_batch(out, engine=["llamacpp", "trtllm", "llamacpp-server"], model="synthetic:tiny",
                            progress=False, notebooks_dir=nbs, data_dir=out / "no-data") == 0
    ran = manifest.load(out).notebooks
    assert sorted(ran) == ["llamacpp-server/50_probe", "llamacpp-server/90_sum", "llamacpp/00_env", "llamacpp/50_probe",
                           "trtllm/50_probe"]
    assert ran["llamacpp/00_env"].started <= min(e.started for e in ran.values())  # before anything
    assert ran["llamacpp-server/90_sum"].started >= max(e.started for e in ran.values())  # after everything


def test_one_batch_gives_an_engine_its_own_model_and_parameters(tmp_path):
    """make run's one batch: vLLM on its Hugging Face model with its own prompt length, the others on the default."""
    jobs = runner.batch_jobs(tmp_path, ["llamacpp", "trtllm", "vllm"], "smollm2-135m", {"verbose": "false"},
                             ["prints_parameters"], FIXTURES, engine_models={"vllm": "synthetic:cpu"},
                             engine_params={"vllm": {"verbose": "true"}})
    got = {j.planned.key: (j.planned.parameters["model"], j.planned.parameters["verbose"]) for j in jobs}
    assert got == {"llamacpp/prints_parameters": ("smollm2-135m", False), "trtllm/prints_parameters": ("smollm2-135m", False),
                   "vllm/prints_parameters": ("synthetic:cpu", True)}
    with pytest.raises(runner.RunError, match=r"vllm-server: not an engine of this batch \(llamacpp, vllm\)"):
        runner.batch_jobs(tmp_path, ["llamacpp", "vllm"], "smollm2-135m", notebooks_dir=FIXTURES,
                          engine_models={"vllm-server": "synthetic:cpu"})
    with pytest.raises(runner.RunError, match="no selected notebook takes parameter.s. verbos"):
        runner.batch_jobs(tmp_path, ["llamacpp", "vllm"], "smollm2-135m", only=["prints_parameters"],
                          notebooks_dir=FIXTURES, engine_params={"vllm": {"verbos": "1"}})


def test_every_engines_forkserver_imports_beside_the_environment_survey_and_never_beside_timed_work(tmp_path):
    """At the batch's first job every engine's server starts; the survey (per_batch first, timing nothing) and the
    jobs of an engine that can only report not-run here run beside their imports, and the next job starts only
    once vLLM's ~15 s of imports are done."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("needs vllm installed: its import is the slow one")
    nbs = _notebooks(tmp_path, {"00_env": "prints_parameters", "50_probe": "prints_parameters"}, {"00_env": "first"})
    jobs = runner.batch_jobs(tmp_path, ["llamacpp", "trtllm", "vllm"], "synthetic:tiny", notebooks_dir=nbs)
    jobs = runner.untimed_first(jobs, frozenset({"trtllm"}))
    assert [j.planned.key for j in jobs] == ["llamacpp/00_env", "trtllm/50_probe", "llamacpp/50_probe", "vllm/50_probe"]
    with runner._Forkservers(tmp_path / "logs", frozenset({"trtllm"})) as servers:
        survey = servers.for_job(jobs[0], jobs[1:])
        assert len(servers.open) == 3
        readies = {e: Path(json.loads(servers.open[probes.preload(e)][0])["ready"]) for e in ("llamacpp", "vllm")}
        assert not readies["vllm"].exists()  # the survey does not wait for the imports
        servers.for_job(jobs[1], jobs[2:])
        assert not readies["vllm"].exists()  # nor does a job that times nothing
        timed = servers.for_job(jobs[2], jobs[3:])
        assert all(r.exists() for r in readies.values())  # a timed job does
        assert timed == survey and servers.for_job(jobs[3], []) != survey  # each engine's own server
        assert len(servers.open) == 1  # llama.cpp's and trtllm's stopped after their last jobs


def test_the_jobs_of_an_engine_that_times_nothing_here_run_first_the_summary_last(tmp_path):
    """make run's order on a machine without a GPU: the survey, TensorRT-LLM's not-run notebooks (beside the
    imports), then llama.cpp's and vLLM's in the batch's order, the summary last. With a GPU nothing moves."""
    nbs = _notebooks(tmp_path, {"00_env": "prints_parameters", "50_probe": "prints_parameters",
                                "90_sum": "prints_parameters"}, {"00_env": "first", "90_sum": "last"})
    jobs = runner.batch_jobs(tmp_path, ["llamacpp", "trtllm", "vllm"], "synthetic:tiny", notebooks_dir=nbs)
    keys = [j.planned.key for j in jobs]
    assert keys == ["llamacpp/00_env", "llamacpp/50_probe", "trtllm/50_probe", "vllm/50_probe", "vllm/90_sum"]
    moved = [j.planned.key for j in runner.untimed_first(jobs, frozenset({"trtllm"}))]
    assert moved == ["llamacpp/00_env", "trtllm/50_probe", "llamacpp/50_probe", "vllm/50_probe", "vllm/90_sum"]
    assert [j.planned.key for j in runner.untimed_first(jobs, frozenset())] == keys


@pytest.mark.parametrize("options, untimed", [(None, {"trtllm-serve"}), ({"endpoint": "http://10.0.0.2:8000"}, set()),
                                             ('{"endpoint": "http://10.0.0.2:8000"}', set()), ("{not json", set())])
def test_a_tensorrt_llm_job_at_an_endpoint_is_timed_work_even_without_a_local_gpu(tmp_path, monkeypatch, options,
                                                                                  untimed):
    """trtllm-serve at ``endpoint`` runs real probes on a GPU elsewhere: its jobs wait for the imports like any
    timed job (a reviewer's case: they were moved up beside vLLM's import for want of a local GPU)."""
    from dataclasses import replace

    monkeypatch.setattr(runner, "untimed_here", lambda e: e in ("trtllm", "trtllm-serve"))  # no GPU here
    nbs = _notebooks(tmp_path, {"50_probe": "prints_parameters"}, {})
    jobs = runner.batch_jobs(tmp_path, ["llamacpp", "trtllm-serve"], "synthetic:tiny", notebooks_dir=nbs)
    jobs = [replace(j, planned=replace(j.planned, parameters={**j.planned.parameters, "cell_options": options}))
            if runner._engine(j) == "trtllm-serve" and options is not None else j for j in jobs]
    assert runner.untimed_engines(jobs) == untimed


def test_an_unknown_per_batch_value_is_refused_naming_the_notebook(tmp_path):
    nbs = _notebooks(tmp_path, {"odd": "prints_parameters"}, {"odd": "sometimes"})
    with pytest.raises(runner.RunError, match=r"odd.ipynb: metadata.workbench.per_batch is 'sometimes'; use one of first, last"):
        runner.plan(tmp_path, "llamacpp", "synthetic:tiny", {}, None, nbs)


# --------------------------------------------------------------------------- issue 22: a time limit per job


def test_a_notebook_over_its_timeout_is_killed_and_nothing_it_wrote_counts(tmp_path):
    """The fixture writes its finding, then holds; --job-timeout kills its kernel, the run records ``timeout`` in the
    words every executor uses, and the finding is set aside (kept, never counted)."""
    from conftest import gone_within

    from workbench.executors import TIMEOUT, timed_out

    limit = 12  # the fixture reaches its hold (finding written) within a few seconds; then it holds for 600 s
    hold, out = tmp_path / "hold", tmp_path / "run"
    hold.mkdir()
    code = runner.run_batch(out, engine="llamacpp", model="synthetic:tiny", params={"hold_dir": str(hold)},
                            only=["holds"], progress=False, notebooks_dir=FLEET, data_dir=out / "no-data",
                            executor=runner.LocalExecutor(job_timeout_s=limit))
    assert code == 1
    (marker,) = hold.glob("*.pid")  # it got as far as holding: its finding was written
    entry = manifest.load(out).notebooks["llamacpp/holds"]
    assert entry.status == TIMEOUT and entry.error == timed_out(limit) and limit <= entry.duration_s < limit + 45
    assert marker.stem == entry.attempt and not gone_within(10, [int(marker.read_text())])  # its kernel is gone
    assert findings.scan([out / "findings"]).findings == []
    assert [f.attempt for _, f in findings.scan([out / "superseded"]).findings] == [entry.attempt]


def test_a_timeout_that_is_not_a_positive_number_exits_2(tmp_path):
    from typer.testing import CliRunner

    from workbench.cli import app

    r = CliRunner().invoke(app, ["run", "-o", str(tmp_path / "run"), "--job-timeout", "0"])
    assert r.exit_code == 2 and "--job-timeout 0: give a number of seconds above 0" in r.output
    assert not (tmp_path / "run" / "run.json").exists()


def test_a_remote_job_lands_only_the_findings_its_own_attempt_wrote(tmp_path):
    """Fleet write-back: a finding another attempt wrote (stale in the job's folder, another job's, or one with no
    attempt id) is set aside under superseded/, never counted as this attempt's; its notebook still lands."""
    def doc(attempt):
        return json.dumps({"schema": findings.SCHEMA_ID, "id": attempt or "none"}
                          | ({"attempt": attempt} if attempt else {})).encode()

    files = {"findings/mine.json": doc("a2"), "findings/stale.json": doc("a1"), "findings/bare.json": doc(None),
             "findings/notes.json": b"not json", "executed/x.ipynb": b"{}"}
    assert runner.land(tmp_path, files, "a2", "trtllm/70_event_plane") == 2
    assert finding_files(tmp_path) == {"mine.json", "notes.json"}
    assert {p.name for p in (tmp_path / "superseded" / "trtllm_70_event_plane").iterdir()} == {"stale.json",
                                                                                              "bare.json"}
    assert (tmp_path / "executed" / "x.ipynb").read_bytes() == b"{}"
    assert runner.land(tmp_path, {"findings/stale.json": doc("a1")}, "a3", "trtllm/70_event_plane") == 1  # twice
