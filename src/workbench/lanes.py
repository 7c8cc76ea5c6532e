"""Lanes: the local executor's engines side by side, each in a child process pinned to cores of its own.

One batch over several engines ran every notebook one after another, so on 2 cores it took the sum of all of them
(``make run``: 11 min 51 s). Run each engine's notebooks in its own lane instead, each lane pinned to a disjoint set
of cores, and the batch takes about its longest lane, while no two timed jobs ever share a core: a timing taken in
a lane is one taken on that lane's cores alone (docs/timing.md says what they still share: memory bandwidth, L3).

A lane is a process the batch's driver spawns and pins (``os.sched_setaffinity``) before it starts anything, so its
engine's shared forkserver, every notebook kernel and every server or child they start inherit the pinning, and every
default of "all cores" means the lane's (:func:`workbench.cpu.usable_count`). The driver deals the jobs and keeps
the manifest and the console: a lane asks it which job to run next (:class:`Deal`: an untimed one while the lane's
forkserver imports, else its own queue's next, else the last of the busiest lane's), runs it as the local executor
does (:func:`workbench.runner.in_turn`) in its own ``os.environ``, asks again to start it (which gives the attempt
its id) and reports its outcome over a pipe, until told there is none left. A job taken from another lane runs on
the taking lane's cores, through a forkserver for its engine that lane starts then: no two timed jobs share a core
either way. Taking jobs out of order is safe because no notebook reads another's output (each writes its own
findings and files; the summary, which reads them all, runs after the lanes), so an engine's jobs need no order.

Nothing outlives the batch: a Ctrl-C or SIGTERM reaches the lanes (with the driver's process group, or from the
driver when it alone was interrupted; a lane dies with its driver, :func:`workbench.lifecycle.die_with_parent`), each ends its notebook's kernel and its forkserver as a one-lane batch does, and a lane
still there after :data:`STOP_GRACE_S` is killed (its kernels and forkserver end with their parent). A lane that
dies mid-batch fails the notebook it was dealt and those left in its own queue, saying so (:func:`lost`; the last
lane to go, all that are left); the others go on.
"""

from __future__ import annotations

import collections
import contextlib
import json
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from . import cpu, lifecycle
from .cpu import spans
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
    groups = cpu.cores()
    if n > 1 and groups is not None and n > len(groups):
        raise ExecutorError(f"--lanes {value}: this process may use {len(groups)} physical core(s) "
                            f"({spans([c for g in groups for c in g])}) and each lane needs one of its own; give at "
                            f"most {len(groups)}, or auto")
    return n


def plan(requested: int | None, engines: int) -> tuple[list[Lane], str | None]:
    """The lanes for a batch whose timed jobs are on ``engines`` engines (``requested`` None: auto), each with
    ``cores // lanes`` cores of its own; [] for one lane (one notebook at a time), with the reason to say once
    where lanes were asked for and cannot be had."""
    if requested == 1 or (requested is None and engines < 2):  # nothing to run side by side
        return [], None
    groups = cpu.cores()  # whole physical cores: hyperthreads of one core would share it between two lanes
    if groups is None or not hasattr(os, "sched_setaffinity"):
        return [], "lanes:     1 (this platform cannot pin a process to cores; one notebook at a time)"
    if len(groups) < 2:
        return [], (f"lanes:     1 (this process may use one physical core, CPUs {spans(groups[0] if groups else ())}; "
                    "one notebook at a time)")
    n = min(engines if requested is None else requested, len(groups))
    if n < 2:
        return [], None
    each = len(groups) // n
    return [Lane(i, tuple(c for g in groups[i * each:(i + 1) * each] for c in g)) for i in range(n)], None


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
    """The timed jobs of ``jobs`` (none covering the whole batch) into ``n`` lanes, their home queues: each timed
    engine's jobs, in the batch's order, to the lane with the fewest so far. The ``untimed`` engines' jobs are in
    none: :class:`Deal` hands them out."""
    queues: list[list[Job]] = [[] for _ in range(n)]
    engines = dict.fromkeys(_engine(j) for j in jobs if _engine(j) not in untimed)
    for engine in engines:
        min(queues, key=len).extend(j for j in jobs if _engine(j) == engine)
    return queues


