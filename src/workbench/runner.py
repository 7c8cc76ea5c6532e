"""``workbench run``: execute the notebooks as a papermill batch, then report and write back.

A run folder holds ``notebooks/`` (the executed notebooks), ``findings/`` (every finding, passed to
each notebook as its ``out`` parameter), ``run.json`` (the manifest) and ``report.html``, plus
``blueprint.md`` when the blueprint can be written back. Each notebook gets its own kernel (a
subprocess, via papermill), so one that crashes or leaks cannot disturb the next. The manifest is
updated after every notebook under a file lock, so an interrupted run resumes where it stopped and
two runs sharing a folder merge their entries; findings themselves are never overwritten.

The console stays quiet: everything a notebook's kernel and the engines it starts print goes to
``logs/<engine>/<notebook>.log`` in the run folder, and the console shows one line per notebook
(status, time, verdicts) under a progress bar, with the log's last lines when a notebook fails.
``verbose`` echoes the engine logs to the console as well.

Committed notebooks carry no outputs except the small deterministic ones nbval checks; after
editing one, refresh them with ``python -m workbench.runner notebooks/NAME.ipynb …`` (:func:`freeze`).
"""

from __future__ import annotations

import ast
import contextlib
import json
import math
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from . import cpu, envvars, isolate, manifest, models, nbprobes, runindex, runlock
from . import lanes as _lanes
from .params import parse_bool
from .engine import WorkbenchError
from .files import REPO_ROOT, check_writable, tail
from .executors import TIMEOUT, Executor, Job, Ran, Start, local_env, resources_for, untimed_here
from .environment import now_iso
from .jobs import KERNEL, Planned, execute, kernel_manager


class RunError(WorkbenchError):
    """A batch that cannot start: no notebooks, an unknown notebook name or parameter."""


def notebooks(directory: Path) -> list[Path]:
    found = sorted(p for p in Path(directory).glob("*.ipynb") if not p.name.startswith("."))
    if not found:
        raise RunError(f"no notebooks in {directory}")
    return found


def select(books: list[Path], only: list[str] | None) -> list[Path]:
    """Notebooks named in ``only`` by file name, stem, or stem without its number (``retention``)."""
    if not only:
        return books
    names = {b: {b.name, b.stem, b.stem.split("_", 1)[-1]} for b in books}
    unknown = [o for o in only if not any(o in n for n in names.values())]
    if unknown:
        raise RunError(f"unknown notebook(s) {', '.join(unknown)}; valid: {', '.join(b.stem for b in books)}")
    return [b for b in books if names[b] & set(only)]


def _coerce(name: str, value: Any, default_src: str) -> Any:
    """A ``-p`` string converted to the type of the notebook's default (``"false"`` must not be truthy)."""
    if not isinstance(value, str):
        return value
    try:
        default = ast.literal_eval(default_src)
    except (ValueError, SyntaxError):
        return value
    if isinstance(default, bool):
        try:
            return parse_bool(value)
        except ValueError:
            raise RunError(f"parameter {name} must be true or false, got {value!r}") from None
    if isinstance(default, dict):
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise RunError(f"parameter {name} must be a JSON object, e.g. '{{\"dummy_weights\": true}}', got {value!r}")
        return parsed
    if isinstance(default, (int, float)):
        return _number(name, value, type(default))
    return value  # strings, and tuples written as "a,b" (probes parse those)


def _number(name: str, value: str, kind: type) -> Any:
    """A finite int or float from a ``-p`` string, or a RunError naming the parameter."""
    try:
        number = kind(value)
    except ValueError:
        number = None
    if number is None or not math.isfinite(number):
        raise RunError(f"parameter {name} must be a finite {kind.__name__}, got {value!r}")
    return number


