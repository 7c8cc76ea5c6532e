"""A real three-node Ray cluster on 127.0.0.1 (``ray start``: a head with no CPUs, two one-CPU workers), shared
by the module: the CLI on a cluster against the local executor, ``--job-timeout`` on Ray, and a worker killed
mid-job (the last test: it costs the cluster a node).

Each driver runs in a child process with a deadline, so a driver that waits forever fails its test with its
log's tail instead of hanging the suite; nothing of the driver's Ray state lives in pytest's process. The
nodes bind loopback only (``workbench.fleet.loopback_hook``), and no process of the cluster outlives the module.
The tests never call ``ray stop``, which stops every Ray process of the user on the machine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from conftest import descendants, gone_within, listening, naming, off_loopback, require_ray

from workbench import findings, manifest

pytestmark = pytest.mark.slow
FLEET = Path(__file__).parent / "fixtures" / "fleet"
ENV = {"RAY_START_HOOK": "workbench.fleet.loopback_hook", "RAY_AUTH_MODE": "disabled",
       "RAY_USAGE_STATS_ENABLED": "0"}


@dataclass
class Node:
    name: str
    temp: str
    proc: subprocess.Popen

    def processes(self) -> set[int]:
        """Its ``ray start`` and every process below it or naming its temp folder (a job's kernel included)."""
        return {self.proc.pid, *descendants(self.proc.pid), *(p.pid for p in naming(self.temp))}


@dataclass
class Cluster:
    address: str
    root: Path
    nodes: dict[str, Node]

    def spawn(self, out: Path, code: str, *args: str) -> tuple[subprocess.Popen, Path]:
        """Start ``code`` (a driver of this cluster: argv address, out, *args) in a session of its own; its
        output goes to ``out``.log."""
        log = out.with_suffix(".log")
        with open(log, "wb") as f:
            return subprocess.Popen([sys.executable, "-c", code, self.address, str(out), *args], env=os.environ | ENV,
                                    stdout=f, stderr=subprocess.STDOUT, start_new_session=True), log

    def driver(self, out: Path, code: str, *args: str, timeout_s: float = 420) -> subprocess.CompletedProcess:
        """Run a driver (:meth:`spawn`) to its end; past ``timeout_s`` it is killed and the test fails with the
        tail of its output."""
        return self.finish(*self.spawn(out, code, *args), timeout_s=timeout_s)

    def finish(self, proc: subprocess.Popen, log: Path, timeout_s: float = 420) -> subprocess.CompletedProcess:
        """Wait for a driver :meth:`spawn` started, as :meth:`driver` does."""
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            pytest.fail(f"the driver still waited after {timeout_s:g} s:\n{log.read_text()[-3000:]}\n"
                        f"nodes: {self.alive()}", pytrace=False)
        return subprocess.CompletedProcess(proc.args, proc.returncode, log.read_text(), "")

    def alive(self) -> dict:
        return {n: node.proc.poll() is None for n, node in self.nodes.items()}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(root: Path, name: str, *args: str) -> Node:
    temp = str(root / name)
    log = open(root / f"{name}.log", "wb")
    cmd = [str(Path(sys.executable).parent / "ray"), "start", "--block", "--disable-usage-stats",
           "--node-ip-address", "127.0.0.1", "--temp-dir", temp, *args]
    return Node(name, temp, subprocess.Popen(cmd, env=os.environ | ENV, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True))


_NODES = """import json, sys, time, ray
from workbench import fleet
with fleet._loopback():
    ray.init(address=sys.argv[1], _node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False)
end = time.monotonic() + 120
while time.monotonic() < end and sum(n["Alive"] for n in ray.nodes()) < 3:
    time.sleep(1)
print(json.dumps([{k: n[k] for k in ("NodeID", "Alive", "NodeManagerAddress", "Resources")} for n in ray.nodes()]))
"""


def _stop(nodes) -> list:
    """SIGTERM each node's session (``ray start --block`` then stops its node), the workers first (30 s to exit:
    they take seconds), then the head (2 s: after SIGTERM its gcs_server and autoscaler monitor wait out about 30 s
    of their own, seen here busy or not, and nothing here needs their graceful end), SIGKILL what is left after
    each; the pids still alive after that."""
    procs = set().union(*(n.processes() for n in nodes)) if nodes else set()
    for group, grace_s in (([n for n in nodes if n.name != "head"], 30), ([n for n in nodes if n.name == "head"], 2)):
        mine = set().union(*(n.processes() for n in group)) if group else set()
        for n in group:
            if n.proc.poll() is None:
                os.killpg(n.proc.pid, signal.SIGTERM)
        for pid in gone_within(grace_s, mine):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return gone_within(10, procs)


@pytest.fixture(scope="module")
def cluster():
    require_ray()
    root = Path(tempfile.mkdtemp(prefix="wbn-", dir="/tmp"))  # short: Ray's unix socket paths must fit
    port = _port()
    nodes = {"head": _start(root, "head", "--head", "--port", str(port), "--num-cpus", "0",
                            "--include-dashboard=false")}
    try:
        for w in ("w1", "w2"):
            nodes[w] = _start(root, w, "--address", f"127.0.0.1:{port}", "--num-cpus", "1")
        c = Cluster(f"127.0.0.1:{port}", root, nodes)
        got = c.driver(root / "nodes", _NODES, timeout_s=180)
        listed = json.loads(got.stdout.strip().splitlines()[-1]) if got.returncode == 0 else []
        assert sum(n["Alive"] for n in listed) == 3, (got.stdout[-3000:], c.alive())
        assert {n["NodeManagerAddress"] for n in listed} == {"127.0.0.1"}, listed
        off = off_loopback(listening(set().union(*(n.processes() for n in nodes.values()))))
        assert not off, f"the cluster listens off loopback: {off}"
        yield c
    finally:
        left = _stop(list(nodes.values()))
        shutil.rmtree(root, ignore_errors=True)  # the nodes' sessions and logs
        assert not left, f"cluster processes outlived the module: {left}"
        assert not naming(str(root)), [p.info["cmdline"][:3] for p in naming(str(root))]


_BATCH = """import json, sys
from pathlib import Path
from workbench import matrix, runner
from workbench.fleet import RayExecutor
books = Path(sys.argv[3])
m = matrix.Matrix(("llamacpp",), ("synthetic:tiny",), ("holds",), json.loads(sys.argv[4]))
timeout = float(sys.argv[5]) or None
sys.exit(runner.run_batch(Path(sys.argv[2]), progress=False, notebooks_dir=books, data_dir=books / "no-data",
                          jobs=lambda o: m.jobs(o, books), executor=RayExecutor(sys.argv[1], job_timeout_s=timeout)))
"""


def _masked(text: str) -> str:
    """A written-back text with what differs between two runs of the same jobs masked: ids, times, numbers."""
    return re.sub(r"[0-9a-f]{8,}|\d+(\.\d+)?", "#", text)


def test_the_cli_on_a_cluster_gives_the_local_executors_run_folder(cluster, tmp_path):
    """``workbench run --executor ray --address … --matrix FILE`` and ``--executor local`` on the same matrix:
    the same jobs and verdicts, a report, the same written-back blueprint (numbers masked), each job's node."""
    spec = {"engines": ["llamacpp"], "models": ["synthetic:tiny"], "notebooks": ["20_reuse_metrics"],
            "params": {"repeats": 1}}
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(spec))
    cli = ("import sys; from workbench.cli import app; "
           "app(['run', '--matrix', sys.argv[3], '--out', sys.argv[2], *sys.argv[4:]])")
    runs, started = {}, {}
    try:  # the two runs side by side: they share the matrix file and nothing else (each its own run folder)
        for name, extra in (("local", ["--executor", "local"]),
                            ("ray", ["--executor", "ray", "--address", cluster.address])):
            started[name] = cluster.spawn(tmp_path / name, cli, str(tmp_path / "m.yaml"), *extra)
        for name, (proc, log) in started.items():
            got = cluster.finish(proc, log)
            assert got.returncode == 0, got.stdout[-3000:]
            runs[name] = (tmp_path / name, manifest.load(tmp_path / name))
    finally:
        for proc, _ in started.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    (local, lm), (ray_, rm) = runs["local"], runs["ray"]
    assert set(rm.notebooks) == set(lm.notebooks) and rm.notebooks
    verdicts = {o: sorted((f.engine, f.probe, f.verdict) for _, f in findings.scan([o / "findings"]).findings)
                for o in (local, ray_)}
    assert verdicts[ray_] == verdicts[local] and verdicts[local]
    for e in rm.notebooks.values():
        assert e.status == "ok" and e.node["hostname"] == socket.gethostname() and e.node["ray_node"]
        assert (ray_ / e.output).is_file() and (ray_ / e.log).is_file()
    assert all(e.node is None or not e.node.get("ray_node") for e in lm.notebooks.values())
    assert (ray_ / "report.html").is_file()
    assert _masked((ray_ / "blueprint.md").read_text()) == _masked((local / "blueprint.md").read_text())


