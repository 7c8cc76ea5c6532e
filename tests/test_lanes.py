"""Lanes (workbench.lanes): a batch's engines side by side, each lane pinned to cores no other lane uses.

The batches run the fixture ``reports_lane`` (tests/fixtures/notebooks), which records its kernel's pid, the cores it
may use and the lane it was told, on llama.cpp and llama-server (cheap forkserver imports) beside TensorRT-LLM (which
times nothing without a GPU). Nothing here is timed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import gone_within, interruptible
from workbench import cpu, lanes, manifest, report, runner
from workbench.executors import ExecutorError

FIXTURES = Path(__file__).parent / "fixtures" / "notebooks"
ENGINES = ["llamacpp", "llamacpp-server", "trtllm"]
CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
two_cores = pytest.mark.skipif(len(CPUS) < 2 or not hasattr(os, "sched_setaffinity"),
                               reason="lanes need two cores this process may use, and a platform that pins")


def _notebooks(tmp_path: Path) -> Path:
    """The survey (first), one probe, the summary (last): each the ``reports_lane`` fixture."""
    folder = tmp_path / "nbs"
    folder.mkdir()
    for name, per_batch in (("00_env", "first"), ("50_probe", ""), ("90_sum", "last")):
        nb = json.loads((FIXTURES / "reports_lane.ipynb").read_text())
        if per_batch:
            nb["metadata"]["workbench"] = {"per_batch": per_batch}
        (folder / f"{name}.ipynb").write_text(json.dumps(nb))
    return folder


def _rows(out: Path) -> dict[str, dict]:
    """The fixture's rows: each engine's from its lane, and under "batch" those of the driver (survey, summary)."""
    rows = [json.loads(line) for line in (out / "lanes.jsonl").read_text().splitlines()]
    return {r["engine"]: r for r in rows if r["lane"]} | {"batch": [r for r in rows if not r["lane"]]}


@two_cores
def test_two_lanes_run_the_engines_on_disjoint_cores_between_the_survey_and_the_summary(tmp_path):
    out = tmp_path / "run"
    assert runner.run_batch(out, engine=ENGINES, model="synthetic:tiny", progress=False, notebooks_dir=_notebooks(tmp_path),
                            data_dir=out / "no-data", executor=runner.LocalExecutor(lanes=None)) == 0
    ran = manifest.load(out).notebooks
    assert sorted(ran) == ["llamacpp-server/50_probe", "llamacpp/00_env", "llamacpp/50_probe", "trtllm/50_probe",
                           "trtllm/90_sum"]
    assert all(e.status == "ok" for e in ran.values())
    rows = _rows(out)
    a, b = rows["llamacpp"], rows["llamacpp-server"]
    assert set(a["cpus"]).isdisjoint(b["cpus"]) and a["cpus"] and b["cpus"]  # no two timed jobs share a core
    assert a["threads"] == len(a["cpus"]) and a["kernel"] != b["kernel"]  # "all cores" means the lane's
    assert rows["trtllm"]["cpus"] in (a["cpus"], b["cpus"])  # the untimed job went into a lane
    assert {json.loads(a["lane"])["lane"], json.loads(b["lane"])["lane"]} == {0, 1}
    for key, row in (("llamacpp/50_probe", a), ("llamacpp-server/50_probe", b)):
        assert ran[key].node == json.loads(row["lane"]) == {"lane": ran[key].node["lane"], "cpus": row["cpus"]}
    survey, summary = rows["batch"]  # both in the driver, which may use every core, told the lanes
    assert survey["cpus"] == summary["cpus"] == CPUS and len(json.loads(survey["lanes"])) == 2
    assert survey["at"] < min(a["at"], b["at"]) and summary["at"] > max(a["at"], b["at"], rows["trtllm"]["at"])
    assert ran["llamacpp/00_env"].node == {"lane": None, "cpus": CPUS}
    by_lane = sorted((ran[k].node["lane"], lanes.spans(ran[k].node["cpus"])) for k in ("llamacpp/50_probe",
                                                                                           "llamacpp-server/50_probe"))
    assert report.lanes_line(list(ran.values())) == f"2 lanes, cores {by_lane[0][1]} | {by_lane[1][1]}"
    assert runner.run_batch(out, engine=ENGINES, model="synthetic:tiny", progress=False, notebooks_dir=tmp_path / "nbs",
                            data_dir=out / "no-data", executor=runner.LocalExecutor(lanes=None)) == 0
    assert manifest.load(out).notebooks == ran  # resumed: everything was done, nothing ran again


def test_one_lane_is_one_notebook_at_a_time_and_auto_needs_two_engines_with_timed_work():
    assert lanes.plan(1, 3) == ([], None)
    if len(CPUS) >= 2 and hasattr(os, "sched_setaffinity"):
        assert lanes.plan(None, 1) == ([], None)
        planned, note = lanes.plan(None, 2)
        assert [len(lane.cpus) for lane in planned] == [len(CPUS) // 2] * 2 and note is None
        assert not set(planned[0].cpus) & set(planned[1].cpus)


def test_without_pinning_or_with_one_core_there_is_one_lane_said_once(monkeypatch):
    monkeypatch.setattr(lanes.cpu, "usable", lambda: (3,))
    assert lanes.plan(None, 2) == ([], "lanes:     1 (this process may use one physical core, CPUs 3; one notebook "
                                       "at a time)")
    assert lanes.plan(None, 1) == ([], None)  # one engine with timed work: nothing to say
    monkeypatch.setattr(lanes.cpu, "usable", lambda: None)
    assert lanes.plan(2, 2)[0] == [] and "cannot pin" in lanes.plan(2, 2)[1]


@pytest.mark.parametrize("siblings, lanes_get", [
    ({0: "0-1", 1: "0-1", 2: "2-3", 3: "2-3"}, [(0, 1), (2, 3)]),
    ({0: "0,2", 1: "1,3", 2: "0,2", 3: "1,3"}, [(0, 2), (1, 3)]),  # Intel's usual numbering: siblings far apart
    ({0: "0-1", 1: "0-1"}, []),  # one core with two hyperthreads: one lane, said
])
def test_a_lane_takes_whole_physical_cores_so_hyperthreads_of_one_core_never_serve_two_lanes(tmp_path, monkeypatch,
                                                                                               siblings, lanes_get):
    for c, text in siblings.items():
        (tmp_path / f"cpu{c}" / "topology").mkdir(parents=True)
        (tmp_path / f"cpu{c}" / "topology" / "thread_siblings_list").write_text(text + "\n")
    real = cpu.cores
    monkeypatch.setattr(lanes.cpu, "cores", lambda: real(tuple(siblings), tmp_path))
    planned, note = lanes.plan(None, 2)
    assert [lane.cpus for lane in planned] == lanes_get
    assert (note is not None and "one physical core" in note) == (not lanes_get)


def test_untimed_jobs_go_to_a_lane_whose_forkserver_imports_and_a_lane_out_of_work_takes_the_last_of_another(tmp_path):
    first, second, third = names = ("prints_parameters", "reports_lane", "writes_finding")  # the batch's order
    jobs = runner.batch_jobs(tmp_path, ["llamacpp", "trtllm", "vllm"], "synthetic:tiny", only=list(names),
                             notebooks_dir=FIXTURES)
    deal = lanes.Deal(jobs, 2, frozenset({"trtllm"}))
    assert [[deal.jobs[i].planned.key for i in q] for q in deal.queues] == [  # untimed jobs in no lane's own queue
        [f"llamacpp/{n}" for n in names], [f"vllm/{n}" for n in names]]

    def key(lane: int, ready: bool) -> str | None:
        i = deal.next(lane, ready)
        return None if i is None else deal.jobs[i].planned.key

    assert key(1, False) == f"trtllm/{first}"  # vLLM's lane, its forkserver importing: an untimed job
    assert key(0, True) == f"llamacpp/{first}"  # llama.cpp's, ready: straight to its own, in order
    assert key(1, False) == f"trtllm/{second}"
    assert key(0, True) == f"llamacpp/{second}" and key(1, True) == f"vllm/{first}"
    assert key(0, True) == f"llamacpp/{third}"
    assert key(0, False) == f"trtllm/{third}"  # its own done: an untimed job left over first
    assert key(0, True) == f"vllm/{third}"  # then the LAST not started of the lane with most left (2)
    assert key(0, True) is None  # not its only one (its owner, busy, will get to it): the lane ends
    assert key(1, True) == f"vllm/{second}"  # the owner keeps its order from the head
    assert key(1, True) is None  # nothing left

    deal = lanes.Deal(jobs, 2, frozenset({"trtllm"}))
    assert [deal.jobs[i].planned.key for i in deal.drop(0, last=False)] == [f"llamacpp/{n}" for n in names]
    assert len(deal.drop(1, last=True)) == 6 and deal.next(0, True) is None  # the last lane lost: everything left


@two_cores
def test_the_lane_out_of_work_runs_the_last_jobs_of_the_busy_one_each_once_on_its_own_cores(tmp_path):
    """llama.cpp's first job holds until five jobs have started: its own, llama-server's three in the other lane,
    and the one that lane takes once out of work (at most 120 s: a lane that never takes one leaves llama.cpp's
    lane to run all three, and the test fails). Its other jobs hold no longer."""
    folder, out = tmp_path / "nbs", tmp_path / "run"
    folder.mkdir()
    for name in ("50_a", "51_b", "52_c"):
        (folder / f"{name}.ipynb").write_text((FIXTURES / "reports_lane.ipynb").read_text())
    assert runner.run_batch(out, engine=["llamacpp", "llamacpp-server"], model="synthetic:tiny", progress=False,
                            notebooks_dir=folder, data_dir=out / "no-data",
                            engine_params={"llamacpp": {"hold_s": 120, "hold_until_rows": 5}},
                            executor=runner.LocalExecutor(lanes=None)) == 0
    ran = manifest.load(out).notebooks
    assert sorted(ran) == sorted(f"{e}/{n}" for e in ("llamacpp", "llamacpp-server") for n in ("50_a", "51_b", "52_c"))
    assert all(e.status == "ok" and e.retried is None for e in ran.values())
    rows = [json.loads(line) for line in (out / "lanes.jsonl").read_text().splitlines()]
    assert len(rows) == 6 == len({r["kernel"] for r in rows})  # each job ran exactly once
    home, short = ran["llamacpp/50_a"].node, ran["llamacpp-server/50_a"].node
    assert home["lane"] != short["lane"] and set(home["cpus"]).isdisjoint(short["cpus"])
    assert ran["llamacpp/52_c"].node == short  # the busy lane's last job, taken by the lane out of work,
    assert {f"forkserver-llamacpp-lane{home['lane']}.log", f"forkserver-llamacpp-lane{short['lane']}.log"} <= set(
        os.listdir(out / "logs"))  # through a llama.cpp forkserver of its own
    for row in rows:  # each kernel pinned to the cores of the lane the manifest names
        assert {"lane": json.loads(row["lane"])["lane"], "cpus": row["cpus"]} in (home, short)


def test_a_lost_lane_fails_what_it_was_dealt_and_its_own_queue_and_the_last_one_all_that_is_left(tmp_path):
    from types import SimpleNamespace

    jobs = runner.batch_jobs(tmp_path, ["llamacpp", "trtllm", "vllm"], "synthetic:tiny", only=["prints_parameters",
                             "reports_lane"], notebooks_dir=FIXTURES)
    deal = lanes.Deal(jobs, 2, frozenset({"trtllm"}))
    dealt = deal.next(0, False)  # an untimed job, dealt, not yet started when its lane was killed
    gone = lanes._Running(lanes.Lane(0, (0,)), SimpleNamespace(exitcode=-9), None, (dealt, None, 0.0))
    failed = [(job.planned.key, attempt, ran.error) for job, attempt, ran in
              lanes.lost(gone, deal, lambda job: f"a-{job.planned.key}", last=False)]
    assert [k for k, _, _ in failed] == ["trtllm/prints_parameters", "llamacpp/prints_parameters",
                                         "llamacpp/reports_lane"]  # no other lane's: they go on
    assert all(a == f"a-{k}" and e == "LaneLost: lane 0 (cores 0) was killed by SIGKILL before this notebook began"
               for k, a, e in failed)
    gone = lanes._Running(lanes.Lane(1, (1,)), SimpleNamespace(exitcode=1), None, (deal.next(1, True), "b", 0.0))
    failed = [(job.planned.key, ran.error) for job, _, ran in lanes.lost(gone, deal, lambda job: "c", last=True)]
    assert failed[0] == ("vllm/prints_parameters", "LaneLost: lane 1 (cores 1) exited with code 1 while this notebook "
                         "ran") and [k for k, _ in failed[1:]] == ["vllm/reports_lane", "trtllm/reports_lane"]


@pytest.mark.parametrize("value, message", [("0", "at least 1"), ("-1", "at least 1"), ("two", "whole number"),
                                            ("1.5", "whole number"), ("99999999999999999999", "at most")])
def test_a_bad_lane_count_is_one_clear_line(value, message):
    if message == "at most" and not CPUS:
        pytest.skip("no affinity to compare against")
    with pytest.raises(ExecutorError, match=message):
        lanes.parse(value)
    assert lanes.parse("auto") is None and lanes.parse("1") == 1


def _descendants(pid: int) -> list[int]:
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _laned_batch(tmp_path: Path, hold: dict[str, float]) -> tuple[subprocess.Popen, Path]:
    """A driver in a session of its own running a two-lane batch whose probes hold for ``hold`` seconds (per engine)."""
    out = tmp_path / "run"
    code = ("import json, sys; from pathlib import Path; from workbench import runner; "
            "sys.exit(runner.run_batch(Path(sys.argv[1]), engine=['llamacpp', 'llamacpp-server'], model='synthetic:tiny', "
            "progress=False, only=['50_probe'], notebooks_dir=Path(sys.argv[2]), data_dir=Path(sys.argv[1]) / 'no-data', "
            "engine_params={e: {'hold_s': s} for e, s in json.loads(sys.argv[3]).items()}, "
            "executor=runner.LocalExecutor(lanes=None)))")
    proc = subprocess.Popen([sys.executable, "-c", code, str(out), str(_notebooks(tmp_path)), json.dumps(hold)],
                            start_new_session=True, preexec_fn=interruptible, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not ((out / "lanes.jsonl").exists() and len((out / "lanes.jsonl").read_text().splitlines()) == len(hold)):
        if proc.poll() is not None or time.monotonic() > deadline:  # e.g. one lane's kernel never started
            if proc.poll() is None:  # Ctrl-C: a driver left holding would keep communicate() waiting out its hold
                os.killpg(proc.pid, signal.SIGINT)
            pytest.fail(f"not every lane's job started:\n{proc.communicate(timeout=lanes.STOP_GRACE_S + 60)[0]}",
                        pytrace=False)
        time.sleep(0.2)
    return proc, out


@two_cores
@pytest.mark.parametrize("group", [True, False], ids=["ctrl-c", "sigint-to-the-driver-alone"])
def test_an_interrupted_laned_batch_leaves_no_process_and_records_the_unfinished(tmp_path, group):
    proc, out = _laned_batch(tmp_path, {"llamacpp": 600, "llamacpp-server": 600})
    left = _descendants(proc.pid)
    kernels = [r["kernel"] for r in (_rows(out)[e] for e in ("llamacpp", "llamacpp-server"))]
    assert set(kernels) <= set(left)
    (os.killpg if group else os.kill)(proc.pid, signal.SIGINT)
    proc.communicate(timeout=lanes.STOP_GRACE_S + 60)
    assert gone_within(15, left) == []
    ran = manifest.load(out).notebooks
    assert {ran[k].status for k in ("llamacpp/50_probe", "llamacpp-server/50_probe")} == {"running"}  # resume reruns


@two_cores
def test_a_lane_that_dies_fails_its_notebook_saying_so_and_the_other_lane_goes_on(tmp_path):
    proc, out = _laned_batch(tmp_path, {"llamacpp": 600, "llamacpp-server": 5})
    kernel = _rows(out)["llamacpp"]["kernel"]
    lane = psutil.Process(kernel).ppid()
    os.kill(lane, signal.SIGKILL)
    assert proc.wait(timeout=120) == 1
    ran = manifest.load(out).notebooks
    assert ran["llamacpp-server/50_probe"].status == "ok"
    dead = ran["llamacpp/50_probe"]
    assert dead.status == "error" and dead.error.startswith("LaneLost: lane ") and "SIGKILL while this notebook ran" \
        in dead.error
    assert gone_within(15, [kernel]) == []  # its kernel followed its lane


def test_the_survey_prints_the_cores_this_process_may_use_and_the_lanes(monkeypatch):
    from workbench import doctor

    monkeypatch.setenv(lanes.LANES_ENV, lanes.describe([lanes.Lane(0, (0, 1)), lanes.Lane(1, (2, 3))]))
    rep = {"cpu": {"cores": 4, "usable_cores": [2, 3]}, "lanes": lanes.here()}
    assert doctor._cores(rep) == ["cores       this process may use 2: 2-3",
                                  "lanes       2, lane 0 on cores 0-1; lane 1 on cores 2-3"]
    monkeypatch.setenv(lanes.LANES_ENV, "{garbled")
    assert lanes.here() == [] and doctor._cores({"cpu": {"cores": 4, "usable_cores": [0, 1, 2, 3]}}) == []