def plan(out: Path, engine: str, model: str, params: Mapping[str, Any] | None = None, only: list[str] | None = None,
         notebooks_dir: Path | None = None) -> list[Planned]:
    """Which notebooks run with which parameters. Each gets engine, model, out and the ``params`` it declares;
    a parameter no selected notebook declares is an error (a typo must not silently run defaults)."""
    import papermill

    findings_dir = str(Path(out).resolve() / "findings")
    params = dict(params or {})
    if "interactive" in params:  # widget explorers need a frontend; under papermill they stall the kernel
        raise RunError("interactive is for JupyterLab; batch runs always render static tables and figures")
    reserved = sorted(params.keys() & {"engine", "model", "out"})
    if reserved:
        raise RunError(f"pass {', '.join(reserved)} as options (--engine, --model, --out), not as -p parameters")
    _check_engine(engine)
    planned, used = [], set()
    for nb in select(notebooks(notebooks_dir or REPO_ROOT / "notebooks"), only):
        declared = {k: v["default"] for k, v in papermill.inspect_notebook(str(nb)).items()}
        mine = {k: _coerce(k, v, declared[k]) for k, v in params.items() if k in declared}
        wrong = nbprobes.problem(nb, mine, _literals(declared), engine)
        if wrong:
            raise RunError(f"{wrong} (nothing was run)")
        used |= mine.keys()
        planned.append(Planned(nb.stem, nb, {"engine": engine, "model": model, "out": findings_dir} | mine,
                               per_batch=_per_batch(nb)))
    unused = sorted(set(params) - used)
    if unused:
        raise RunError(f"no selected notebook takes parameter(s) {', '.join(unused)}")
    return planned


def _check_engine(engine: str) -> None:
    """A batch on an engine no cell implements fails here, not in each notebook's first probe."""
    from . import cells
    from .registry import UnknownName

    try:
        cells.ENGINES.check(engine)
    except UnknownName as e:
        raise RunError(f"--engine: {e} (nothing was run)") from None


def _literals(declared: Mapping[str, str]) -> dict[str, Any]:
    """A parameters cell's defaults (papermill gives their source) that are Python literals, as values."""
    values = {}
    for k, src in declared.items():
        with contextlib.suppress(ValueError, SyntaxError):
            values[k] = ast.literal_eval(src)
    return values


#: A notebook's ``metadata.workbench.per_batch`` says it covers a whole batch rather than one engine, so a
#: batch over several engines runs it once: with the first engine ("first": the environment, which reports
#: every engine) or with the last ("last": the summary, over every finding the batch wrote).
PER_BATCH = ("first", "last")


def _per_batch(nb: Path) -> str:
    value = json.loads(nb.read_text()).get("metadata", {}).get("workbench", {}).get("per_batch", "")
    if value not in ("", *PER_BATCH):
        raise RunError(f"{nb}: metadata.workbench.per_batch is {value!r}; use one of {', '.join(PER_BATCH)} or drop it")
    return value


def once_per_batch(todo: Sequence[Job]) -> list[Job]:
    """``todo`` without the repeats of a notebook that covers the whole batch (:data:`PER_BATCH`), in order."""
    chosen: dict[str, int] = {}
    for i, job in enumerate(todo):
        if job.planned.per_batch == "first":
            chosen.setdefault(job.planned.name, i)
        elif job.planned.per_batch == "last":
            chosen[job.planned.name] = i
    return [job for i, job in enumerate(todo) if chosen.get(job.planned.name, i) == i]


def _writeback(out: Path, data_dir: Path) -> tuple[Path | None, str | None]:
    """Write a written-back copy of the blueprint into the run folder; (path, error)."""
    source = data_dir / "blueprint" / "blueprint.md"
    if not source.exists():
        return None, None
    try:
        from . import blueprint
    except ImportError:
        return None, None
    try:
        code = blueprint.run_writeback(source, [out / "findings"], "write", out / "blueprint.md")
        from .events import guide as gateway_guide

        guide = data_dir / gateway_guide.GUIDE
        if guide.exists():  # the gateway guide's event-plane claims, written back the same way
            code = code or gateway_guide.run_writeback(guide, [out / "findings"], "write", out / guide.name)
    except Exception as e:  # the write-back failing must not cost the run its report
        return None, f"{type(e).__name__}: {e}"
    return (out / "blueprint.md", None) if code == 0 else (None, f"write-back exited {code}")