def test_a_job_over_its_timeout_on_a_node_ends_timeout_and_keeps_nothing(cluster, tmp_path):
    """The job writes its finding on its node and holds (never released); ``--job-timeout`` ends it there."""
    hold, out = tmp_path / "hold", tmp_path / "run"
    hold.mkdir()
    got = cluster.driver(out, _BATCH, str(FLEET), json.dumps({"hold_dir": str(hold)}), "15")
    assert got.returncode != 0, got.stdout[-2000:]
    (e,) = manifest.load(out).notebooks.values()
    assert e.status == "timeout" and e.error.startswith("JobTimeout: still running after 15 s"), e.error
    assert e.node and e.node["ray_node"]
    assert [m.stem for m in hold.glob("*.pid")] == [e.attempt]  # it got as far as holding: its finding was written
    assert not findings.scan([out / "findings"]).findings  # it wrote one on its node; nothing came back
    assert not [p for p in naming("ipykernel") if any(cluster.root.name in a for a in p.info["cmdline"] or [])]


def test_a_worker_killed_mid_job_is_retried_elsewhere_and_nothing_is_lost_or_doubled(cluster, tmp_path):
    """The job writes its finding on its node and holds; the test SIGKILLs that worker node (its session and
    every process below its ``ray start``: a core worker left alive would hand its result over). The job is
    retried once on the other worker under a new attempt id, and the run folder holds one finding, the retry's."""
    hold, out = tmp_path / "hold", tmp_path / "run"
    hold.mkdir()
    driver, proc_log = cluster.spawn(out, _BATCH, str(FLEET), json.dumps({"hold_dir": str(hold)}), "0")
    try:
        first = _marker(hold, set(), driver, proc_log)
        kernel = int(first.read_text())
        (victim,) = [n for n in cluster.nodes.values() if n.name != "head" and kernel in n.processes()]
        procs = victim.processes()
        os.killpg(victim.proc.pid, signal.SIGKILL)
        for pid in procs:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert not gone_within(15, procs)
        second = _marker(hold, {first}, driver, proc_log)
        (survivor,) = [n for n in cluster.nodes.values() if n.name not in ("head", victim.name)]
        assert int(second.read_text()) in survivor.processes()
        (hold / "release").touch()
        driver.wait(240)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the driver still waited after the release:\n{proc_log.read_text()[-3000:]}", pytrace=False)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    assert driver.returncode == 0, proc_log.read_text()[-3000:]
    (e,) = manifest.load(out).notebooks.values()
    assert e.status == "ok" and e.attempt == second.stem != first.stem
    assert e.retried and e.retried.startswith("NodeLost: node ") and "was lost mid-job" in e.retried, e.retried
    lost_node = e.retried.split()[2]
    assert e.node["ray_node"] != lost_node
    found = findings.scan([out / "findings"]).findings
    assert [f.attempt for _, f in found] == [second.stem]  # the lost attempt's finding never came back


def _marker(hold: Path, seen: set, driver: subprocess.Popen, log: Path, within_s: float = 300) -> Path:
    """The next attempt's ``<attempt>.pid`` in ``hold``: that attempt's kernel is mid-job."""
    end = time.monotonic() + within_s
    while time.monotonic() < end and driver.poll() is None:
        new = set(hold.glob("*.pid")) - seen
        if new:
            (m,) = new
            while not m.read_text().strip():
                time.sleep(0.1)
            return m
        time.sleep(0.2)
    pytest.fail(f"no attempt reached its hold (driver {driver.poll()}):\n{log.read_text()[-3000:]}", pytrace=False)
