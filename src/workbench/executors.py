"""Where a run's jobs execute, behind one small interface (as papermill keeps its engines behind one).

A job is one planned notebook (notebook × engine × model × options) plus the environment and resources it
asks for. :func:`workbench.runner.run_batch` plans, resumes and records; an :class:`Executor` only runs
the jobs it is handed and yields each one's outcome. :class:`workbench.runner.LocalExecutor` runs them on this
machine (the default), one after another or each engine's in a lane pinned to cores of its own
(:mod:`workbench.lanes`); :class:`workbench.fleet.RayExecutor` runs them as Ray tasks across a cluster.
A Slurm or Kubernetes executor would be one more subclass (docs/fleet.md says what it takes).
"""

from __future__ import annotations

import abc
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterator, Mapping, Sequence

from .engine import WorkbenchError

#: Engines that need an NVIDIA GPU wherever they run (the subject, in process and served).
GPU_ENGINES = frozenset({"trtllm", "trtllm-serve"})


class ExecutorError(WorkbenchError):
    """A batch this executor cannot run (no cluster, an environment it cannot provide); nothing ran."""


@dataclass(frozen=True)
class Resources:
    """What one job asks its executor for: CPU cores and GPUs (Ray's ``num_cpus`` / ``num_gpus``)."""

    num_cpus: float = 1.0
    num_gpus: float = 0.0


def resources_for(engine: str, cell_options: Mapping[str, Any] | None = None) -> Resources:
    """The rule: TensorRT-LLM takes one GPU; llama.cpp takes one when it offloads layers (``gpu_layers``);
    every other job one CPU core."""
    gpu = engine in GPU_ENGINES or (engine.startswith("llamacpp") and bool((cell_options or {}).get("gpu_layers")))
    return Resources(1.0, 1.0 if gpu else 0.0)


def untimed_here(engine: str) -> bool:
    """Whether ``engine``'s jobs can only report ``not-run`` on this machine, so time nothing: a GPU-only engine
    (:data:`GPU_ENGINES`) where NVML sees no GPU. Known without importing the engine (vLLM's own availability
    check imports vllm, ~15 s)."""
    if engine not in GPU_ENGINES:
        return False
    from . import nvml

    return not nvml.read()["available"]


@dataclass(frozen=True)
class Job:
    """One notebook to execute: ``planned`` (a :class:`workbench.jobs.Planned`), the matrix environment it
    runs in (name and Ray ``runtime_env``; None: the executor's own) and its resources."""

    planned: Any
    resources: Resources = Resources()
    environment: str | None = None
    runtime_env: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Ran:
    """How one job ended. ``files`` (run-folder path → bytes) are what a remote executor brings back for the
    driver to write; the local executor writes into the run folder itself and returns none."""

    status: str  # ok | error | timeout
    error: str | None
    duration_s: float
    node: Mapping[str, Any] | None = None  # where it ran: hostname, GPU, driver
    retried: str | None = None  # why an earlier attempt was given up (a lost node)
    files: Mapping[str, bytes] = field(default_factory=dict)


TIMEOUT = "timeout"


def timed_out(seconds: float) -> str:
    """Why a job over ``--job-timeout`` ended, in every executor's words (``Type: message``, as failures read)."""
    return f"JobTimeout: still running after {seconds:g} s (--job-timeout); stopped, and nothing it wrote is kept"


def node_lost(where: str, why: str) -> str:
    """Why a remote job's attempt was given up: the node or worker running it went away (``where``)."""
    return f"NodeLost: {where} was lost mid-job ({why})"


def local_env(job: Job) -> dict[str, str] | None:
    """The variables of a job's environment where it is made of ``env_vars`` only, which this machine provides
    (set around the job's kernel); None where it asks for more (only Ray builds those); {} for no environment."""
    env = dict(job.runtime_env or {})
    if set(env) - {"env_vars"}:
        return None
    return {str(k): str(v) for k, v in (env.get("env_vars") or {}).items()}


#: Records a job as running under a fresh attempt id (findings.ATTEMPT_ENV) and returns that id.
Start = Callable[[Job], str]


class Executor(abc.ABC):
    """Runs jobs; entering it connects to whatever it runs on, leaving it lets go (nothing outlives it).
    ``job_timeout_s``: a job still running after that long is stopped and ends as ``timeout``
    (:func:`timed_out`); None: no limit."""

    name: ClassVar[str]

    def __init__(self, job_timeout_s: float | None = None) -> None:
        if job_timeout_s is not None and not 0 < job_timeout_s <= threading.TIMEOUT_MAX:
            raise ExecutorError(f"--job-timeout {job_timeout_s:g}: give a number of seconds above 0 and at most "
                                f"{threading.TIMEOUT_MAX:g} (the longest wait this platform's timers take)")
        self.job_timeout_s = job_timeout_s

    def check(self, jobs: Sequence[Job]) -> None:
        """Refuse, before anything runs, jobs this executor cannot honour (:class:`ExecutorError`). This machine
        provides an environment made of ``env_vars`` only (:func:`local_env`); any other is a Ray runtime_env."""
        envs = sorted({j.environment for j in jobs if j.runtime_env and local_env(j) is None})
        if envs:
            raise ExecutorError(f"environments ({', '.join(envs)}) are Ray runtime_envs (pip, conda, uv, an image…): "
                                "run the matrix with --executor ray, or drop its environments (one of env_vars "
                                "only runs here)")

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    @abc.abstractmethod
    def run(self, jobs: Sequence[Job], out: Path, start: Start, verbose: bool = False) -> Iterator[tuple[Job, str, Ran]]:
        """Run every job (``start`` each one as it begins), yielding (job, attempt id, outcome) as each ends."""