def set_aside(out: Path, attempt: str, key: str) -> int:
    """Move the findings that attempt ``attempt`` of notebook ``key`` wrote (each finding records its attempt id)
    to ``superseded/<key>/``, so its rerun does not count them twice and nothing is deleted. Findings of other
    notebooks, engines or runs are never touched. Returns how many were moved."""
    from .findings import scan

    target = out / "superseded" / key.replace("/", "_")
    moved = 0
    for path, f in scan([out / "findings"]).findings:
        if f.attempt == attempt:
            target.mkdir(parents=True, exist_ok=True)
            os.replace(path, target / path.name)
            moved += 1
    return moved


def _resume_unfinished(out: Path, done: manifest.NotebookRun, say: Callable[[str], None]) -> None:
    """Before rerunning a notebook whose last attempt did not finish, set aside what that attempt wrote."""
    if done.attempt is None:  # recorded before attempt ids: nothing tells its findings apart, so all stay
        say(f"[dim]kept[/] any findings of the unfinished {done.name} attempt (it predates attempt ids)")
        return
    moved = set_aside(out, done.attempt, done.name)
    if moved:
        say(f"[dim]set aside[/] {moved} finding(s) of the unfinished {done.name} attempt")


@contextlib.contextmanager
def _one_writer(out: Path, wait: bool) -> Iterator[None]:
    """Check the run folder is writable and hold its writer lock (:mod:`workbench.runlock`) for the whole batch;
    ``wait=True`` queues behind another writer instead of refusing."""
    for sub in ("notebooks", "findings"):
        check_writable(out / sub, "run folder")
    out.mkdir(parents=True, exist_ok=True)
    with runlock.writer(out, wait, lambda who: print(f"waiting: {out} is being written by {who}", file=sys.stderr)):
        yield


def attempt_digests(out: Path, attempt: str) -> dict[str, str]:
    """Each finding attempt ``attempt`` wrote into ``out/findings``, with its digest (:mod:`workbench.ledger`): what the
    notebook's entry in ``run.json`` records when it ends, the run's record those findings are bound to."""
    from . import ledger
    from .findings import FindingError, read

    folder, got = out / "findings", {}
    for fid, entries in ledger.entries(folder).items():  # what the attempt said it wrote: read those files only
        if any(e.get("attempt") == attempt for e in entries) and (folder / f"{fid}.json").is_file():
            try:
                f = read(folder / f"{fid}.json")
            except FindingError:
                continue  # unreadable: no digest to record, and the folder's scan names it
            if f is not None and f.attempt == attempt and f.digest:
                got[f.id] = f.digest
    return got


def written_verdicts(out: Path, attempt: str | None) -> str:
    """The verdicts of the findings one notebook attempt wrote, in a few words: each probe family once with
    its verdicts, e.g. ``warmup not-applicable · isolation not-applicable``."""
    from .findings import scan

    by: dict[str, set[str]] = {}
    for _, f in scan([out / "findings"]).findings:
        if attempt is not None and f.attempt == attempt:
            by.setdefault(f.probe.split(".")[0], set()).add(f.verdict)
    return " · ".join(f"{family} {', '.join(sorted(v))}" for family, v in sorted(by.items()))


def notebook_line(out: Path, entry: manifest.NotebookRun, verdicts: str) -> str:
    """The console's line for one notebook (rich markup): status, name, time and verdicts; for a failure
    also the error, where its log is and the log's last lines."""
    from rich.markup import escape

    took = f"{entry.duration_s:6.1f} s" if entry.duration_s is not None else "      —"
    if entry.status == "ok":
        return f"[green]ok  [/] {escape(entry.name):<36} {took}  {escape(verdicts or 'no finding')}"
    lines = [f"[red]fail[/] {escape(entry.name):<36} {took}  {escape(entry.error or '')}"]
    if entry.log:
        lines.append(f"     log: {out / entry.log}")
        lines += [f"[dim]     │ {escape(line)}[/]" for line in tail(out / entry.log, 15)]
    return "\n".join(lines)