class Deal:
    """The driver's hand: which job a lane runs next (by index in ``jobs``), asked before each one.

    1. An untimed job (the ``untimed`` engines' jobs: not-run findings only, nothing timed) to a lane whose
       forkserver is still importing: it would only wait there, and the import is on its cores anyway. Measured,
       not guessed: on ``make run`` vLLM's lane waits ~20 s for its import and llama.cpp's ~2 s, so vLLM's lane takes
       most of them, and a lane whose forkserver is ready goes straight to its timed jobs.
    2. Else the next of the lane's own queue (:func:`assign`), from its head, in the batch's order.
    3. Else an untimed job left over, then the LAST not-yet-started job of the lane with the most jobs left (work
       stealing: its owner keeps its order from the head), where it has two or more: its owner is busy with one,
       and taking its only one would at best save the rest of that one, paying a forkserver's imports for it. The
       taker runs it on its own cores, through a forkserver for its engine of its own. Jobs left is the measure, as
       no job's duration is known before it runs.
    4. Else none: the lane ends."""

    def __init__(self, jobs: Sequence[Job], n: int, untimed: frozenset[str]) -> None:
        self.jobs = list(jobs)
        at = {id(j): i for i, j in enumerate(self.jobs)}
        self.queues = [collections.deque(at[id(j)] for j in q) for q in assign(self.jobs, n, untimed)]
        self.pool = collections.deque(i for i, j in enumerate(self.jobs) if _engine(j) in untimed)

    def next(self, lane: int, ready: bool) -> int | None:
        """The job lane ``lane`` runs next (``ready``: whether its forkservers have done their imports), or None."""
        if self.pool and not ready:
            return self.pool.popleft()
        if self.queues[lane]:
            return self.queues[lane].popleft()
        if self.pool:
            return self.pool.popleft()
        most = max(self.queues, key=len)
        return most.pop() if len(most) > 1 else None

    def drop(self, lane: int, last: bool) -> list[int]:
        """The jobs that lane ``lane``, gone, leaves undone: its own queue's, and with the ``last`` lane everything."""
        left = [*self.queues[lane], *((*self.pool, *(i for q in self.queues for i in q)) if last else ())]
        for q in (self.queues[lane], *((self.pool, *self.queues) if last else ())):
            q.clear()
        return list(dict.fromkeys(left))


def _lane(conn: Any, lane: Lane, in_turn: InTurn, jobs: list[Job], home: list[int], out: Path, verbose: bool,
          timeout_s: float | None, untimed: frozenset[str]) -> None:
    """A lane's process: pinned first, then the jobs the driver deals it (its ``home`` queue's forkservers start at
    once), each run through ``in_turn``, started by the driver and reported to it."""
    os.sched_setaffinity(0, lane.cpus)
    # the first SIGINT or SIGTERM interrupts the lane; a second (the driver passing on a Ctrl-C the lane already had)
    # must not cut short its way out (its kernel's and forkserver's shutdown). The driver started it with them
    # blocked, so none came while it imported (a traceback on the console); it dies with the driver
    lifecycle.handle_signals(repeat="ignore")
    lifecycle.die_with_parent(signal.SIGTERM, getattr(multiprocessing.parent_process(), "pid", None))
    lifecycle.unblock()
    os.environ[LANE_ENV] = json.dumps(lane.where)
    index = {id(job): i for i, job in enumerate(jobs)}

    def deal(ready: bool) -> tuple[Job, list[Job]] | None:
        conn.send(("next", None, ready))
        got = conn.recv()
        return None if got is None else (jobs[got[0]], [jobs[i] for i in got[1]])

    def start(job: Job) -> str:
        conn.send(("start", index[id(job)], None))
        return conn.recv()

    try:
        for job, attempt, ran in in_turn(Dealt(deal, [jobs[i] for i in home], lane.index), out, start, verbose,
                                         timeout_s, untimed):
            conn.send(("ran", index[id(job)], (attempt, ran)))
    except (KeyboardInterrupt, EOFError, BrokenPipeError):  # interrupted, or the driver is gone: out, quietly
        sys.exit(130)


