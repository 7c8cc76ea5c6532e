"""Running one notebook job: a planned notebook (:class:`Planned`) executed by papermill in a kernel of its own,
its findings marked with the attempt's id, its output in its log, stopped at its deadline (:func:`execute`).

The batch runner (:mod:`workbench.runner`) plans, resumes and records; the executors run jobs where they run (the
local one on this machine, :mod:`workbench.fleet` as Ray tasks): each of them runs one job through this module, so
this module imports neither of them.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from . import envvars, progress
from .executors import TIMEOUT, timed_out
from .findings import ATTEMPT_ENV

KERNEL = "python3"  # jupyter_client runs this spec's "python" as sys.executable: the runner's own venv


@dataclass(frozen=True)
class Planned:
    """A notebook to run and the exact parameters it gets (what resume compares)."""

    name: str
    source: Path
    parameters: dict
    variant: str = ""  # a run matrix's model / options / environment, where it has several (workbench.matrix)
    per_batch: str = ""  # "first" / "last": the notebook covers the whole batch, not one engine (PER_BATCH)

    @property
    def _folder(self) -> str:
        return "/".join(filter(None, (self.parameters["engine"], self.variant)))

    @property
    def key(self) -> str:
        """Manifest key: one entry per (engine, variant, notebook), so engines share a run folder side by side."""
        return f"{self._folder}/{self.name}"

    @property
    def output(self) -> str:
        """The executed notebook, relative to the run folder."""
        return f"notebooks/{self._folder}/{self.source.name}"

    @property
    def log(self) -> str:
        """What the notebook's kernel and its engines printed, relative to the run folder."""
        return f"logs/{self._folder}/{self.name}.log"


#: How long jupyter_client lets a kernel finish after its shutdown request (half of it, then SIGTERM to the
#: kernel's process group, then SIGKILL). Its 5 s default cost 2.5 s per notebook: at shutdown ipykernel
#: SIGTERMs every process in its group and sleeps until none is left, but multiprocessing's resource tracker
#: ignores SIGTERM and an unreaped forkserver stays a zombie, so it never sees none (ipykernel/kernelbase.py,
#: ``_progressively_terminate_all_children``). Every cell has finished and its output is in by then.
KERNEL_SHUTDOWN_WAIT_S = 1.0


@functools.cache
def kernel_manager() -> type:
    """Kernels whose TCP sockets are CurveZMQ-encrypted when the kernel supports it (ipykernel warns otherwise),
    given :data:`KERNEL_SHUTDOWN_WAIT_S` to exit once their notebook is done."""
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import default

    class EncryptedKernelManager(AsyncKernelManager):
        @default("transport_encryption")
        def _auto(self) -> str:
            import zmq

            return "auto" if zmq.has("curve") else "disabled"

        @default("shutdown_wait_time")
        def _short_wait(self) -> float:
            return KERNEL_SHUTDOWN_WAIT_S

    return EncryptedKernelManager


def _logged_kernel_manager(fd: int, launched: list[int] | None = None) -> type:
    """The kernel manager with the kernel's stdout and stderr on ``fd``: every process it starts (an engine's
    worker, a probe's child) inherits them, so engine logs land there and not on the runner's console. The
    kernel's pid goes into ``launched`` (it leads a session of its own: jupyter_client starts it so)."""

    class LoggedKernelManager(kernel_manager()):
        async def _async_launch_kernel(self, kernel_cmd: list[str], **kw: Any) -> None:
            await super()._async_launch_kernel(kernel_cmd, **(kw | {"stdout": fd, "stderr": fd}))
            if launched is not None:
                launched.append(self.provisioner.pid)

    return LoggedKernelManager


@contextlib.contextmanager
def _deadline(timeout_s: float | None, kernels: list[int]) -> Iterator[threading.Event]:
    """After ``timeout_s``, SIGKILL the session of each kernel in ``kernels`` (the kernel and what it started);
    the event says it happened. papermill then fails the notebook, which :func:`execute` reports as a timeout."""
    fired = threading.Event()

    def expire() -> None:
        fired.set()
        for pid in kernels:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)

    timer = threading.Timer(timeout_s, expire) if timeout_s else None
    if timer:
        timer.daemon = True
        timer.start()
    try:
        yield fired
    finally:
        if timer:
            timer.cancel()


@contextlib.contextmanager
def engine_log(path: Path, echo: bool = False) -> Iterator[int]:
    """A file descriptor for a kernel's output, written to ``path``; with ``echo`` copied to this
    process's stderr too (``workbench run -v``), line by line, so a progress bar stays above it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as log:
        if not echo:
            yield log.fileno()
            return
        read, write = os.pipe()

        def pump() -> None:
            with os.fdopen(read, "rb") as src:
                for line in src:
                    log.write(line)
                    log.flush()
                    sys.stderr.write(line.decode(errors="replace"))

        copier = threading.Thread(target=pump, name="engine-log", daemon=True)
        copier.start()
        try:
            yield write
        finally:
            os.close(write)
            copier.join(timeout=5)  # an engine process that outlives its kernel keeps the pipe open


def execute(p: Planned, out: Path, attempt: str, verbose: bool = False,
            timeout_s: float | None = None) -> tuple[str, str | None]:
    """Run one notebook in its own kernel, its findings marked with ``attempt`` and its output in the
    notebook's log; (status, error). A notebook still running after ``timeout_s`` has its kernel killed and
    ends as ``timeout``."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    kernels: list[int] = []
    with _deadline(timeout_s, kernels) as expired:
        try:
            (out / p.output).parent.mkdir(parents=True, exist_ok=True)
            # the executed copy's path, as Jupyter tells a kernel its notebook's (its output's relative links)
            with envvars.scoped({ATTEMPT_ENV: attempt, envvars.NOTEBOOK: str((out / p.output).resolve()),
                                 progress.ENV: str(progress.path_for((out / p.log).resolve()))}), \
                    engine_log(out / p.log, echo=verbose) as fd:
                papermill.execute_notebook(str(p.source), str(out / p.output), parameters=p.parameters,
                                           kernel_name=KERNEL, progress_bar=False, cwd=str(p.source.parent),
                                           kernel_manager_class=_logged_kernel_manager(fd, kernels))
            status, error = "ok", None
        except PapermillExecutionError as e:
            status, error = "error", f"{e.ename}: {e.evalue} (cell {e.exec_count})"
        except Exception as e:  # a kernel that dies or never starts fails this notebook, not the batch
            status, error = "error", f"{type(e).__name__}: {e}"
    with contextlib.suppress(OSError):  # what it was doing is over
        progress.path_for(out / p.log).unlink()
    if expired.is_set():
        return TIMEOUT, timed_out(timeout_s)
    return status, error