class LocalExecutor(Executor):
    """Runs jobs on this machine, each in its own kernel (:func:`execute`); the jobs of one engine share a forkserver
    (:class:`_Forkservers`). ``lanes`` (None: auto, see :func:`workbench.lanes.plan`) runs each engine's jobs in a lane
    of its own, pinned to cores no other lane uses, a lane out of work taking the last of the busiest one's
    (:mod:`workbench.lanes`); 1: one job at a time."""

    name = "local"

    def __init__(self, job_timeout_s: float | None = None, lanes: int | None = 1) -> None:
        super().__init__(job_timeout_s)
        self.lanes = lanes

    def check(self, jobs: Sequence[Job]) -> None:
        """Also every job's model, here, where it runs: a model that cannot resolve fails before any kernel starts,
        not inside each notebook (a fleet's node may hold a path this machine lacks, so only here)."""
        super().check(jobs)
        for spec in sorted({str(m) for j in jobs if (m := j.planned.parameters.get("model")) is not None}):
            models.check(spec)

    def run(self, jobs: Sequence[Job], out: Path, start: Start, verbose: bool = False) -> Iterator[tuple[Job, str, Ran]]:
        untimed = untimed_engines(jobs)
        jobs = untimed_first(jobs, untimed)
        middle = [j for j in jobs if not j.planned.per_batch]
        planned, note = _lanes.plan(self.lanes, len({_engine(j) for j in middle} - untimed))
        if note:
            print(note, file=sys.stderr)
        if not planned:
            yield from in_turn(jobs, out, start, verbose, self.job_timeout_s, untimed)
            return
        print(f"lanes:     {len(planned)}, {'; '.join(map(str, planned))}", file=sys.stderr)
        everywhere = {"lane": None, "cpus": list(cpu.usable() or ())}
        with envvars.scoped({_lanes.LANES_ENV: _lanes.describe(planned)}):  # the survey records them
            batch = [j for j in jobs if j.planned.per_batch == "first"]
            yield from in_turn(batch, out, start, verbose, self.job_timeout_s, share=False, where=everywhere)
            yield from _lanes.run(planned, in_turn, middle, out, start, verbose, self.job_timeout_s, untimed)
            batch = [j for j in jobs if j.planned.per_batch == "last"]
            yield from in_turn(batch, out, start, verbose, self.job_timeout_s, share=False, where=everywhere)


def in_turn(jobs: Sequence[Job] | _lanes.Dealt, out: Path, start: Start, verbose: bool = False,
            timeout_s: float | None = None, untimed: frozenset[str] = frozenset(), *, share: bool = True,
            where: Mapping[str, Any] | None = None) -> Iterator[tuple[Job, str, Ran]]:
    """``jobs`` one after another in this process's kernels, in their order, or as a lane's driver deals them
    (:class:`workbench.lanes.Dealt`); with ``share`` each engine's through its forkserver (:class:`_Forkservers`).
    ``where`` is recorded as each outcome's ``node``."""
    lane = f"-lane{jobs.lane}" if isinstance(jobs, _lanes.Dealt) else ""  # two lanes may run one engine's
    with _Forkservers(out / "logs", untimed, lane) if share else contextlib.ExitStack() as servers:
        for job, later in _ahead(jobs, servers):
            own = local_env(job) or {}  # a matrix environment of env_vars: its kernel's and its engine's own
            shared = {isolate.SHARED_ENV: servers.for_job(job, later)} if share and not own else {}
            attempt = start(job)
            t0 = time.perf_counter()
            with envvars.scoped(shared | own or None):
                status, error = execute(job.planned, out, attempt, verbose, timeout_s)
            yield job, attempt, Ran(status, error, round(time.perf_counter() - t0, 2), node=where)


def _ahead(jobs: Sequence[Job] | _lanes.Dealt, servers: Any) -> Iterator[tuple[Job, Sequence[Job]]]:
    """Each job with those after it; dealt ones as the driver deals them, told whether ``servers`` (the lane's
    forkservers, started for its own queue first) have done their imports."""
    if not isinstance(jobs, _lanes.Dealt):
        yield from ((job, jobs[i + 1:]) for i, job in enumerate(jobs))
        return
    servers.start(later := jobs.home)
    while (got := jobs.deal(servers.imported(later))) is not None:  # the lane's own left: are their servers up?
        yield got
        later = got[1]