@dataclass(frozen=True)
class Dealt:
    """Jobs dealt one at a time (:class:`Deal`): ``deal(ready)`` gives the next and the lane's own left after it,
    or None; ``home`` is the lane's own queue as it starts, whose forkservers start with the lane; ``lane`` its
    number (its forkservers' logs name it)."""

    deal: Callable[[bool], tuple[Job, list[Job]] | None]
    home: list[Job]
    lane: int


@dataclass
class _Running:
    """A lane's process as the driver sees it: its pipe, and the job it was dealt (index, attempt once started,
    start time)."""

    lane: Lane
    proc: Any
    conn: Any
    current: tuple[int, str | None, float] | None = None


def run(lanes: Sequence[Lane], in_turn: InTurn, jobs: Sequence[Job], out: Path, start: Start, verbose: bool = False,
        timeout_s: float | None = None, untimed: frozenset[str] = frozenset()) -> Iterator[tuple[Job, str, Ran]]:
    """Run ``jobs`` in ``lanes`` side by side, each lane the jobs the driver deals it (:class:`Deal`) through
    ``in_turn`` (a module's function: it travels to the lane by name), yielding (job, attempt id, outcome) as each
    ends; the outcome's ``node`` names the lane that ran it and its cores."""
    ctx = multiprocessing.get_context("spawn")  # the driver has threads (the progress bar's): no fork
    deal = Deal(jobs, len(lanes), untimed)
    live: list[_Running] = []
    try:
        for lane, home in zip(lanes, deal.queues):
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(target=_lane, args=(theirs, lane, in_turn, deal.jobs, list(home), out, verbose,
                                                   timeout_s, untimed), name=f"workbench-lane-{lane.index}")
            with lifecycle.blocked():  # until the lane's own handlers are in place (_lane)
                proc.start()
            theirs.close()
            with contextlib.suppress(OSError):  # pinned from here on, as it pins itself once it runs
                os.sched_setaffinity(proc.pid, lane.cpus)
            live.append(_Running(lane, proc, mine))
        while live:
            ready = multiprocessing.connection.wait([r.conn for r in live] + [r.proc.sentinel for r in live])
            for r in [r for r in live if r.conn in ready or r.proc.sentinel in ready]:
                if (yield from _serve(r, deal, start)):
                    continue
                r.proc.join()
                live.remove(r)
                yield from lost(r, deal, start, last=not live)
    finally:
        stop(live)


def _serve(r: _Running, deal: Deal, start: Start) -> Iterator[tuple[Job, str, Ran]]:
    """Answer what lane ``r`` sent; returns False once it has ended (its pipe closed)."""
    try:
        while r.conn.poll():
            kind, i, body = r.conn.recv()
            if kind == "next":
                i = deal.next(r.lane.index, body)
                r.current = None if i is None else (i, None, time.perf_counter())
                r.conn.send(None if i is None else (i, list(deal.queues[r.lane.index])))
            elif kind == "start":
                attempt = start(deal.jobs[i])
                r.current = (i, attempt, time.perf_counter())
                r.conn.send(attempt)
            else:
                attempt, ran = body
                r.current = None
                yield deal.jobs[i], attempt, replace(ran, node=r.lane.where)
    except (EOFError, OSError):
        return False
    return r.proc.is_alive()


def _ended(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
        return f"was killed by signal {-code}"
    return f"exited with code {code}"


def lost(r: _Running, deal: Deal, start: Start, last: bool) -> Iterator[tuple[Job, str, Ran]]:
    """The jobs a lane that ended left unfinished, each failed with why: the one it was dealt (running or not yet
    begun), and (each started here, so the manifest shows it) those of its own queue, with the ``last`` lane all
    that are left. A lane that ran all it was dealt, told there was none left, leaves none."""
    why = f"LaneLost: {r.lane} {_ended(r.proc.exitcode)}"
    dealt = [] if r.current is None else [r.current[0]]
    if r.current is not None and r.current[1] is not None:  # started: the manifest has its attempt
        i, attempt, t0 = r.current
        took, dealt = round(time.perf_counter() - t0, 2), []
        yield deal.jobs[i], attempt, Ran("error", f"{why} while this notebook ran", took, node=r.lane.where)
    for i in dealt + deal.drop(r.lane.index, last):
        job = deal.jobs[i]
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
