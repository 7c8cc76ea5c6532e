"""Fleet runs on a real Ray cluster on this machine: a local head (2 CPUs) and `ray start` head + worker.

Skipped with the reason where Ray is absent (the `fleet` extra); WORKBENCH_REQUIRE_FLEET=1 (set by .ci/run)
makes that a failure. Every Ray process these tests start is gone when they end (checked by session folder).
"""

from __future__ import annotations

import hashlib
import base64
import contextlib
import os
import shutil
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Iterator

import pytest
from conftest import listening, naming, off_loopback, require_ray

from workbench import findings, manifest, matrix, runner, standing

pytestmark = pytest.mark.slow
FIXTURES = Path(__file__).parent / "fixtures" / "notebooks"
FLEET = Path(__file__).parent / "fixtures" / "fleet"


@contextlib.contextmanager
def _ray_tmp(mp: pytest.MonkeyPatch) -> Iterator[str]:
    """A short, private Ray temp folder (unix socket paths are short); no process using it survives its use. Not
    ``wbr-``: that is a command's temp root (workbench.lifecycle), and any command starting on the machine sweeps one
    that holds no lock and stayed empty a minute (this one, while the local executor runs, before a head starts)."""
    import psutil

    require_ray()
    tmp = tempfile.mkdtemp(prefix="wbf-", dir="/tmp")
    mp.setenv("RAY_TMPDIR", tmp)
    mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
    try:
        yield tmp
    finally:
        _, left = psutil.wait_procs(naming(tmp), timeout=20)  # ray.shutdown() / ray stop let them exit on their own
        for p in left:
            p.kill()
        heads = [p.name for p in Path(tmp).glob("wbray-*")]  # a local head's folder: its runtime_envs, GBs each
        shutil.rmtree(tmp, ignore_errors=True)
    assert not left, f"Ray processes outlived the test: {[(p.pid, p.info['cmdline'][:2]) for p in left]}"
    assert not heads, f"a local head's temp folder outlived the run: {heads}"


@pytest.fixture
def ray_tmp(monkeypatch):
    with _ray_tmp(monkeypatch) as tmp:
        yield tmp


def _verdicts(out: Path) -> list:
    """(engine, probe, parameters, verdict, reason) of every finding, in one order."""
    return sorted((f.engine, f.probe, repr(sorted(f.params.items())), f.verdict, f.reason or "")
                  for _, f in findings.scan([out / "findings"]).findings)


def _run(out: Path, m: matrix.Matrix, books: Path, executor=None) -> int:
    return runner.run_batch(out, progress=False, notebooks_dir=books, data_dir=out / "no-data",
                            jobs=lambda o: m.jobs(o, books), executor=executor)


def _watched(num_cpus: int):
    """A local head (:class:`RayExecutor`) whose processes and listening sockets are read from the OS as soon as it
    has started (``seen``)."""
    from workbench.fleet import RayExecutor, session_processes

    class Watched(RayExecutor):
        seen: tuple = ()

        def __enter__(self):
            super().__enter__()
            procs = session_processes(self._head)
            self.seen = (procs, listening([p.pid for p in procs]))
            return self

    return Watched(num_cpus=num_cpus)


@pytest.fixture(scope="module")
def local_and_fleet(tmp_path_factory):
    """One batch of three jobs (llama.cpp and vLLM on the fixture notebook, llama.cpp on a real probe notebook) run
    by the local executor and on a local head (2 CPUs) into two run folders, then the head's folder resumed: the
    folders, and the processes and listening sockets of the head, read while it ran. (Each pair of runs used to be
    a run of its own, and the loopback check a head of its own: one head start and run each.) The resume decides
    what is done from the run folder alone (runner._run_jobs, before any job reaches its executor), so it runs
    under the local executor: a second head would start only to be handed no job (10-30 s here)."""
    llama = matrix.Matrix(("llamacpp",), ("synthetic:tiny",), ("writes_finding",))
    vllm = matrix.Matrix(("vllm",), ("synthetic:cpu",), ("writes_finding",), resources={"vllm": matrix.Resources(2, 0)})
    probe = matrix.Matrix(("llamacpp",), ("synthetic:tiny",), ("20_reuse_metrics",))

    def jobs(o: Path) -> list:
        return llama.jobs(o, FIXTURES) + vllm.jobs(o, FIXTURES) + probe.jobs(o, runner.REPO_ROOT / "notebooks")

    def run(out: Path, executor=None) -> int:
        return runner.run_batch(out, progress=False, data_dir=out / "no-data", jobs=jobs, executor=executor)

    root = tmp_path_factory.mktemp("fleet")
    local, fleet = root / "local", root / "fleet"
    with pytest.MonkeyPatch.context() as mp, _ray_tmp(mp):  # nothing of it outlives the runs, its env neither
        assert run(local) == 0
        head = _watched(num_cpus=2)
        assert run(fleet, head) == 0
        ran, scan = manifest.load(fleet), findings.scan([fleet / "findings"])
        resumed = run(fleet)  # resume: all skipped
    return {"local": local, "fleet": fleet, "head": head.seen, "ran": ran, "scan": scan, "resumed": resumed}