def _engine(job: Job) -> str:
    return str(job.planned.parameters.get("engine", ""))


def _preloads(jobs: Sequence[Job]) -> dict[tuple[str, ...], str]:
    """The forkserver preloads ``jobs`` need, in order, each → the first engine that needs it."""
    from . import probes

    needed: dict[tuple[str, ...], str] = {}
    for j in jobs:
        needed.setdefault(probes.preload(_engine(j)), _engine(j))
    return needed


def untimed_engines(jobs: Sequence[Job]) -> frozenset[str]:
    """The engines whose jobs can only report not-run here (:func:`~workbench.executors.untimed_here`). One with a
    job at an ``endpoint`` (a served cell on a GPU elsewhere) times real probes on the claims' subject: never."""
    def remote(job: Job) -> bool:
        options = job.planned.parameters.get("cell_options") or {}
        try:
            return "endpoint" in (json.loads(options) if isinstance(options, str) else options)
        except ValueError:  # the notebook refuses it in one line; here it only must not count as untimed
            return True

    at_endpoint = {_engine(j) for j in jobs if remote(j)}
    return frozenset(e for e in {_engine(j) for j in jobs} - at_endpoint if untimed_here(e))


def untimed_first(jobs: Sequence[Job], untimed: frozenset[str]) -> list[Job]:
    """``jobs`` with those of the ``untimed`` engines (:func:`~workbench.executors.untimed_here`: ``not-run``
    findings only) moved up behind the batch's first notebooks (the environment survey), in order: they run while
    the engines' forkservers import, where a timed job waits (:class:`_Forkservers`). The summary stays last."""
    def rank(job: Job) -> int:
        per_batch = job.planned.per_batch
        return 0 if per_batch == "first" else 1 if per_batch != "last" and _engine(job) in untimed else 2

    return sorted(jobs, key=rank)  # stable: each rank keeps the batch's order


class _Forkservers(contextlib.ExitStack):
    """One forkserver per engine, shared by that engine's notebook kernels (:func:`isolate.shared_forkserver`):
    vLLM's ~15 s of imports on 2 cores are paid once per run instead of in every notebook's first probe.

    Every engine's server starts with the batch's first job (a lane's: with the lane, for its own queue; a job it
    takes from another lane: when it is dealt) and stops after that engine's last. Their imports
    run beside the environment survey (the notebook run first and once per batch) and the jobs of ``untimed``
    engines only, which time nothing: any other job waits until every server has done them, so no import runs
    beside timed work."""

    def __init__(self, logs: Path, untimed: frozenset[str] = frozenset(), suffix: str = "") -> None:
        super().__init__()
        self.logs, self.open, self.waited = logs, {}, set()  # preload → (the value naming it, its ExitStack)
        self.untimed, self.suffix = untimed, suffix  # a lane's logs (and ready files) are its own

    def start(self, jobs: Sequence[Job]) -> dict[tuple[str, ...], str]:
        """Start the servers ``jobs`` need that are not running; returns each preload they need → the value of
        :data:`isolate.SHARED_ENV` naming its server."""
        needed = _preloads(jobs)
        for want, engine in needed.items():
            if want not in self.open:
                stack = self.enter_context(contextlib.ExitStack())
                log = self.logs / f"forkserver-{engine}{self.suffix}.log"
                self.open[want] = (stack.enter_context(isolate.shared_forkserver(want, log)), stack)
        return {want: self.open[want][0] for want in needed}

    def imported(self, jobs: Sequence[Job]) -> bool:
        """Whether the running servers ``jobs`` need have done their imports (or died: a job through one says so)."""
        return all(isolate.wait_ready(self.open[p][0], timeout_s=0) for p in _preloads(jobs) if p in self.open)

    def for_job(self, job: Job, later: Sequence[Job]) -> str:
        """The value of :data:`isolate.SHARED_ENV` for ``job``'s kernel (its engine's server); a server no job
        from here on needs stops."""
        needed = self.start([job, *later])  # all of them at the first job: later ones need no other
        for done in [k for k in self.open if k not in needed]:
            self.open.pop(done)[1].close()
        if job.planned.per_batch != "first" and _engine(job) not in self.untimed:
            for value, _ in self.open.values():
                if value not in self.waited:
                    isolate.wait_ready(value)
                    self.waited.add(value)
        return next(iter(needed.values()))


