"""``workbench run --executor ray``: the run's jobs as Ray tasks across a group's machines.

Each job is one Ray task asking for the engine's resources (:func:`workbench.executors.resources_for`) in
its matrix environment (a Ray ``runtime_env``). The task runs the local executor's papermill execution
(:func:`workbench.jobs.execute`) in a temporary folder on whichever node takes it, and returns the
executed notebook, its findings and its engine log as bytes: no shared filesystem is assumed. The task is a
generator whose first item is the node it started on: a task whose node or worker is lost mid-job is
submitted once more under a new attempt id, never on that node (Ray's ``ray.io/node-id`` label selector);
the lost attempt brought nothing back, so no finding is ever counted twice. A task over ``job_timeout_s``
is cancelled (``ray.cancel(force=True)``) and brings nothing back either. Ray's dashboard and usage stats stay off; a local head
binds 127.0.0.1 and stops with the run.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from . import envvars, lifecycle
from .executors import TIMEOUT, Executor, ExecutorError, Job, Ran, Start, node_lost, timed_out
from .serve import is_loopback

INSTALL = "pip install 'workbench[fleet]' (ray==2.60.0)"
_ADDRESS = re.compile(r"^(?:ray://)?(?P<host>[A-Za-z0-9.\-]+|\[[0-9a-fA-F:]+\]):(?P<port>\d{1,5})$")
POLL_S = 5.0  # how often a driver waiting on its jobs checks for tasks that ended without waking their stream
FETCH_S = 60.0  # the longest a driver waits to fetch one item a task yielded (its node may be gone with it)


def check_address(address: str) -> tuple[str, int] | None:
    """``HOST:PORT`` (or ``ray://HOST:PORT``, or ``auto``) as ``ray start --head`` prints it; the host and
    port to probe, None for ``auto``; :class:`ExecutorError` naming the fix otherwise."""
    if address == "auto":
        return None
    m = _ADDRESS.match(address.strip())
    if not m or not 0 < int(m["port"]) < 65536:
        raise ExecutorError(f"--address {address!r} is not HOST:PORT: pass the address `ray start --head` printed "
                            "on the head machine, e.g. --address 10.0.0.5:6379 (or auto on a cluster node)")
    return m["host"].strip("[]"), int(m["port"])


def reachable(host: str, port: int, timeout_s: float = 5.0) -> None:
    """A Ray head answers at host:port, or :class:`ExecutorError` saying how to start one."""
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as e:
        raise ExecutorError(f"no Ray cluster answers at {host}:{port} ({e.strerror or e}): start its head there with "
                            f"`ray start --head --port={port}`, or fix --address") from None


def node() -> dict:
    """Where this task runs: hostname, Ray node id, GPUs and NVIDIA driver (as ``workbench doctor`` reads them)."""
    import ray

    from .environment import gpus

    g = gpus()
    return {"hostname": socket.gethostname(), "ray_node": ray.get_runtime_context().get_node_id(),
            "gpu": ", ".join(d["name"] for d in g["devices"]) or None, "driver": g.get("driver")}


def run_job(name: str, file_name: str, notebook: bytes, parameters: dict, variant: str, attempt: str,
            verbose: bool) -> Iterator[dict]:
    """The Ray task, a generator: first where it runs (so the driver knows the node before anything can go
    wrong, and starts the job's clock), then the local executor's execution in a scratch run folder and
    everything it wrote, as bytes."""
    import ray

    from . import jobs

    yield node()
    # under the node's Ray temp folder: a worker killed mid-job (a cancel, a driver killed outright) never
    # removes its own, and a local head's folder goes with the head (end_session, _watch)
    with tempfile.TemporaryDirectory(prefix="wb-job-", dir=ray.get_runtime_context().get_temp_dir()) as tmp:
        source, run = Path(tmp) / "src" / file_name, Path(tmp) / "run"
        source.parent.mkdir()
        source.write_bytes(notebook)
        (run / "findings").mkdir(parents=True)
        p = jobs.Planned(name, source, parameters | {"out": str(run / "findings")}, variant)
        env = {"WORKBENCH_SERVER_LOGS": str(run / "servers"), "JUPYTER_PATH": _own_kernel(Path(tmp) / "jupyter")}
        t0 = time.perf_counter()
        with envvars.scoped(env):  # a reused Ray worker keeps no path into this job's removed folder
            status, error = jobs.execute(p, run, attempt, verbose)
        took = round(time.perf_counter() - t0, 2)
        files = {str(f.relative_to(run)): f.read_bytes() for f in sorted(run.rglob("*")) if f.is_file()}
    yield {"status": status, "error": error, "duration_s": took, "files": files}


@contextlib.contextmanager
def _loopback() -> Iterator[None]:
    """Ray 2.60 binds its servers (gcs_server, raylet, core workers, agents) to loopback only when the node's IP is
    exactly 127.0.0.1, yet ``ray.init`` rewrites 127.0.0.1 into the machine's routable IP
    (``ray/_private/services.py: resolve_ip_for_localhost``, called from ``ray/_private/worker.py``): seen here,
    the local head listened on every interface. While the head starts, 127.0.0.1 stays 127.0.0.1."""
    from unittest import mock

    from ray._private import services

    with mock.patch.object(services, "resolve_ip_for_localhost", lambda host: host):
        yield


def loopback_hook(ray_params: Any, head: bool) -> None:
    """``RAY_START_HOOK=workbench.fleet.loopback_hook ray start …``: a node of a cluster on this machine alone,
    which binds loopback only. ``ray start`` rewrites 127.0.0.1 into the routable IP before it calls the hook
    (``ray/scripts/scripts.py``), and a head starts Ray's client server on that IP (port 10001) unless it has no
    port; the hook undoes both, and keeps 127.0.0.1 for the rest of the start (the GCS address included)."""
    from ray._private import services

    services.resolve_ip_for_localhost = lambda host: host
    ray_params.node_ip_address = ray_params.node_name = "127.0.0.1"
    ray_params.ray_client_server_port = None


def _local_head(ray: Any, num_cpus: int | None, kw: dict, tries: int = 3) -> str:
    """A one-machine cluster on 127.0.0.1 in its own temp folder (under RAY_TMPDIR), which it returns. Its raylet
    gives the dashboard agent 15 s to report its ports and aborts otherwise, which a busy machine can miss
    (``import ray.dashboard.agent`` took 12 s on 2 shared cores here): a failed start is cleaned up and tried
    again, up to ``tries`` times."""
    for n in range(1, tries + 1):
        temp = tempfile.mkdtemp(prefix="wbray-", dir=os.environ.get("RAY_TMPDIR") or "/tmp")
        lifecycle.adopt_folder(temp)  # removed with the command's temp root, however the command ends
        try:
            with _loopback():
                ray.init(num_cpus=num_cpus, _node_ip_address="127.0.0.1", _temp_dir=temp, **kw)
            return temp
        except Exception as e:  # noqa: BLE001 - Ray raises a bare Exception when its node times out at start
            ray.shutdown()
            end_session(temp)
            if n == tries or "timed out during startup" not in str(e):
                raise ExecutorError(f"the local Ray head did not start ({e}); free some CPU, or start one with "
                                    "`ray start --head` and pass --address") from None
    raise AssertionError("unreachable")


def session_processes(temp: str) -> list[Any]:
    """The local head's processes (their command line names ``temp``) and everything below them (a job's kernel)."""
    import psutil

    mine = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(temp in part for part in proc.info["cmdline"] or []):
                mine += [proc, *proc.children(recursive=True)]
        except (psutil.Error, TypeError):
            continue
    return [proc for pid, proc in {proc.pid: proc for proc in mine}.items() if pid != os.getpid()]  # not the watchdog


def _end(procs: Sequence[Any], grace_s: float) -> list[int]:
    """Give ``procs`` ``grace_s`` to exit, then kill them; the pids that had to be killed."""
    import psutil

    _, left = psutil.wait_procs(list(procs), timeout=grace_s)
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    return [proc.pid for proc in left]


def end_session(temp: str, grace_s: float = 20.0) -> list[int]:
    """End every process of the local head whose temp folder is ``temp`` (given ``grace_s`` to exit after
    ``ray.shutdown()``, then killed), and remove the folder. It holds each pip or uv runtime_env the head built,
    and Ray builds one by copying the driver's whole virtualenv (``ray/_private/runtime_env/virtualenv_utils.py``,
    ``_clonevirtualenv.py``): 3.8 GB each here, which filled the disk after eight two-environment runs. Returns
    the pids that had to be killed."""
    killed = _end(session_processes(temp), grace_s)
    shutil.rmtree(temp, ignore_errors=True)
    return killed


def watch_session(temp: str) -> Any:
    """A watchdog that ends the local head in ``temp`` once this process is gone, however it died (SIGKILL
    included: Ray's own fate-sharing ends gcs_server and the raylet, but its agents, re-parented to init, and a
    job's kernel outlive the driver). It polls its parent, in a session of its own so a Ctrl-C meant for the
    driver leaves it to do its job; the driver's normal exit ends it after its own cleanup."""
    import subprocess
    import sys

    code = f"from workbench.fleet import _watch; _watch({temp!r}, {os.getpid()})"
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _watch(temp: str, driver: int, every_s: float = 1.0) -> None:
    """Keep a roll of the head's processes while the driver lives (Ray renames its agents, ``ray::…``, so their
    command lines stop naming ``temp``), then end every one still alive and remove the folder."""
    import psutil

    seen: dict[tuple[int, float], Any] = {}
    while os.getppid() == driver:
        for proc in session_processes(temp):
            with contextlib.suppress(psutil.Error):
                seen.setdefault((proc.pid, proc.create_time()), proc)  # a pid with its start: never a reused one
        time.sleep(every_s)
    _end([p for p in seen.values() if p.is_running()] + session_processes(temp), 0)
    shutil.rmtree(temp, ignore_errors=True)


def _own_kernel(where: Path) -> str:
    """A ``python3`` kernel spec on this task's own interpreter, first on JUPYTER_PATH: the installed spec names
    the driver's venv, and the kernel must see the job's runtime_env (its pip packages, its conda)."""
    import json
    import sys

    spec = where / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({"argv": [sys.executable, "-m", "ipykernel_launcher", "-f",
                                                           "{connection_file}"], "display_name": "Python 3",
                                                  "language": "python"}))
    return os.pathsep.join(filter(None, (str(where), os.environ.get("JUPYTER_PATH"))))