def test_the_local_head_listens_on_loopback_only(local_and_fleet):
    """Ray rewrites 127.0.0.1 into the routable IP unless told otherwise (workbench.fleet._loopback); every
    listening socket of the head's processes, read from the OS, is on loopback."""
    procs, sockets = local_and_fleet["head"]
    assert len(procs) >= 3 and sockets, (procs, sockets)  # gcs_server, raylet, agents: something listens
    off = off_loopback(sockets)
    assert not off, f"the local head listens off loopback: {off}"


def test_a_local_head_gives_the_local_executors_verdicts(local_and_fleet):
    local, fleet, m, scan = (local_and_fleet[k] for k in ("local", "fleet", "ran", "scan"))
    assert _verdicts(fleet) == _verdicts(local) and len(_verdicts(fleet)) == 3
    assert "not-run" not in {v[3] for v in _verdicts(fleet)}  # vLLM ran (synthetic:cpu: a head size it runs)
    assert set(m.notebooks) == set(manifest.load(local).notebooks)
    for e in m.notebooks.values():
        assert e.status == "ok" and e.node["hostname"] and e.node["ray_node"] and "driver" in e.node
        assert (fleet / e.output).is_file() and (fleet / e.log).is_file()  # came back as bytes
    assert (fleet / "report.html").is_file()
    assert {f.attempt for _, f in scan.findings} <= {e.attempt for e in m.notebooks.values()}

    assert local_and_fleet["resumed"] == 0  # resume of the head's folder: all skipped
    assert len(findings.scan([fleet / "findings"]).findings) == len(scan.findings)
    assert manifest.load(fleet).notebooks == m.notebooks  # nothing ran again


def _wheel(where: Path, version: str) -> str:
    """A tiny wheel of package ``wbrelease`` at ``version``: two environments that differ in one package."""
    dist = f"wbrelease-{version}"
    files = {"wbrelease/__init__.py": f"__version__ = {version!r}\n",
             f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: wbrelease\nVersion: {version}\n",
             f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = [f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b'=').decode()},"
              f"{len(t.encode())}" for p, t in files.items()]
    files[f"{dist}.dist-info/RECORD"] = "\n".join(record + [f"{dist}.dist-info/RECORD,,"]) + "\n"
    path = where / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, t in files.items():
            z.writestr(p, t)
    return str(path)


def test_two_environments_run_side_by_side_into_one_folder_and_churn_reads_both(tmp_path, ray_tmp):
    """Two runtime_envs that differ in one package's version; each job's fixture survey records that version
    as its release, and the churn rule reads both releases from the one run folder.

    Each release is the tiny wheel unpacked (as ``pip install --target`` lays it out) in a folder of its own, put
    on the job's PYTHONPATH by a ``py_modules`` runtime_env (``local://``: a folder every node has, used in place;
    ``ray/_private/runtime_env/py_modules.py``). A ``pip`` runtime_env would reach the workbench the same way, but
    Ray builds each by copying the driver's whole virtualenv (``virtualenv_utils.py``): GBs written and removed
    per environment, minutes on a busy disk, which proves nothing here."""
    from workbench.fleet import RayExecutor

    def release(v: str) -> str:
        folder = tmp_path / f"rel-{v}"
        with zipfile.ZipFile(_wheel(tmp_path, v)) as z:
            z.extractall(folder)
        return f"local://{folder}"

    doc = {"engines": ["trtllm"], "models": ["synthetic:tiny"], "notebooks": ["writes_survey"],
           "resources": {"trtllm": {"num_cpus": 1, "num_gpus": 0}},
           "environments": {f"rel-{v}": {"py_modules": [release(v)]} for v in ("1.0", "2.0")}}
    assert matrix.check(doc) == []
    path = tmp_path / "m.yaml"
    import yaml

    path.write_text(yaml.safe_dump(doc))
    out = tmp_path / "run"
    assert _run(out, matrix.load(path), FLEET, RayExecutor(num_cpus=2)) == 0

    m = manifest.load(out)
    assert {k: e.environment for k, e in m.notebooks.items()} == {
        "trtllm/rel-1.0/writes_survey": "rel-1.0", "trtllm/rel-2.0/writes_survey": "rel-2.0"}
    found = findings.scan([out / "findings"]).findings
    assert sorted(f.engine_version for _, f in found) == ["1.0", "2.0"]
    churn = standing.version_churn(found)
    assert churn.verdict == "confirmed" and churn.engine_version == "1.0 → 2.0", churn.summary