def land(out: Path, files: Mapping[str, bytes], attempt: str, key: str) -> int:
    """Write what a remote job's attempt ``attempt`` brought back into the run folder: a finding never replaces
    another (ids are unique), an executed notebook or log replaces the earlier attempt's; a path outside the
    folder is refused. A finding another attempt wrote (a stale file in the job's folder, another job's) is not
    this attempt's result: it goes to ``superseded/<key>/``, as :func:`set_aside` would move it. Returns how many."""
    from . import ledger
    from .files import atomic_write

    stale, landed, ledgers = 0, [], []
    for rel, data in files.items():
        path = (out / rel).resolve()
        if out not in path.parents:
            raise RunError(f"a job sent back {rel!r}, outside the run folder")
        if Path(rel).name == ledger.LEDGER:  # the job's own ledger: its lines join the run folder's, never replace it
            ledgers.append((path.parent, data))
            continue
        finding = rel.startswith("findings/")
        if finding and _written_by_another(data, attempt):  # the same stale file twice is one file: replaced
            path, finding, stale = out / "superseded" / key.replace("/", "_") / path.name, False, stale + 1
        elif finding:
            landed.append(path.stem)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data, overwrite=not finding)
    for folder, data in ledgers:
        folder.mkdir(parents=True, exist_ok=True)
        ledger.merge(folder, data, keep=landed)
    return stale


def _written_by_another(data: bytes, attempt: str) -> bool:
    """A finding (by its schema) whose recorded attempt id is not ``attempt``, or that records none."""
    from .findings import SCHEMA_FAMILY

    try:
        doc = json.loads(data)
    except ValueError:  # not JSON: not a finding; it lands, and the scan of the folder names it
        return False
    return (isinstance(doc, dict) and str(doc.get("schema", "")).startswith(SCHEMA_FAMILY)
            and doc.get("attempt") != attempt)


def batch_jobs(out: Path, engines: Sequence[str], model: str, params: Mapping[str, Any] | None = None,
               only: list[str] | None = None, notebooks_dir: Path | None = None, *,
               engine_models: Mapping[str, str] | None = None,
               engine_params: Mapping[str, Mapping[str, Any]] | None = None) -> list[Job]:
    """Each engine's notebooks in turn, on ``model`` with ``params`` unless ``engine_models`` / ``engine_params``
    name its own (its parameters update the batch's); a notebook that covers the batch once (:func:`once_per_batch`).

    One batch, not one per engine, so the environment and the summary run once and one report covers it all."""
    engine_models, engine_params = dict(engine_models or {}), dict(engine_params or {})
    stray = sorted((engine_models.keys() | engine_params.keys()) - set(engines))
    if stray:
        raise RunError(f"{', '.join(stray)}: not an engine of this batch ({', '.join(engines)}); add it with --engine, "
                       "or drop its --model ENGINE=SPEC / -p ENGINE:key=value")
    return once_per_batch([
        Job(p, resources_for(e, p.parameters.get("cell_options"))) for e in engines
        for p in plan(out, e, engine_models.get(e, model), dict(params or {}) | dict(engine_params.get(e, {})), only,
                      notebooks_dir)])