@dataclass
class _Attempt:
    """One submitted attempt of a job: its task (a streaming generator), where it started and since when."""

    job: Job
    attempt: str
    task: Any
    submitted: float
    lost: str | None = None  # why the attempt before this one was given up
    node: Mapping[str, Any] | None = None  # set by the task's first yield
    deadline: float | None = None


class RayExecutor(Executor):
    """Jobs as Ray tasks on the cluster at ``address`` (None: a local head with ``num_cpus`` cores, stopped
    when the run ends, and with the driver however it ends)."""

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None,
                 job_timeout_s: float | None = None) -> None:
        super().__init__(job_timeout_s)
        self.address, self.num_cpus = address, num_cpus
        self._head: str | None = None  # the local head's temp folder, while it runs
        self._watchdog: Any = None  # the process that ends the local head if this one dies (watch_session)
        self._probe = check_address(address) if address else None

    def check(self, jobs: Sequence[Job]) -> None:
        """Ray provides every runtime_env the matrix checked (:func:`environment_problems`)."""

    def __enter__(self) -> "RayExecutor":
        try:
            import ray
        except ImportError:
            raise ExecutorError(f"--executor ray needs Ray on this machine and every node: {INSTALL}") from None
        if self._probe:
            reachable(*self._probe)
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        kw: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
        try:
            if self.address and self._probe and is_loopback(self._probe[0]):  # a cluster on this machine only
                with _loopback():
                    ray.init(address=self.address, _node_ip_address="127.0.0.1", **kw)
            elif self.address:
                ray.init(address=self.address, **kw)
            else:
                self._head = _local_head(ray, self.num_cpus, kw)
                self._watchdog = watch_session(self._head)
        except ConnectionError as e:
            raise ExecutorError(f"cannot join the Ray cluster at {self.address}: {e}; start it with "
                                "`ray start --head`, or fix --address") from None
        return self

    def __exit__(self, *exc: object) -> None:
        import ray

        ray.shutdown()
        if self._head:  # nothing of the local head outlives the run, on disk either
            # the watchdog first: its command line names the head's folder, so end_session would wait out its
            # whole grace for a process that only ever exits with this one, then kill it
            self._watchdog.kill()
            self._watchdog.wait()
            end_session(self._head)
            self._head = None

    def _submit(self, job: Job, attempt: str, verbose: bool, lost: str | None = None,
                avoid: str | None = None) -> _Attempt:
        """Submit one attempt; ``avoid``: a Ray node id it must not run on (the node the last attempt lost)."""
        import ray

        p = job.planned
        options: dict[str, Any] = dict(num_cpus=job.resources.num_cpus, num_gpus=job.resources.num_gpus,
                                       runtime_env=dict(job.runtime_env) if job.runtime_env else None,
                                       max_retries=0, name=p.key)
        if avoid:  # Ray's default node label; '!' is its not-equal selector
            options["label_selector"] = {"ray.io/node-id": f"!{avoid}"}
        task = ray.remote(run_job).options(**options)
        gen = task.remote(p.name, p.source.name, p.source.read_bytes(), p.parameters, p.variant, attempt, verbose)
        return _Attempt(job, attempt, gen, time.perf_counter(), lost)

    def run(self, jobs: Sequence[Job], out: Path, start: Start, verbose: bool = False) -> Iterator[tuple[Job, str, Ran]]:
        import ray

        live = {}
        for job in jobs:
            a = self._submit(job, start(job), verbose)
            live[a.task] = a
        while live:
            deadlines = [a.deadline for a in live.values() if a.deadline is not None]
            wait_s = min([max(0.0, d - time.perf_counter()) for d in deadlines] + [POLL_S])
            ready, _ = ray.wait(list(live), num_returns=1, timeout=wait_s)
            if ready:
                yield from self._take(live.pop(ready[0]), live, start, verbose)
                continue
            yield from self._overdue(live)
            yield from self._ended(live, start, verbose)

    def _take(self, a: _Attempt, live: dict, start: Start, verbose: bool) -> Iterator[tuple[Job, str, Ran]]:
        """The next item of ``a``'s stream: where it started (the job's clock runs from then), its result, or
        why it failed. Neither step blocks for long: ``next()`` on Ray's stream gets the task's return object with no
        timeout, which hangs while that object is lost with its node (ray-project/ray#64014), so the stream is
        read with ``_next_sync(timeout_s=FETCH_S)`` (Ray 2.60, pinned) and each item fetched within FETCH_S; what
        is not there by then went with its node."""
        import ray

        try:
            ref = a.task._next_sync(timeout_s=FETCH_S)
            if ref.is_nil():
                raise _NodeGone(f"GetTimeoutError: the task's stream ended, but how it ended was not readable "
                                f"within {FETCH_S:g} s")
            got = ray.get(ref, timeout=FETCH_S)
        except StopIteration:
            yield a.job, a.attempt, Ran("error", "RuntimeError: the task ended without its result", self._took(a),
                                        a.node, a.lost)
            return
        except Exception as e:  # noqa: BLE001 - Ray wraps each way a task can fail in its own type
            yield from self._failed(a, e, live, start, verbose)
            return
        if a.node is None:  # the first yield: the job started on a.node
            a.node = got
            if self.job_timeout_s:
                a.deadline = time.perf_counter() + self.job_timeout_s
            live[a.task] = a
            return
        yield a.job, a.attempt, Ran(got["status"], got["error"], got["duration_s"], a.node, a.lost, got["files"])

    def _failed(self, a: _Attempt, e: Exception, live: dict, start: Start,
                verbose: bool) -> Iterator[tuple[Job, str, Ran]]:
        """A task that did not finish: retried once elsewhere when its node or worker was lost, else recorded in
        the local executor's words (``Type: message``)."""
        if not _lost(e):
            yield a.job, a.attempt, Ran("error", _why(e), self._took(a), a.node, a.lost)
            return
        retry = self._retry(a, _why(e), start, verbose)
        if retry is not None:
            live[retry.task] = retry
            return
        yield a.job, a.attempt, Ran("error", self._lost_words(a, _why(e)), self._took(a), a.node, a.lost)

    def _overdue(self, live: dict) -> Iterator[tuple[Job, str, Ran]]:
        """Jobs whose time is up: each worker is killed, and nothing of it comes back."""
        import ray

        for a in [a for a in live.values() if a.deadline is not None and a.deadline <= time.perf_counter()]:
            ray.cancel(a.task, force=True)
            del live[a.task]
            yield a.job, a.attempt, Ran(TIMEOUT, timed_out(self.job_timeout_s), self._took(a), a.node, a.lost)

    def _ended(self, live: dict, start: Start, verbose: bool) -> Iterator[tuple[Job, str, Ran]]:
        """Tasks that ended without waking ``ray.wait`` on their stream, seen in a full test run here: Ray
        logged the task NODE_DIED and the driver then waited forever (Ray can leave a failed stream without its
        end, ray-project/ray#62537). Two signs, each read every POLL_S: the task's own completion object holds
        its failure (``completed()``, which a task that never started sets too), or the cluster marked the node
        it started on dead (``ray.nodes``). Each is failed as :meth:`_failed` says: retried once elsewhere."""
        import ray

        dead = {n["NodeID"] for n in ray.nodes() if not n["Alive"]}
        for a in list(live.values()):
            done, _ = ray.wait([a.task.completed()], timeout=0, fetch_local=False)
            if done:
                try:
                    ray.get(done[0], timeout=FETCH_S)
                except Exception as e:  # noqa: BLE001 - the task's failure, as Ray words it
                    del live[a.task]
                    yield from self._failed(a, e, live, start, verbose)
                continue  # it ended well: its last items are still on their way
            if a.node and a.node.get("ray_node") in dead:
                del live[a.task]
                why = "NodeDiedError: its node was marked dead by the cluster (ray.nodes) while the job ran"
                yield from self._failed(a, _NodeGone(why), live, start, verbose)

    def _retry(self, a: _Attempt, why: str, start: Start, verbose: bool) -> _Attempt | None:
        """The job's second attempt, on another node, after its first one's node or worker was lost (``why``);
        None when it was retried once already or no other node could take it."""
        if a.lost is not None:
            return None
        avoid = (a.node or {}).get("ray_node")
        if avoid and not _other_node(avoid, a.job):
            return None
        return self._submit(a.job, start(a.job), verbose, node_lost(_where(a.node), why), avoid)

    @staticmethod
    def _lost_words(a: _Attempt, why: str) -> str:
        words = node_lost(_where(a.node), why)
        if a.lost:
            return f"{words}; retried once already after {a.lost}"
        return f"{words}; no other node has the resources to retry it"

    @staticmethod
    def _took(a: _Attempt) -> float:
        return round(time.perf_counter() - a.submitted, 2)


