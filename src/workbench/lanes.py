"""Lanes: the local executor's engines side by side, each in a child process pinned to cores of its own.

One batch over several engines ran every notebook one after another, so on 2 cores it took the sum of all of them
(``make run``: 11 min 51 s). Run each engine's notebooks in its own lane instead, each lane pinned to a disjoint set
of cores, and the batch takes about its longest lane, while no two timed jobs ever share a core: a timing taken in
a lane is one taken on that lane's cores alone (docs/timing.md says what they still share: memory bandwidth, L3).

A lane is a process the batch's driver spawns and pins (``os.sched_setaffinity``) before it starts anything, so its
engine's shared forkserver, every notebook kernel and every server or child they start inherit the pinning, and every
default of "all cores" means the lane's (:func:`workbench.cpu.usable_count`). It runs its jobs in order as the local
executor does (:func:`workbench.runner.in_turn`), in its own ``os.environ``. The driver keeps the manifest and the
console: a lane asks it before each job (which gives the attempt its id) and reports each outcome over a pipe.

Nothing outlives the batch: a Ctrl-C reaches the lanes (with the driver's process group, or from the driver when
it alone was interrupted), each ends its notebook's kernel and its forkserver as a one-lane batch does, and a lane
still there after :data:`STOP_GRACE_S` is killed (its kernels and forkserver end with their parent). A lane that
dies mid-batch fails its notebook and the ones it had not started, saying so (:func:`lost`); the others go on.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from . import cpu
from .executors import ExecutorError, Job, Ran, Start

#: How a lane runs its jobs: :func:`workbench.runner.in_turn` (jobs, run folder, start, verbose, timeout, untimed).
InTurn = Callable[..., Iterator[tuple[Job, str, Ran]]]
AUTO = "auto"
#: The lanes of the running batch, as JSON (:func:`describe`): what the environment survey records.
LANES_ENV = "WORKBENCH_LANES"
#: The lane a process runs in (``{"lane": i, "cpus": [...]}``), set in each lane for what it starts.
LANE_ENV = "WORKBENCH_LANE"
#: Seconds an interrupted lane gets to end its kernel and forkserver before it is killed.
STOP_GRACE_S = 30.0


@dataclass(frozen=True)
class Lane:
    """One lane: its number and the cores it is pinned to."""

    index: int
    cpus: tuple[int, ...]

    @property
    def where(self) -> dict[str, Any]:
        """What the manifest records of a notebook run in this lane (``node``)."""
        return {"lane": self.index, "cpus": list(self.cpus)}

    def __str__(self) -> str:
        return f"lane {self.index} (cores {spans(self.cpus)})"


def spans(cpus: Sequence[int]) -> str:
    """Core numbers as ``0-3,6``."""
    out: list[str] = []
    for c in sorted(cpus):
        if out and out[-1].split("-")[-1] == str(c - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{c}"
        else:
            out.append(str(c))
    return ",".join(out)


def parse(value: str | int) -> int | None:
    """``--lanes``: ``auto`` (None: one per engine with timed work, as many as the cores allow) or a whole number
    of lanes, at least 1 (one notebook at a time) and at most the cores this process may use."""
    text = str(value).strip().lower()
    if text == AUTO:
        return None
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise ExecutorError(f"--lanes {value}: give auto or a whole number of lanes of at least 1 "
                            "(1: one notebook at a time)")
    cpus = cpu.usable()
    if n > 1 and cpus is not None and n > len(cpus):
        raise ExecutorError(f"--lanes {value}: this process may use {len(cpus)} core(s) ({spans(cpus)}) and each "
                            f"lane needs one of its own; give at most {len(cpus)}, or auto")
    return n


def plan(requested: int | None, engines: int) -> tuple[list[Lane], str | None]:
    """The lanes for a batch whose timed jobs are on ``engines`` engines (``requested`` None: auto), each with
    ``cores // lanes`` cores of its own; [] for one lane (one notebook at a time), with the reason to say once
    where lanes were asked for and cannot be had."""
    if requested == 1 or (requested is None and engines < 2):  # nothing to run side by side
        return [], None
    cpus = cpu.usable()
    if cpus is None or not hasattr(os, "sched_setaffinity"):
        return [], "lanes:     1 (this platform cannot pin a process to cores; one notebook at a time)"
    if len(cpus) < 2:
        return [], f"lanes:     1 (this process may use one core, {spans(cpus)}; one notebook at a time)"
    n = min(engines if requested is None else requested, len(cpus))
    if n < 2:
        return [], None
    each = len(cpus) // n
    return [Lane(i, cpus[i * each:(i + 1) * each]) for i in range(n)], None


def describe(lanes: Sequence[Lane]) -> str:
    """The value of :data:`LANES_ENV` for ``lanes``."""
    return json.dumps([lane.where for lane in lanes])


def here() -> list[dict[str, Any]]:
    """The running batch's lanes as :data:`LANES_ENV` gives them ([] outside a laned batch, or a garbled value)."""
    try:
        lanes = json.loads(os.environ.get(LANES_ENV) or "[]")
    except ValueError:
        return []
    return lanes if isinstance(lanes, list) else []


def _engine(job: Job) -> str:
    return str(job.planned.parameters.get("engine", ""))


def assign(jobs: Sequence[Job], n: int, untimed: frozenset[str]) -> list[list[Job]]:
    """``jobs`` (none covering the whole batch) into ``n`` lanes: each timed engine's jobs, in the batch's order, to
    the lane with the fewest so far; the jobs of the ``untimed`` engines (which time nothing) dealt out in turn and
    put first in their lane, where they run while its forkserver imports (:class:`workbench.runner._Forkservers`)."""
    queues: list[list[Job]] = [[] for _ in range(n)]
    engines = dict.fromkeys(_engine(j) for j in jobs if _engine(j) not in untimed)
    for engine in engines:
        min(queues, key=len).extend(j for j in jobs if _engine(j) == engine)
    for i, job in enumerate(j for j in jobs if _engine(j) in untimed):
        queues[i % n].insert(sum(_engine(j) in untimed for j in queues[i % n]), job)
    return queues