def run_batch(out: Path, engine: str | Sequence[str] = "llamacpp", model: str = models.DEFAULT_MODEL,
              params: Mapping[str, Any] | None = None, only: list[str] | None = None, progress: bool = True, *,
              wait: bool = False, notebooks_dir: Path | None = None, data_dir: Path | None = None, verbose: bool = False,
              jobs: Callable[[Path], list[Job]] | None = None, executor: Executor | None = None,
              engine_models: Mapping[str, str] | None = None,
              engine_params: Mapping[str, Mapping[str, Any]] | None = None) -> int:
    """Run the notebooks into run folder ``out`` on each engine; 0 when every selected notebook ran, 1 otherwise.

    Several engines share one run folder: their findings sit side by side in ``findings/``, the
    executed notebooks under ``notebooks/<engine>/``, and one report and blueprint cover them all. A notebook
    that covers the whole batch (the environment, the summary) runs once in it (:func:`once_per_batch`).

    Every input is checked before the run folder is touched: an unknown engine, notebook or model, a parameter
    no notebook takes or that its probe cannot read raise a :class:`~workbench.engine.WorkbenchError` with nothing
    written and no kernel started. One batch writes a run folder at a time: another one raises :class:`~workbench.runlock.RunLocked` naming
    it, unless ``wait=True`` (queue behind it). Notebooks already ``ok`` in ``run.json`` with the same
    parameters are skipped (resume); an unfinished attempt's findings are set aside first. A failing
    notebook is recorded and the batch goes on. ``data_dir`` (default: the checkout's ``data/``) holds
    ``blueprint/blueprint.md`` for the write-back. Engine logs go to each notebook's log file (and, with
    ``verbose``, to the console too). ``engine_models`` and ``engine_params`` give one engine its own model and
    parameters (:func:`batch_jobs`). ``jobs`` (a run matrix's plan, :mod:`workbench.matrix`) replaces
    engine × model × params; ``executor`` (default :class:`LocalExecutor`) is where the jobs run.
    """
    out = Path(out).resolve()
    engines = [engine] if isinstance(engine, str) else list(engine)
    todo = jobs(out) if jobs else batch_jobs(out, engines, model, params, only, notebooks_dir,
                                             engine_models=engine_models, engine_params=engine_params)
    executor = executor or LocalExecutor()
    executor.check(todo)
    with _one_writer(out, wait):
        runindex.check_models(out, [job.planned.parameters for job in todo])
        return _run_checked(out, todo, executor, progress, verbose, data_dir)