def _other_node(avoid: str, job: Job) -> bool:
    """Another live node of the cluster could take ``job`` (its CPUs and GPUs), so a retry is not left waiting."""
    import ray

    need = {"CPU": job.resources.num_cpus, "GPU": job.resources.num_gpus}
    return any(n["Alive"] and n["NodeID"] != avoid and all(n["Resources"].get(k, 0) >= v for k, v in need.items() if v)
               for n in ray.nodes())


def _where(node_: Mapping[str, Any] | None) -> str:
    if not node_:
        return "the node (not yet known: the job had not started)"
    return f"node {node_['ray_node']} ({node_['hostname']})"


class _NodeGone(Exception):
    """A node the cluster marked dead under a live attempt: Ray raised nothing, the driver saw it."""

    def __str__(self) -> str:
        return self.args[0]


def _lost(e: Exception) -> bool:
    """Ray gave up on the task because its process, its node or its result went away (the job is retried
    once elsewhere), not because the notebook failed. A result not fetched within FETCH_S counts: it went with
    its node."""
    from ray import exceptions as x

    return isinstance(e, (_NodeGone, x.WorkerCrashedError, x.NodeDiedError, x.ObjectLostError,
                          x.LocalRayletDiedError, x.GetTimeoutError))


_ERRNO = re.compile(r"\[Errno \d+\] [^:'\"\]]+")


