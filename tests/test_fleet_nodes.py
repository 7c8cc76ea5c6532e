"""Fleet runs on a real multi-node Ray cluster on this machine: `ray start --head` plus two worker nodes, each
its own `ray start --block` process on 127.0.0.1 with its own temp folder, shared by this module's tests.

A worker node is killed mid-job (SIGKILL to its whole process group: `ray start`, raylet, agents, workers): the
job comes back once, on the other node, under a new attempt id, and its finding is counted once. A job over
--job-timeout is stopped and nothing of it is kept. Every Ray process and notebook kernel of the cluster (all
name its temp folder: JUPYTER_RUNTIME_DIR points there) is gone when the module ends. `ray stop` is not used:
it stops every Ray process of this user on the machine, other people's included.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import yaml
from conftest import gone_within, naming

from workbench import findings, manifest, matrix, runner
from workbench.executors import TIMEOUT, timed_out

pytestmark = pytest.mark.slow
FLEET = Path(__file__).parent / "fixtures" / "fleet"
#: The test cluster and its drivers: no usage stats; no token auth (Ray 2.60 turns it on for `ray start` when
#: ~/.ray/auth_token exists, and this private loopback cluster must not depend on a file of the user's); the raylet
#: waits 90 s, not 15, for its dashboard agent's ports (its import alone takes 12 s on 2 shared cores).
#: Every node's `ray start` keeps 127.0.0.1 as its IP and its head's (tests/ray_loopback.py says why).
OWN_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "RAY_raylet_start_wait_time_s": "90",
           "RAY_START_HOOK": "ray_loopback.loopback"}
#: A driver in a process of its own: Ray's local-only mode leaves 127.0.0.1 as it is (not for `ray start` workers,
#: which it refuses).
DRIVER_ENV = OWN_ENV | {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1"}


class Cluster:
    """A head (no CPUs: jobs run only on workers) and worker nodes of one CPU each, each a `ray start --block`
    leading a session of its own, so that its whole node (raylet, agents, workers) is one process group."""

    def __init__(self, tmp: str) -> None:
        from workbench.serve import free_port

        self.tmp, self.port = tmp, free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.nodes: dict[str, subprocess.Popen] = {}
        self.sessions: set[int] = set()  # every node's, the failed starts' too
        self.env = os.environ | OWN_ENV | {"JUPYTER_RUNTIME_DIR": f"{tmp}/jupyter",
                                           "PYTHONPATH": os.pathsep.join(sys.path)}

    def start(self, name: str, *args: str, tries: int = 3, timeout_s: float = 180) -> None:
        """Start node ``name`` and wait until it says it runs. On 2 shared cores a node can miss Ray's 30 s wait
        for its raylet (whose dashboard agent takes ~12 s to import): its group is killed and it starts again."""
        ray = str(Path(sys.executable).parent / "ray")
        for _ in range(tries):
            log = Path(self.tmp, f"{name}.{len(list(Path(self.tmp).glob(f'{name}.*.log')))}.log")
            log.write_bytes(b"")
            proc = subprocess.Popen(
                [ray, "start", "--block", "--node-ip-address", "127.0.0.1", "--temp-dir", f"{self.tmp}/{name}",
                 "--disable-usage-stats", *args], env=self.env, start_new_session=True,
                stdout=open(log, "ab"), stderr=subprocess.STDOUT)
            self.sessions.add(proc.pid)
            end = time.monotonic() + timeout_s
            while proc.poll() is None and "Ray runtime started" not in log.read_text(errors="replace"):
                assert time.monotonic() < end, self.logs()
                time.sleep(0.5)
            if proc.poll() is None:
                self.nodes[name] = proc
                return
            _killpg(proc.pid)
        raise AssertionError(f"node {name} did not start in {tries} tries" + self.logs())

    def kill(self, name: str) -> None:
        """SIGKILL node ``name``: `ray start`, its raylet, agents, workers and their kernels at once. Ray's core
        workers and the kernels they start are not all in the node's process group, and a task whose worker
        outlives its raylet still hands its result to the driver (seen here: the job ended ok on the killed node)."""
        import psutil

        proc = self.nodes.pop(name)
        below = psutil.Process(proc.pid).children(recursive=True)
        _killpg(proc.pid)
        for p in below:
            with contextlib.suppress(psutil.Error):
                p.kill()
        proc.wait()

    def node_of(self, pid: int) -> str:
        """The node whose `ray start` process is an ancestor of ``pid``."""
        import psutil

        above = {p.pid for p in psutil.Process(pid).parents()}
        return next(n for n, proc in self.nodes.items() if proc.pid in above)

    def logs(self) -> str:
        return "".join(f"\n--- {p.name}\n" + p.read_text(errors="replace")[-1500:] for p in Path(self.tmp).glob("*.log"))

    def processes(self) -> list:
        """Every process of the cluster: in a node's session, or naming its temp folder (kernels included)."""
        import psutil

        found = {p.pid: p for p in naming(self.tmp)}
        for p in psutil.process_iter():
            try:
                if os.getsid(p.pid) in self.sessions:
                    found[p.pid] = p
            except OSError:
                pass
        return list(found.values())

    def stop(self) -> list:
        """`ray start --block` stops its node on SIGTERM; what is left 20 s later is killed and returned."""
        import psutil

        for proc in self.nodes.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.nodes.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                _killpg(proc.pid)
                proc.wait()
        _, left = psutil.wait_procs(self.processes(), timeout=20)
        for p in left:
            with contextlib.suppress(psutil.Error):
                p.kill()
        return left

    def listening(self) -> list:
        """(pid, name, address) of every listening socket of the cluster's processes."""
        import psutil

        found = []
        for p in self.processes():
            with contextlib.suppress(psutil.Error):
                found += [(p.pid, p.name(), c.laddr.ip, c.laddr.port) for c in p.net_connections("inet")
                          if c.status == psutil.CONN_LISTEN]
        return found