def _run_checked(out: Path, todo: list[Job], executor: Executor, progress: bool, verbose: bool,
                 data_dir: Path | None) -> int:
    """:func:`run_batch` once its inputs are checked and the folder is its own: run, write back, report."""
    from . import report

    for sub in ("notebooks", "findings"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("WORKBENCH_SERVER_LOGS", str(out / "servers"))  # served engines' logs, kernels inherit it
    with executor:  # a cluster that does not answer leaves no run record behind
        run = runindex.begin(out, [job.planned.parameters for job in todo])
        failed = _run_jobs(out, todo, executor, progress, verbose)
    written, bp_error = _writeback(out, data_dir or REPO_ROOT / "data")
    page = report.write(out, manifest.load(out))
    print(f"report:    {page}")
    print(report.tally_text(out, manifest.load(out)))
    if written:
        print(f"blueprint: {written}")
    if bp_error:
        print(f"blueprint: not written: {bp_error}")
    if failed:
        print(f"failed:    {', '.join(failed)} (see {out / manifest.MANIFEST})")
    code = 1 if failed or bp_error else 0
    runindex.end(out, run, code)
    index = runindex.index_path(out)
    print(f"index:     {index}" if index else f"index:     none ({out.parent} is no folder of runs: the record is in "
                                                f"{out / manifest.MANIFEST})")
    return code


def _running(running: Mapping[str, manifest.NotebookRun]) -> str:
    """The progress bar's label: what runs now (one job locally, many across a fleet)."""
    names = [e.name for e in running.values()]
    return f"running {names[0]}" if len(names) == 1 else f"running {len(names)}: {', '.join(names)[:80]}"


def _inside(out: Path, running: Mapping[str, manifest.NotebookRun]) -> Any:
    """The progress bar's last column: how long each running notebook has run, and what it says it is doing (its
    progress file, :mod:`workbench.progress`: a probe, a loop turn, an AIPerf run), read at most once a second."""
    import datetime as _dt

    from rich.progress import ProgressColumn
    from rich.text import Text

    from . import progress as _progress

    class Inside(ProgressColumn):
        max_refresh = 1.0

        def render(self, task: Any) -> Text:
            now, said = _dt.datetime.now(_dt.timezone.utc), []
            for e in list(running.values()):
                try:
                    took = f" {(now - _dt.datetime.fromisoformat(e.started)).total_seconds():.0f} s"
                except ValueError:
                    took = ""
                line = _progress.read(_progress.path_for(out / e.log)) if e.log else None
                said.append(f"{e.name.rsplit('/', 1)[-1]}{took}" + (f": {line}" if line else ""))
            return Text(" | ".join(said)[:140], style="dim")

    return Inside()


def _run_jobs(out: Path, todo: list[Job], executor: Executor, progress: bool, verbose: bool) -> list[str]:
    """Skip what is done, set aside what an unfinished attempt wrote, run the rest; the keys that failed."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True, quiet=not progress, soft_wrap=True)
    failed, running = [], {}
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), _inside(out, running), console=console, transient=True) as bar:
        task = bar.add_task("notebooks", total=len(todo))
        pending = []
        for job in todo:
            p = job.planned
            done = manifest.load(out).notebooks.get(p.key)
            if done and done.status == "ok" and done.parameters == p.parameters:
                console.print(f"[dim]skip[/] {p.key} (done in an earlier run)")
                bar.advance(task)
                continue
            if done and done.status != "ok":
                _resume_unfinished(out, done, console.print)
            pending.append(job)

        def start(job: Job) -> str:
            p = job.planned
            entry = manifest.NotebookRun(p.key, "running", p.parameters, p.output, now_iso(),
                                         attempt=uuid.uuid4().hex[:12], log=p.log, environment=job.environment)
            manifest.record(out, entry)
            for given_up in [a for a, e in running.items() if e.name == p.key]:  # a retry replaces its attempt
                del running[given_up]
            running[entry.attempt] = entry
            bar.update(task, description=_running(running))
            return entry.attempt

        for job, attempt, ran in executor.run(pending, out, start, verbose):
            entry = running.pop(attempt)
            if stale := land(out, ran.files, attempt, entry.name):
                console.print(f"[dim]set aside[/] {stale} finding(s) {entry.name} sent back from another attempt")
            entry.status, entry.error, entry.duration_s = ran.status, ran.error, ran.duration_s
            entry.node, entry.retried = dict(ran.node) if ran.node else None, ran.retried
            if entry.status == TIMEOUT:  # nothing a stopped job wrote counts (a remote one sent nothing back)
                set_aside(out, attempt, entry.name)
            entry.findings = attempt_digests(out, attempt)
            manifest.record(out, entry)
            if entry.status != "ok":
                failed.append(entry.name)
            console.print(notebook_line(out, entry, written_verdicts(out, entry.attempt)))
            bar.update(task, description=_running(running))
            bar.advance(task)
    return failed


CHECKED = "# NBVAL_CHECK_OUTPUT"


def freeze(sources: list[Path]) -> None:
    """Execute notebooks with their default parameters and keep only the outputs of checked cells.

    Those outputs are what nbval compares against; every other output is dropped so the committed
    notebook stays small and diff-friendly.
    """
    import nbformat
    import papermill

    for src in map(Path, sources):
        with tempfile.TemporaryDirectory() as tmp:
            executed = papermill.execute_notebook(str(src), str(Path(tmp) / src.name), kernel_name=KERNEL,
                                                  progress_bar=False, cwd=str(src.parent),
                                                  kernel_manager_class=kernel_manager())
        ran = {c.get("id"): c for c in executed.cells}
        nb = nbformat.read(src, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                keep = cell.source.startswith(CHECKED)  # nbval wants a count on a cell with outputs
                cell.outputs = ran[cell.id].outputs if keep else []
                cell.execution_count = ran[cell.id].execution_count if keep else None
        nbformat.write(nb, src)
        print(f"froze {src}")


if __name__ == "__main__":
    freeze([Path(a) for a in sys.argv[1:]])