def _interrupt_once(signum: int, frame: Any) -> None:
    """A lane's first SIGINT interrupts it; a second (the driver passing on a Ctrl-C the lane already had) must not
    cut short its way out (its kernel's and forkserver's shutdown)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def _lane(conn: Any, lane: Lane, in_turn: InTurn, jobs: list[Job], out: Path, verbose: bool, timeout_s: float | None,
          untimed: frozenset[str]) -> None:
    """A lane's process: pinned first, then its jobs in order (``in_turn``), each started by the driver and reported
    to it."""
    os.sched_setaffinity(0, lane.cpus)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # an inherited ignore stays (the driver's)
        signal.signal(signal.SIGINT, _interrupt_once)
    os.environ[LANE_ENV] = json.dumps(lane.where)
    index = {id(job): i for i, job in enumerate(jobs)}

    def start(job: Job) -> str:
        conn.send(("start", index[id(job)], None))
        return conn.recv()

    try:
        for job, attempt, ran in in_turn(jobs, out, start, verbose, timeout_s, untimed):
            conn.send(("ran", index[id(job)], (attempt, ran)))
    except (KeyboardInterrupt, EOFError, BrokenPipeError):  # interrupted, or the driver is gone: out, quietly
        sys.exit(130)


@dataclass
class _Running:
    """A lane's process as the driver sees it: its pipe, its jobs, which one runs (index, attempt, start time)."""

    lane: Lane
    proc: Any
    conn: Any
    jobs: list[Job]
    current: tuple[int, str, float] | None = None
    done: set[int] = field(default_factory=set)


def run(lanes: Sequence[Lane], in_turn: InTurn, jobs: Sequence[Job], out: Path, start: Start, verbose: bool = False,
        timeout_s: float | None = None, untimed: frozenset[str] = frozenset()) -> Iterator[tuple[Job, str, Ran]]:
    """Run ``jobs`` in ``lanes`` side by side (:func:`assign`), each lane its share through ``in_turn`` (a module's
    function: it travels to the lane by name), yielding (job, attempt id, outcome) as each ends; the outcome's
    ``node`` names the lane and its cores."""
    ctx = multiprocessing.get_context("spawn")  # the driver has threads (the progress bar's): no fork
    live: list[_Running] = []
    try:
        for lane, queue in zip(lanes, assign(jobs, len(lanes), untimed)):
            if queue:
                mine, theirs = ctx.Pipe()
                proc = ctx.Process(target=_lane, args=(theirs, lane, in_turn, queue, out, verbose, timeout_s, untimed),
                                   name=f"workbench-lane-{lane.index}")
                proc.start()
                theirs.close()
                with contextlib.suppress(OSError):  # pinned from here on, as it pins itself once it runs
                    os.sched_setaffinity(proc.pid, lane.cpus)
                live.append(_Running(lane, proc, mine, queue))
        while live:
            ready = multiprocessing.connection.wait([r.conn for r in live] + [r.proc.sentinel for r in live])
            for r in [r for r in live if r.conn in ready or r.proc.sentinel in ready]:
                if (yield from _serve(r, start)):
                    continue
                r.proc.join()
                live.remove(r)
                yield from lost(r, start)
    finally:
        stop(live)


def _serve(r: _Running, start: Start) -> Iterator[tuple[Job, str, Ran]]:
    """Answer what lane ``r`` sent; returns False once it has ended (its pipe closed)."""
    try:
        while r.conn.poll():
            kind, i, body = r.conn.recv()
            if kind == "start":
                attempt = start(r.jobs[i])
                r.current = (i, attempt, time.perf_counter())
                r.conn.send(attempt)
            else:
                attempt, ran = body
                r.current = None
                r.done.add(i)
                yield r.jobs[i], attempt, replace(ran, node=r.lane.where)
    except (EOFError, OSError):
        return False
    return r.proc.is_alive()


def _ended(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
        return f"was killed by signal {-code}"
    return f"exited with code {code}"


def lost(r: _Running, start: Start) -> Iterator[tuple[Job, str, Ran]]:
    """The jobs a lane that ended left unfinished, each failed with why: the one it was running, and (each started
    here, so the manifest shows it) the ones it never began. A lane that ran all of its jobs leaves none."""
    why = f"LaneLost: {r.lane} {_ended(r.proc.exitcode)}"
    for i, job in enumerate(r.jobs):
        if i in r.done:
            continue
        if r.current is not None and r.current[0] == i:
            attempt, took = r.current[1], time.perf_counter() - r.current[2]
            yield job, attempt, Ran("error", f"{why} while this notebook ran", round(took, 2), node=r.lane.where)
        else:
            yield job, start(job), Ran("error", f"{why} before this notebook began", 0.0, node=r.lane.where)


def stop(live: Sequence[_Running]) -> None:
    """End every lane still running: SIGINT (a Ctrl-C the driver alone had), :data:`STOP_GRACE_S` to end its
    kernel and forkserver, then SIGKILL."""
    for r in live:
        if r.proc.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(r.proc.pid, signal.SIGINT)
    deadline = time.monotonic() + STOP_GRACE_S
    for r in live:
        r.proc.join(max(0.0, deadline - time.monotonic()))
        if r.proc.is_alive():
            r.proc.kill()
            r.proc.join()
        r.conn.close()