def test_a_bad_or_unreachable_address_exits_2_naming_the_fix(tmp_path):
    import socket

    from typer.testing import CliRunner

    from workbench.cli import app

    require_ray()
    run = ["run", "-o", str(tmp_path / "run"), "--only", "00_environment", "--executor", "ray"]
    r = CliRunner().invoke(app, run + ["--address", "head.example:port"])
    assert r.exit_code == 2 and "is not HOST:PORT" in r.output and "ray start --head" in r.output
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = CliRunner().invoke(app, run + ["--address", f"127.0.0.1:{port}"])
    assert r.exit_code == 2 and f"no Ray cluster answers at 127.0.0.1:{port}" in r.output
    assert f"ray start --head --port={port}" in r.output
    assert not (tmp_path / "run" / "run.json").exists()
    r = CliRunner().invoke(app, run[:-2] + ["--address", f"127.0.0.1:{port}"])
    assert r.exit_code == 2 and "--address is for --executor ray" in r.output


def test_a_driver_killed_outright_takes_its_local_head_and_jobs_with_it(tmp_path, ray_tmp):
    """SIGKILL leaves the driver no way out: its local head (gcs_server, raylet, agents, workers) and the job's
    kernel must still go, on their own, within a bounded time."""
    import signal
    import subprocess
    import sys

    from conftest import descendants, gone_within

    hold, out = tmp_path / "hold", tmp_path / "run"
    hold.mkdir()
    scratch = set(Path(tempfile.gettempdir()).glob("wb-job-*"))
    code = ("import sys; from pathlib import Path; from workbench import matrix, runner; "
            "from workbench.fleet import RayExecutor; books = Path(sys.argv[2]); "
            "m = matrix.Matrix(('llamacpp',), ('synthetic:tiny',), ('holds',), {'hold_dir': sys.argv[3]}); "
            "runner.run_batch(Path(sys.argv[1]), progress=False, notebooks_dir=books, data_dir=books / 'no-data', "
            "jobs=lambda o: m.jobs(o, books), executor=RayExecutor(num_cpus=1))")
    driver = subprocess.Popen([sys.executable, "-c", code, str(out), str(FLEET), str(hold)],
                              env=os.environ | {"JUPYTER_RUNTIME_DIR": f"{ray_tmp}/jupyter"},
                              stdout=subprocess.DEVNULL, stderr=open(tmp_path / "driver.log", "wb"))
    try:
        end = time.monotonic() + 400
        while not list(hold.glob("*.pid")) and driver.poll() is None and time.monotonic() < end:
            time.sleep(0.2)
        (marker,) = hold.glob("*.pid")  # mid-job: the job's kernel holds on the local head's worker
        ours = set(descendants(driver.pid)) | {p.pid for p in naming(ray_tmp)} | {int(marker.read_text())}
        assert len(ours) > 3, (tmp_path / "driver.log").read_text()[-2000:]
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    left = gone_within(30, ours)
    assert not left, [(p, Path(f"/proc/{p}/cmdline").read_bytes()[:120]) for p in left]
    assert not set(Path(tempfile.gettempdir()).glob("wb-job-*")) - scratch  # the job's scratch folder went too
    assert manifest.load(out).notebooks["llamacpp/holds"].status == "running"  # it never finished: resume reruns it