def _why(e: Exception) -> str:
    """``Type: first line``. Ray's RuntimeEnvSetupError says only "Failed to set up runtime environment." on its
    first line; the reason is in its last line, or an ``[Errno N]`` buried in a long one (a full disk)."""
    from ray.exceptions import RuntimeEnvSetupError

    if isinstance(e, _NodeGone):
        return str(e)
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    why = f"{type(e).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    if isinstance(e, RuntimeEnvSetupError) and e.error_message and len(lines) > 1:
        errno = _ERRNO.search(e.error_message)
        cause = errno.group(0).strip() if errno else lines[-1]
        why += f" {cause if len(cause) <= 300 else cause[:299] + '…'}"
    return why


def environment_problems(name: str, env: Any) -> list[str]:
    """What is wrong with one matrix environment as a Ray ``runtime_env`` (empty: fine)."""
    if not isinstance(env, Mapping):
        return [f"environments.{name}: must be a mapping with pip, conda or image_uri, got {type(env).__name__}"]
    allowed = {"pip", "conda", "uv", "image_uri", "container", "env_vars", "py_modules", "working_dir"}
    problems = [f"environments.{name}.{k}: unknown runtime_env field (use one of {', '.join(sorted(allowed))})"
                for k in env if k not in allowed]
    if len({"pip", "conda", "uv"} & set(env)) > 1:
        problems.append(f"environments.{name}: pip, conda and uv are exclusive; give one")
    pip = env.get("pip")
    if pip is not None:
        packages = pip.get("packages") if isinstance(pip, Mapping) else pip
        if not isinstance(packages, list) or not all(isinstance(x, str) and x.strip() for x in packages):
            problems.append(f"environments.{name}.pip: a list of requirements (e.g. [\"tensorrt_llm==1.2.0\"]) "
                            "or {packages: [...]}")
    for k in ("conda", "image_uri"):
        if k in env and not isinstance(env[k], (str, Mapping)):
            problems.append(f"environments.{name}.{k}: a name (string) or a mapping")
    return problems