def _killpg(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def cluster():
    pytest.importorskip("ray", reason="ray is not installed: the fleet extra (pip install -e '.[fleet]')")
    tmp = tempfile.mkdtemp(prefix="wbc-", dir="/tmp")  # short: Ray's unix socket paths live under it
    mp = pytest.MonkeyPatch()
    for k, v in OWN_ENV.items():  # this process is the drivers' process
        mp.setenv(k, v)
    from ray._private import services
    from ray_loopback import keep_loopback

    mp.setattr(services, "resolve_ip_for_localhost", keep_loopback)  # this process's drivers join 127.0.0.1
    c = Cluster(tmp)
    try:
        c.start("head", "--head", "--port", str(c.port), "--num-cpus", "0", "--include-dashboard=false")
        c.start("w1", "--address", c.address, "--num-cpus", "1")
        c.start("w2", "--address", c.address, "--num-cpus", "1")
        alive = [n for n in _nodes(c) if n["Alive"]]
        assert len(alive) == 3 and {n["NodeManagerAddress"] for n in alive} == {"127.0.0.1"}, alive
        off = [s for s in c.listening() if s[2] not in LOOPBACK]
        assert not off, f"cluster sockets off loopback: {off}"
        yield c
    finally:
        left = c.stop()
        mp.undo()
        shutil.rmtree(tmp, ignore_errors=True)
    assert not left, f"Ray processes outlived the cluster: {left}"


def _matrix(tmp_path: Path, **params) -> matrix.Matrix:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({"engines": ["llamacpp"], "models": ["synthetic:tiny"], "notebooks": ["holds"],
                                    "params": params}))
    return matrix.load(path)


def _run(out: Path, m: matrix.Matrix, executor) -> int:
    return runner.run_batch(out, progress=False, notebooks_dir=FLEET, data_dir=out / "no-data",
                            jobs=lambda o: m.jobs(o, FLEET), executor=executor)