def test_what_counts_as_a_lost_node_is_ray_s_own_exception_classes():
    """A lost worker, node or result is retried once elsewhere; the notebook's own failure is not (by class,
    so Ray's subclasses such as ObjectReconstructionFailedError count, which a name check missed)."""
    ray = require_ray()
    from workbench.fleet import _lost, _NodeGone, _why

    x = ray.exceptions
    lost = [x.NodeDiedError("node gone"), x.WorkerCrashedError(), x.LocalRayletDiedError(), x.GetTimeoutError(),
            x.ObjectReconstructionFailedError("ab" * 14), _NodeGone("NodeDiedError: marked dead")]
    kept = [x.RayTaskError("run_job", "Traceback …", RuntimeError("cell 3")), RuntimeError("boom"), ValueError()]
    assert [_lost(e) for e in lost] == [True] * len(lost)
    assert [_lost(e) for e in kept] == [False] * len(kept)
    assert _why(_NodeGone("NodeDiedError: marked dead")) == "NodeDiedError: marked dead"
    assert _why(x.NodeDiedError("node gone\nmore")) == "NodeDiedError: node gone"


def test_a_runtime_env_that_cannot_be_built_says_why_in_the_run():
    """RuntimeEnvSetupError's first line never says why; the reason is its last line, or an errno inside a
    very long one. The messages are shaped as the runtime_env agent sent them here (a venv clone on a full disk,
    ``ray/_private/runtime_env/utils.py: check_output_cmd``; a pip install with no such package)."""
    ray = require_ray()
    from workbench.fleet import _why

    clone = ("Traceback (most recent call last):\n  File \"…/virtualenv_utils.py\", line 110\n"
             "ray._private.runtime_env.utils.SubprocessCalledProcessError: Run cmd[5] failed with the following "
             "details. Command '[…_clonevirtualenv.py…]' returned non-zero exit status 1.\nLast 50 lines of stdout:\n"
             "    shutil.Error: [('/v/lib/t', '/tmp/x/virtualenv/lib/t', \"[Errno 28] No space left on device: "
             "'/v/lib/t' -> '/tmp/x/virtualenv/lib/t'\")" + ", ('/v/a', '/tmp/x/a', 'more')" * 200 + "]")
    pip = "Traceback …\nERROR: Could not find a version that satisfies the requirement wbrelease==9\n"
    err = ray.exceptions.RuntimeEnvSetupError
    assert _why(err(clone)) == ("RuntimeEnvSetupError: Failed to set up runtime environment. "
                                "[Errno 28] No space left on device")
    assert _why(err(pip)) == ("RuntimeEnvSetupError: Failed to set up runtime environment. "
                              "ERROR: Could not find a version that satisfies the requirement wbrelease==9")
    assert len(_why(err("Traceback\n" + "x" * 5000))) < 400
    assert _why(err()) == "RuntimeEnvSetupError: Failed to set up runtime environment."


def test_a_reused_worker_keeps_no_path_into_an_earlier_job(monkeypatch, tmp_path):
    """Ray reuses a worker process for the next job: the kernel path and server-log folder a job points at live
    in its own temporary folder, removed when it ends, so they must not outlast it (nor pile up per job)."""
    from types import SimpleNamespace

    from workbench import fleet, jobs

    ray = require_ray()  # the job's scratch folder goes under its node's temp folder: here, no Ray instance
    monkeypatch.setattr(ray, "get_runtime_context", lambda: SimpleNamespace(get_temp_dir=lambda: str(tmp_path)))
    monkeypatch.setenv("JUPYTER_PATH", "/the/user/s")
    monkeypatch.delenv("WORKBENCH_SERVER_LOGS", raising=False)
    seen = []

    def execute(p, run, attempt, verbose):
        seen.append((os.environ["JUPYTER_PATH"].split(os.pathsep), os.environ["WORKBENCH_SERVER_LOGS"], run))
        return "ok", None

    monkeypatch.setattr(fleet, "node", dict)
    monkeypatch.setattr(jobs, "execute", execute)
    for attempt in ("a1", "a2"):
        assert list(fleet.run_job("nb", "nb.ipynb", b"{}", {"engine": "llamacpp"}, "", attempt, False))[1]["status"] == "ok"
        assert os.environ["JUPYTER_PATH"] == "/the/user/s" and "WORKBENCH_SERVER_LOGS" not in os.environ
    for path, logs, run in seen:
        assert len(path) == 2 and path[1] == "/the/user/s" and logs == str(run / "servers")
