"""``workbench run --executor ray``: the run's jobs as Ray tasks across a group's machines.

Each job is one Ray task asking for the engine's resources (:func:`workbench.executors.resources_for`) in
its matrix environment (a Ray ``runtime_env``). The task runs the local executor's papermill execution
(:func:`workbench.runner._execute`) in a temporary folder on whichever node takes it, and returns the
executed notebook, its findings and its engine log as bytes: no shared filesystem is assumed. A task whose
node or worker is lost mid-job is submitted once more under a new attempt id; the lost attempt brought
nothing back, so no finding is ever counted twice. Ray's dashboard and usage stats stay off; a local head
binds 127.0.0.1 and stops with the run.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from .executors import Executor, ExecutorError, Job, Ran, Start

INSTALL = "pip install 'workbench[fleet]' (ray==2.60.0)"
_ADDRESS = re.compile(r"^(?:ray://)?(?P<host>[A-Za-z0-9.\-]+|\[[0-9a-fA-F:]+\]):(?P<port>\d{1,5})$")
#: Why Ray gives up on a task whose process or node went away: the job is retried once elsewhere.
_LOST = ("WorkerCrashedError", "NodeDiedError", "ObjectLostError", "OwnerDiedError", "ObjectFetchTimedOutError",
         "LocalRayletDiedError")


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
            verbose: bool) -> dict:
    """The Ray task: the local executor's execution in a scratch run folder; everything it wrote as bytes."""
    from . import runner

    with tempfile.TemporaryDirectory(prefix="wb-job-") as tmp:
        source, run = Path(tmp) / "src" / file_name, Path(tmp) / "run"
        source.parent.mkdir()
        source.write_bytes(notebook)
        (run / "findings").mkdir(parents=True)
        os.environ["WORKBENCH_SERVER_LOGS"] = str(run / "servers")
        os.environ["JUPYTER_PATH"] = _own_kernel(Path(tmp) / "jupyter")
        p = runner.Planned(name, source, parameters | {"out": str(run / "findings")}, variant)
        t0 = time.perf_counter()
        status, error = runner._execute(p, run, attempt, verbose)
        took = round(time.perf_counter() - t0, 2)
        files = {str(f.relative_to(run)): f.read_bytes() for f in sorted(run.rglob("*")) if f.is_file()}
    return {"status": status, "error": error, "duration_s": took, "node": node(), "files": files}


def _local_head(ray: Any, num_cpus: int | None, kw: dict, tries: int = 3) -> str:
    """A one-machine cluster on 127.0.0.1 in its own temp folder (under RAY_TMPDIR), which it returns. Its raylet
    gives the dashboard agent 15 s to report its ports and aborts otherwise, which a busy machine can miss
    (``import ray.dashboard.agent`` took 12 s on 2 shared cores here): a failed start is cleaned up and tried
    again, up to ``tries`` times."""
    for n in range(1, tries + 1):
        temp = tempfile.mkdtemp(prefix="wbray-", dir=os.environ.get("RAY_TMPDIR") or "/tmp")
        try:
            ray.init(num_cpus=num_cpus, _node_ip_address="127.0.0.1", _temp_dir=temp, **kw)
            return temp
        except Exception as e:  # noqa: BLE001 - Ray raises a bare Exception when its node times out at start
            ray.shutdown()
            stop_session(temp)
            if n == tries or "timed out during startup" not in str(e):
                raise ExecutorError(f"the local Ray head did not start ({e}); free some CPU, or start one with "
                                    "`ray start --head` and pass --address") from None
    raise AssertionError("unreachable")


def stop_session(temp: str, grace_s: float = 20.0) -> list[int]:
    """End every process of the local head whose temp folder is ``temp`` (its command line names it): given
    ``grace_s`` to exit after ``ray.shutdown()``, then killed. Returns the pids that had to be killed."""
    import psutil

    mine = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(temp in part for part in proc.info["cmdline"] or []):
                mine.append(proc)
        except (psutil.Error, TypeError):
            continue
    _, left = psutil.wait_procs(mine, timeout=grace_s)
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    return [proc.pid for proc in left]


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


class RayExecutor(Executor):
    """Jobs as Ray tasks on the cluster at ``address`` (None: a local head with ``num_cpus`` cores, stopped
    when the run ends)."""

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None) -> None:
        self.address, self.num_cpus = address, num_cpus
        self._head: str | None = None  # the local head's temp folder, while it runs
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
            if self.address:
                ray.init(address=self.address, **kw)
            else:
                self._head = _local_head(ray, self.num_cpus, kw)
        except ConnectionError as e:
            raise ExecutorError(f"cannot join the Ray cluster at {self.address}: {e}; start it with "
                                "`ray start --head`, or fix --address") from None
        return self

    def __exit__(self, *exc: object) -> None:
        import ray

        ray.shutdown()
        if self._head:  # nothing of the local head outlives the run
            stop_session(self._head)
            self._head = None

    def _submit(self, job: Job, attempt: str, verbose: bool) -> Any:
        import ray

        p = job.planned
        task = ray.remote(run_job).options(num_cpus=job.resources.num_cpus, num_gpus=job.resources.num_gpus,
                                           runtime_env=dict(job.runtime_env) if job.runtime_env else None,
                                           max_retries=0, name=p.key)
        return task.remote(p.name, p.source.name, p.source.read_bytes(), p.parameters, p.variant, attempt, verbose)

    def run(self, jobs: Sequence[Job], out: Path, start: Start, verbose: bool = False) -> Iterator[tuple[Job, str, Ran]]:
        import ray

        waiting = {}
        for job in jobs:
            attempt = start(job)
            waiting[self._submit(job, attempt, verbose)] = (job, attempt, None, time.perf_counter())
        while waiting:
            (ref,), _ = ray.wait(list(waiting), num_returns=1)
            job, attempt, lost, t0 = waiting.pop(ref)
            try:
                got = ray.get(ref)
            except Exception as e:  # noqa: BLE001 - Ray wraps each way a task can fail in its own type
                reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                if type(e).__name__ in _LOST and lost is None:  # once more, on whichever node is left
                    retry = start(job)
                    waiting[self._submit(job, retry, verbose)] = (job, retry, f"node lost mid-job ({reason})", t0)
                    continue
                yield job, attempt, Ran("error", _words(e, lost), round(time.perf_counter() - t0, 2), retried=lost)
                continue
            yield job, attempt, Ran(got["status"], got["error"], got["duration_s"], got["node"], lost, got["files"])


def _words(e: Exception, lost: str | None) -> str:
    """A task that did not finish, in the local executor's words: ``Type: message``."""
    first = next((line for line in str(e).splitlines() if line.strip()), "")
    if type(e).__name__ in _LOST:
        return f"NodeLost: {type(e).__name__}: {first}" + (f" (after {lost}; retried once)" if lost else "")
    return f"{type(e).__name__}: {first}"


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