def test_a_worker_killed_mid_job_is_retried_once_on_another_node_and_nothing_is_lost_or_doubled(tmp_path, cluster):
    import ray

    from workbench.fleet import RayExecutor

    hold = tmp_path / "hold"
    hold.mkdir()
    killed: dict = {}

    def kill_the_node_running_it() -> None:
        """Once the first attempt holds (its finding written in the node's scratch folder), kill its node."""
        end = time.monotonic() + 400
        while not list(hold.glob("*.pid")) and time.monotonic() < end:
            time.sleep(0.2)
        first = next(hold.glob("*.pid"), None)
        if first is None:
            return
        name = cluster.node_of(int(first.read_text()))
        sock = f"{cluster.tmp}/{name}/"
        killed.update(attempt=first.stem, name=name, ray_node=next(
            n["NodeID"] for n in ray.nodes() if n["ObjectStoreSocketName"].startswith(sock)))
        cluster.kill(name)
        (hold / "release").touch()  # the retry goes straight through

    killer = threading.Thread(target=kill_the_node_running_it, daemon=True)
    killer.start()
    out = tmp_path / "run"
    code = _run(out, _matrix(tmp_path, hold_dir=str(hold)), RayExecutor(cluster.address))
    killer.join(5)
    assert killed, "the job never started" + cluster.logs()
    assert code == 0, manifest.load(out).notebooks

    (entry,) = manifest.load(out).notebooks.values()
    assert entry.status == "ok" and entry.attempt != killed["attempt"]  # a new attempt id
    assert sorted(p.stem for p in hold.glob("*.pid")) == sorted([killed["attempt"], entry.attempt])  # ran twice
    assert entry.node["ray_node"] != killed["ray_node"]  # elsewhere
    assert entry.retried.startswith(f"NodeLost: node {killed['ray_node']} (") and "was lost mid-job (" in entry.retried
    found = findings.scan([out / "findings"]).findings
    assert [f.attempt for _, f in found] == [entry.attempt]  # one finding, the retry's: none lost, none doubled
    assert not (out / "superseded").exists()
    cluster.start(killed["name"], "--address", cluster.address, "--num-cpus", "1")  # for the next test


def test_a_job_over_its_timeout_is_stopped_and_nothing_of_it_is_kept(tmp_path, cluster):
    from workbench.fleet import RayExecutor

    hold, out = tmp_path / "hold", tmp_path / "run"
    hold.mkdir()
    assert _run(out, _matrix(tmp_path, hold_dir=str(hold)), RayExecutor(cluster.address, job_timeout_s=45)) == 1
    (entry,) = manifest.load(out).notebooks.values()
    assert entry.status == TIMEOUT and entry.error == timed_out(45)
    assert 45 <= entry.duration_s < 150 and entry.node["ray_node"]
    (marker,) = hold.glob("*.pid")  # it got as far as holding: it had written its finding on its node
    assert marker.stem == entry.attempt and not gone_within(15, [int(marker.read_text())])  # its kernel is gone
    assert findings.scan([out / "findings"]).findings == []  # and that finding never came back
    assert not (out / entry.output).exists()


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench.cli", "run", *args], capture_output=True, text=True,
                          env=os.environ | DRIVER_ENV, timeout=900)


def _masked(text: str) -> str:
    """A written-back blueprint without what differs between two runs of the same jobs: finding ids, numbers."""
    return re.sub(r"\d+", "N", re.sub(r"[0-9a-f]{8,}", "ID", text))


def test_the_cli_runs_a_matrix_on_the_cluster_into_the_run_folder_the_local_executor_makes(tmp_path, cluster):
    """`workbench run --executor ray --address … --matrix FILE --out DIR`, against the same matrix run locally:
    the same jobs, verdicts, report and written-back blueprint, and each job's node in run.json."""
    from test_fleet import _verdicts

    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({"engines": ["llamacpp"], "models": ["synthetic:tiny"],
                                    "notebooks": ["00_environment", "20_reuse_metrics"]}))
    local, fleet = tmp_path / "local", tmp_path / "fleet"
    r = _cli("--matrix", str(path), "--out", str(local))
    assert r.returncode == 0, r.stdout + r.stderr
    r = _cli("--executor", "ray", "--address", cluster.address, "--matrix", str(path), "--out", str(fleet))
    assert r.returncode == 0, r.stdout + r.stderr

    ran = manifest.load(fleet).notebooks
    assert set(ran) == set(manifest.load(local).notebooks) == {"llamacpp/00_environment", "llamacpp/20_reuse_metrics"}
    workers = {n["NodeID"] for n in _nodes(cluster) if n["Resources"].get("CPU")}
    for e in ran.values():
        assert e.status == "ok" and e.node["ray_node"] in workers and e.node["hostname"]
    assert _verdicts(fleet) == _verdicts(local) and _verdicts(fleet)
    for out in (local, fleet):
        assert (out / "report.html").is_file() and (out / "blueprint.md").is_file()
    assert _masked((fleet / "blueprint.md").read_text()) == _masked((local / "blueprint.md").read_text())


def _nodes(cluster: Cluster) -> list:
    out = subprocess.run([sys.executable, "-c", "import json, ray; ray.init(address=%r, log_to_driver=False); "
                          "print(json.dumps(ray.nodes()))" % cluster.address], capture_output=True, text=True,
                         env=cluster.env | DRIVER_ENV, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])
