"""``workbench`` command line: doctor | probes | probe | run | report | findings | writeback | bench | loop | serve |
cell serve | evaltable | events | certify.

Every command is a thin face over the package; errors a user can fix exit 2 with a message that
names what to fix, never a traceback.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

from . import lifecycle as _lifecycle  # the standard library only: in place before the imports below

if __name__ == "__main__" or Path(sys.argv[0]).name == "workbench":  # the command (`workbench`, `python -m`)
    _lifecycle.while_starting()  # a Ctrl-C while the modules below import (seconds): one line, no traceback

import typer  # noqa: E402

from . import models  # noqa: E402
from .engine import WorkbenchError  # noqa: E402
from .loop import DEFAULT_CONTEXT  # noqa: E402
from .loop.equal import CLAIM_MARGIN_SD  # noqa: E402
from .loop.gate import CLAIM_MIN_SPEEDUP, CLAIM_MIN_TURNS  # noqa: E402

if TYPE_CHECKING:
    from .findings import FindingNotSaved

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Settle, by measurement, whether an inference engine honours modeld's KV-cache contract.")


def _version(shown: bool) -> None:
    """``--version``: printed before any command is looked at."""
    if shown:
        from .environment import version_line

        typer.echo(version_line())
        raise typer.Exit()


@app.callback()
def _options(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                          help="the workbench's version and git commit, then exit")) -> None:
    pass


def _fail(msg: str, code: int = 2) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code)


_SAID_INTERRUPTED = False


def _interrupted(what: str) -> None:
    """A command a signal stopped (Ctrl-C, SIGTERM, SIGHUP: :mod:`workbench.lifecycle`): one line saying what was
    stopped, and the signal's exit code (130, 143, 129)."""
    from . import lifecycle

    global _SAID_INTERRUPTED
    _SAID_INTERRUPTED = True
    lifecycle.say(lifecycle.interrupted_line(None, what))
    raise typer.Exit(lifecycle.exit_code())


def _finite(value: Optional[float]) -> Optional[float]:
    """Option callback: NaN or infinity is never a threshold (every comparison with NaN is false)."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"must be a finite number, got {value}")
    return value


def _env_folders() -> None:
    """Exit 2 before anything runs when a ``WORKBENCH_*`` variable names a folder that cannot be written."""
    from .files import check_env_folders

    try:
        check_env_folders()
    except WorkbenchError as e:
        _fail(str(e))


def _writable(out: Path) -> None:
    """Exit 2 before any experiment runs when ``--out`` cannot take a finding (or the environment names a folder
    that cannot be written)."""
    from .files import check_writable

    if out.exists() and not out.is_dir():
        _fail(f"--out {out} is a file; it must be a findings folder (nothing was run)")
    try:
        check_writable(out)
    except WorkbenchError as e:
        _fail(str(e))
    _env_folders()


def _not_saved(e: "FindingNotSaved") -> None:
    """The experiment ran but its finding(s) could not be written: say where they are kept (or print them)."""
    lost = [doc for path, doc in zip(e.recovered, e.docs) if path is None]
    for doc in lost:
        typer.echo(doc)
    _fail(str(e))


def _no_leftovers(ctx: typer.Context, pairs: List[str]) -> None:
    """Exit 2 on arguments the command takes none of (papermill's ``-p key value`` gets the spelling to write)."""
    if ctx.args:
        from .params import leftover

        _fail(leftover(pairs, ctx.args))


def _kv(pairs: List[str], typed: bool = False, option: str = "-p") -> dict:
    """``key=value`` pairs; ``typed`` reads values as JSON where they parse (true, 3, [1,2]), else as text. A key
    given twice with two values is refused (the last silently won, and the finding recorded only it)."""
    out = {}
    for p in pairs:
        if "=" not in p:
            _fail(f"parameter {p!r} must be key=value")
        k, _, v = p.partition("=")
        if typed:
            try:
                v = json.loads(v)
            except ValueError:
                pass
        k = k.strip()
        if out.setdefault(k, v) != v:
            _fail(f"{option} {k} given twice ({out[k]!r}, {v!r}): give each key once")
    return out


@app.command()
def doctor(
    as_json: bool = typer.Option(False, "--json", help="machine-readable report"),
    smoke: bool = typer.Option(False, "--smoke", help="open ENGINE on MODEL with dummy weights; try every probe path"),
    engine: str = typer.Option("trtllm", "--engine", "-e", help="engine for --smoke"),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Hugging Face model directory for --smoke"),
) -> None:
    """What this machine can run: Python, CPU, GPU, engines (with the reason when not), the default model."""
    from . import doctor as _doctor

    if smoke:
        from . import smoke as _smoke

        try:
            check = _smoke.run(engine, model)
        except WorkbenchError as e:
            _fail(str(e))
        typer.echo(json.dumps(check.as_dict(), indent=2) if as_json else _smoke.render(check))
        raise typer.Exit(check.exit_code)

    if as_json:
        typer.echo(json.dumps(_doctor.report(), indent=2, default=str))
        return
    _doctor.report(on_part=lambda part, rep: typer.echo("\n".join(_doctor.lines(part, rep))))  # each as it is read


@app.command("probes")
def list_probes() -> None:
    """List the registered probes, their claims and parameters."""
    from . import probes

    for name in probes.names():
        probe = probes.get(name)
        typer.echo(f"{name} (v{probe.version})\n  claims: {', '.join(probe.claims)}\n  about: {probe.claim.text}")
        for prm in probes.describe_params(name):
            typer.echo(f"  -p {prm['name']}={prm['default']!r:<12} {prm['type']:<18} {prm['help']}")


@app.command(context_settings={"allow_extra_args": True})
def probe(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="probe name (see `workbench probes`)"),
    engine: str = typer.Option("llamacpp", "--engine", "-e", help="engine: llamacpp | trtllm | vllm"),
    model: str = typer.Option(models.DEFAULT_MODEL, "--model", "-m", help="model spec"),
    param: List[str] = typer.Option([], "--param", "-p", help="probe parameter key=value (repeatable)"),
    out: Path = typer.Option(Path("findings"), "--out", "-o", help="findings folder"),
    cell: List[str] = typer.Option([], "--cell", "-c",
                                   help="cell option key=value, e.g. dummy_weights=true, tokens_per_block=64"),
) -> None:
    """Run one probe, print its verdict and summary, write the finding. `not-run` is not an error."""
    from . import cells, isolate, metrics, probes
    from .findings import FindingNotSaved

    _no_leftovers(ctx, param)
    _writable(out)
    try:
        if probes.get(name).needs_engine:  # a model the engine cannot run is the user's to fix, not a not-run
            cells.check_model(engine, model)
        f = probes.run(name, engine=engine, model=model, params=_kv(param), out=out, cell_options=_kv(cell, typed=True, option="-c"))
    except isolate.EngineCrashed as e:
        _fail(f"{e}\nno finding was written; the crash and its log's last lines are kept in {_keep_crash(out, name, e)}",
              isolate.CRASH_EXIT_CODE)
    except FindingNotSaved as e:
        _not_saved(e)
    except KeyboardInterrupt:  # the experiment's processes are already gone (workbench.isolate)
        _interrupted("the probe was stopped and no finding was written")
    except (WorkbenchError, ValueError) as e:
        _fail(str(e))
    typer.echo(f"{f.verdict}: {f.summary}")
    for tag, m in f.metrics.items():
        typer.echo(f"  {metrics.get(tag).header:<22} {metrics.render(tag, m['value'])}")
    typer.echo(f"finding: {out / (f.id + '.json')}")


def _keep_crash(out: Path, name: str, e: Exception) -> Path:
    """The crash (its words and its log's last lines) in ``out/crashes/``, beside the findings it did not write."""
    import time

    path = out / "crashes" / f"{name}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{e}\n")
    return path


@app.command(context_settings={"allow_extra_args": True})
def run(
    ctx: typer.Context,
    out: Path = typer.Option(..., "--out", "-o", help="run folder (resumed if it exists)"),
    engine: List[str] = typer.Option(["llamacpp"], "--engine", "-e",
                                     help="engine (repeatable: engines run side by side into one folder)"),
    model: List[str] = typer.Option([], "--model", "-m", help="model SPEC for every engine (default "
                                    f"{models.DEFAULT_MODEL}); ENGINE=SPEC for one engine (repeatable)"),
    param: List[str] = typer.Option([], "--param", "-p", help="notebook parameter key=value for every engine, "
                                    "ENGINE:key=value for one (repeatable)"),
    only: Optional[List[str]] = typer.Option(None, "--only", help="run only these notebooks (names or stems)"),
    wait: bool = typer.Option(False, "--wait", help="queue behind another run writing into --out (else exit 2)"),
    verbose: bool = typer.Option(False, "--verbose", "-v",
                                 help="echo the engine logs to the console (always kept in the run folder's logs/)"),
    executor: str = typer.Option("local", "--executor", help="local (this machine; see --lanes) or ray "
                                 "(every job a Ray task on a cluster; docs/fleet.md)"),
    address: Optional[str] = typer.Option(None, "--address", help="with --executor ray: the head's HOST:PORT "
                                          "(`ray start --head` prints it); default a local head"),
    matrix: Optional[Path] = typer.Option(None, "--matrix", help="YAML run matrix: engines × models × cell options "
                                          "× environments (replaces --engine, --model, -p, --only)"),
    job_timeout: Optional[float] = typer.Option(None, "--job-timeout", metavar="S", help="stop a notebook still "
                                                "running after S seconds: it ends as timeout, nothing it wrote kept"),
    lanes: str = typer.Option("auto", "--lanes", metavar="N", help="with --executor local: run the engines side by "
                              "side, each in a lane pinned to cores of its own; auto: one lane per engine with timed "
                              "work, as the cores allow; 1: one notebook at a time (docs/timing.md)"),
) -> None:
    """Execute the notebooks with papermill, then write the report and a written-back blueprint."""
    from . import lifecycle, runner

    _no_leftovers(ctx, param)
    if out.exists() and not out.is_dir():
        _fail(f"--out {out} is a file; it must be a run folder (nothing was run)")
    lifecycle.keep_stderr_in(out / "logs" / "stopped.log")  # what stopping prints, once a signal stops the run
    _env_folders()
    try:
        runs_on = _executor(executor, address, job_timeout, lanes)
        jobs = None
        if matrix:
            from . import matrix as _matrix

            if param or only:
                _fail("--matrix names the notebooks and parameters: put -p and --only in the matrix file")
            plan = _matrix.load(matrix)
            jobs = plan.jobs
        every_model, engine_models = _models(model)
        every_param, engine_params = _engine_params(param)
        code = runner.run_batch(out, engine=engine, model=every_model, params=every_param, only=only or None,
                                wait=wait, verbose=verbose, jobs=jobs, executor=runs_on, engine_models=engine_models,
                                engine_params=engine_params)
    except KeyboardInterrupt:  # every kernel, lane and engine of the run is stopped on the way here
        _interrupted("the run stopped; what finished is kept, and the same command resumes it")
    except WorkbenchError as e:
        _fail(str(e))
    raise typer.Exit(code)


#: What names an engine in ``--model ENGINE=SPEC`` and ``-p ENGINE:key=value`` (a path or ``synthetic:…`` does not).
_ENGINE_NAME = re.compile(r"[a-z][a-z0-9-]*")


def _engine_of(name: str, what: str) -> str | None:
    """The engine ``name`` scopes a ``--model``/``-p`` value to; None when ``name`` cannot be an engine's name."""
    from . import cells

    if not _ENGINE_NAME.fullmatch(name):
        return None
    if name not in cells.engines():
        _fail(f"{what}: {name!r} is not an engine; engines: {', '.join(cells.engines())}")
    return name


def _models(specs: List[str]) -> tuple[str, dict[str, str]]:
    """``--model SPEC`` (every engine; at most once) and ``--model ENGINE=SPEC`` (that engine's)."""
    every, scoped = [], {}
    for spec in specs:
        name, eq, rest = spec.partition("=")
        engine = _engine_of(name, f"--model {spec}") if eq else None
        if engine is None:
            every.append(spec)
        elif scoped.setdefault(engine, rest) != rest:
            _fail(f"--model {engine}=… given twice ({scoped[engine]}, {rest}): give each engine one model")
    if len(every) > 1:
        _fail(f"--model given {len(every)} times for every engine ({', '.join(every)}): give one, and ENGINE=SPEC "
              "for an engine that runs another")
    return (every[0] if every else models.DEFAULT_MODEL), scoped


def _engine_params(pairs: List[str]) -> tuple[dict, dict[str, dict]]:
    """``-p key=value`` (every engine) and ``-p ENGINE:key=value`` (that engine's, over the batch's)."""
    every, scoped = {}, {}
    for key, value in _kv(pairs).items():
        name, colon, bare = key.rpartition(":")
        engine = _engine_of(name, f"-p {key}=…") if colon else None
        if colon and engine is None:
            _fail(f"-p {key}=…: {name!r} is not an engine name; write ENGINE:key=value")
        if engine is None:
            every[key] = value
        else:
            scoped.setdefault(engine, {})[bare] = value
    return every, scoped


def _executor(name: str, address: Optional[str], job_timeout: Optional[float] = None, lanes: str = "auto"):
    """The executor ``--executor`` names, with ``--job-timeout`` and (local) ``--lanes``."""
    from . import lanes as _lanes
    from .runner import LocalExecutor

    if name == "local":
        if address:
            _fail("--address is for --executor ray")
        return LocalExecutor(job_timeout, _lanes.parse(lanes))
    if lanes != "auto":
        _fail("--lanes is for --executor local (a Ray cluster places its jobs itself)")
    if name != "ray":
        _fail(f"--executor {name!r}: use local or ray")
    from .fleet import RayExecutor

    return RayExecutor(address, job_timeout_s=job_timeout)


@app.command("findings")
def list_findings(
    dirs: List[Path] = typer.Argument(None, help="findings folders (default: ./findings)"),
    fmt: str = typer.Option("table", "--format", help="table (findings side by side) | csv | json (the flat "
                            "table, one row per finding, as findings.load gives it)"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="write to this file instead of the console"),
) -> None:
    """List findings side by side (engines and engine versions), reporting corrupt files; or export them."""
    from . import findings, findings_export

    _output_checked(fmt, out)
    dirs = dirs or [Path("findings")]
    rescue, kept = findings.recovery_dir(), findings.recovered()
    elsewhere = (f"{len(kept)} finding(s) that could not be written where asked are kept in {rescue}: "
                 f"`workbench findings {rescue}` lists them; move them into a findings folder"
                 if kept and os.path.realpath(rescue) not in {os.path.realpath(d) for d in dirs} else "")
    missing = [str(d) for d in dirs if not d.exists()]
    if missing:
        _fail(f"no such findings folder or file: {', '.join(missing)}" + (f"; {elsewhere}" if elsewhere else ""))
    scan = findings.scan(dirs)
    for path, err in scan.errors:
        typer.echo(f"corrupt: {path}: {err}", err=True)
    if elsewhere:
        typer.echo(f"note: {elsewhere}", err=True)
    _emit(findings_export.export(scan, fmt), out)


def _output_checked(fmt: str, out: Optional[Path]) -> None:
    """Exit 2 on an unknown ``--format`` or an ``--out`` that cannot be written, before anything is read."""
    from .files import check_file_writable
    from .findings_export import FORMATS

    if fmt not in FORMATS:
        _fail(f"--format {fmt!r}: use {', '.join(FORMATS)}")
    if out is not None:
        try:
            check_file_writable(out, nothing="nothing was written")
        except WorkbenchError as e:
            _fail(str(e))


def _emit(text: str, out: Optional[Path]) -> None:
    """``text`` to ``out`` (written whole or not at all) or to stdout."""
    from .files import write_output

    if out is None:
        typer.echo(text, nl=False)
        return
    try:
        write_output(out, text)
    except WorkbenchError as e:
        _fail(str(e))


@app.command("report")
def report_cmd(out: Path = typer.Argument(..., help="run folder (the --out of `workbench run`)"),
               against: Optional[Path] = typer.Option(None, "--against", help="run folder the first screen says what "
                                                      "changed since (default: the previous run in OUT)")) -> None:
    """Draw a run folder's report.html again from its findings and run.json."""
    from . import report

    try:
        typer.echo(f"report: {report.redraw(out, against)}")
    except WorkbenchError as e:
        _fail(str(e))


@app.command("compare")
def compare_cmd(before: Path = typer.Argument(..., help="run folder A (before)"),
                after: Path = typer.Argument(..., help="run folder B (after)")) -> None:
    """What changed from run A to run B: verdicts that flipped, metrics that moved beyond their spread."""
    from . import compare

    try:
        typer.echo("\n".join(compare.compare(before, after).lines()))
    except WorkbenchError as e:
        _fail(str(e))


@app.command()
def writeback(
    blueprint: Path = typer.Argument(..., help="the Markdown blueprint"),
    findings_dirs: List[Path] = typer.Option(..., "--findings", "-f", help="findings folder (repeatable)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the diff, change nothing"),
    check: bool = typer.Option(False, "--check", help="exit 1 when the blueprint is out of date"),
    out: Optional[Path] = typer.Option(None, "--out", help="write here instead of in place"),
) -> None:
    """Put each finding next to the claim it settles, inside managed blocks."""
    from . import blueprint as bp

    if dry_run and check:
        _fail("--dry-run and --check are exclusive")
    try:
        code = bp.run_writeback(blueprint, list(findings_dirs), "dry-run" if dry_run else "check" if check else "write", out)
    except WorkbenchError as e:
        _fail(str(e))
    raise typer.Exit(code)


@app.command()
def bench(
    model: str = typer.Option(models.DEFAULT_MODEL, "--model", "-m"),
    prompt_tokens: int = typer.Option(256, min=1, help="prefill tokens per round"),
    decode_tokens: int = typer.Option(64, min=1, help="decoded tokens per round"),
    rounds: int = typer.Option(9, min=1, help="alternating rounds (cell, raw, cell, raw, …)"),
    out: Optional[Path] = typer.Option(None, "--out", help="write the result as JSON"),
) -> None:
    """Cell vs direct llama-cpp-python on identical prefill+decode work; prints the median ratio."""
    from .cells.llamacpp import bench as _bench
    from .files import check_file_writable, write_output

    _env_folders()
    try:
        if out:
            check_file_writable(out)
        res = _bench.run(model, prompt_tokens=prompt_tokens, decode_tokens=decode_tokens, rounds=rounds)
        typer.echo(_bench.render(res))
        if out:
            write_output(out, json.dumps(res.to_dict(), indent=2))
    except WorkbenchError as e:
        _fail(str(e))


@app.command("loop")
def loop_cmd(
    trace: str = typer.Option("taubench", "--trace", "-t", help="taubench | claude-code | mooncake, or a trace file"),
    arms: str = typer.Option("all", "--arms", "-a", help="comma-separated arms, or 'all' (see docs/loop.md)"),
    model: str = typer.Option(models.DEFAULT_MODEL, "--model", "-m"),
    turns: Optional[int] = typer.Option(None, "--turns", min=1, help="first N turns of each session (default: all)"),
    sessions: Optional[int] = typer.Option(None, "--sessions", min=1, help="first N sessions (default: all)"),
    out: Path = typer.Option(Path("findings"), "--out", "-o", help="findings folder"),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="threads for every arm (default: the cores this process may use)"),
    context: int = typer.Option(DEFAULT_CONTEXT, "--context", min=1, help="context tokens of every arm; longer turns are left out"),
    tokens_per_block: Optional[int] = typer.Option(None, "--tokens-per-block", min=1,
                                                   help="hash-only traces: tokens per block id (default: fit context)"),
    min_speedup: float = typer.Option(CLAIM_MIN_SPEEDUP, "--min-speedup", callback=_finite,
                                      help="gate: required speed-up over the best llama.cpp arm (any other than the "
                                           f"claim's {CLAIM_MIN_SPEEDUP:g}×: exploratory, never the claim's verdict)"),
    min_turns: int = typer.Option(CLAIM_MIN_TURNS, "--min-turns",
                                  help="gate: compared turns the verdict needs (any other than the claim's: "
                                       "exploratory)"),
    margin: float = typer.Option(CLAIM_MARGIN_SD, "--margin", callback=_finite,
                                 help="equal work: how far (σ of the logits) below the scorer's top token an arm's "
                                      "token may lie and still be a greedy choice, a near-tie (stated in every "
                                      "finding; any other than the claim's, wider or narrower: exploratory; see "
                                      "docs/loop.md)"),
    reference: Optional[str] = typer.Option(None, "--reference",
                                            help="the arm every output is shown against, beside its greedy score "
                                                 "(default: the run's first plain arm that ran, llama.cpp first)"),
    on_target: bool = typer.Option(False, "--on-target",
                                   help="declare target hardware with a certified model: needs a GPU here and "
                                        "--certified"),
    certified: Optional[Path] = typer.Option(None, "--certified",
                                             help="with --on-target: file listing the certified models, one a line"),
    arm_model: Optional[List[str]] = typer.Option(None, "--arm-model", help="ARM=MODEL: that arm runs the same model "
                                                  "in its engine's format, e.g. trtllm=/models/llama-hf (repeatable)"),
    scorer_model: Optional[str] = typer.Option(None, "--scorer-model",
                                               help="the GGUF the greedy scorer runs (default: the subject's model at "
                                                    "its precision, converted where it is a synthetic checkpoint)"),
) -> None:
    """Agentic-loop benchmark: replay a trace through the arms; one finding per arm and one gate finding."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from . import loop, metrics
    from .loop.equal import EqualWork
    from .findings import FindingNotSaved
    from .loop.gate import GateRule
    from .loop.table import arm_table

    _writable(out)
    try:
        rule = GateRule(min_speedup=min_speedup, min_turns=min_turns)
        work = EqualWork(margin_sd=margin, reference=reference)
        arm_models = _kv(arm_model or [], option="--arm-model")
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      transient=True) as bar:
            task = bar.add_task("rendering turns", total=None)

            def progress(row: dict, done: int, total: int) -> None:
                bar.update(task, description=f"session {row['session']} turn {row['turn']} on {row['arm']}",
                           completed=done, total=total)

            res = loop.run(trace, arms=arms, model=model, turns=turns, sessions=sessions, out=out, threads=threads,
                           context_tokens=context, tokens_per_block=tokens_per_block, rule=rule, on_target=on_target,
                           certified=certified, work=work, arm_models=arm_models, scorer_model=scorer_model,
                           progress=progress)
    except FindingNotSaved as e:
        _not_saved(e)
    except KeyboardInterrupt:
        _interrupted("the loop was stopped and no finding was written")
    except (WorkbenchError, ValueError) as e:
        _fail(str(e))
    typer.echo(f"{res.workload['trace']}: {res.workload['turns']} turns ({res.workload['dropped_turns']} left out), "
               f"{res.workload['threads']} threads; {res.workload['rule']}")
    for f, path in zip(res.findings, res.paths):
        typer.echo(f"{f.probe:<20} {f.verdict:<12} {f.summary if f.verdict != 'not-run' else f.reason}")
        for tag, m in f.metrics.items():
            typer.echo(f"  {metrics.get(tag).header:<30} {metrics.render(tag, m['value'])}")
        typer.echo(f"  finding: {path}")
    typer.echo("\nThe arms side by side:\n" + arm_table(res.findings).text())


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def serve(
    ctx: typer.Context,
    engine: str = typer.Argument(..., help="llamacpp-server | vllm-server | trtllm-serve"),
    model: str = typer.Option(..., "--model", "-m", help="model spec (GGUF for llama-server, HF directory or "
                                                         "synthetic:… for the others)"),
    port: int = typer.Option(0, "--port", help="port to bind (default: one the OS picks)"),
    host: str = typer.Option("127.0.0.1", "--host", help="address to bind; not loopback needs --api-key"),
    api_key: Optional[str] = typer.Option(None, "--api-key", envvar="WORKBENCH_API_KEY", help="the server's API key "
                                          "(it reaches the server in its environment, never its command line; "
                                          "WORKBENCH_API_KEY or --api-key-file keep it out of this command's too)"),
    api_key_file: Optional[Path] = typer.Option(None, "--api-key-file", help="read the API key from this file's first "
                                                "line"),
    slots: int = typer.Option(1, "--slots", help="parallel slots (llama-server -np)"),
    threads: int = typer.Option(1, "--threads", help="engine threads"),
    log_dir: Path = typer.Option(Path("runs/servers"), "--log-dir", help="where the server's log goes"),
) -> None:
    """Start a served engine on loopback, print its URL and log, and stop it on Ctrl-C (arguments after `--`
    go to the server as they are)."""
    import time

    from . import cells, isolate, serve as _serve
    from .files import check_writable

    if engine not in cells.SERVED:
        _fail(f"unknown served engine {engine!r}; valid: {', '.join(cells.SERVED)}")
    if api_key_file is not None:
        api_key = _key_from(api_key_file, api_key)
    _env_folders()
    try:
        _serve.check_extra_args(ctx.args)
        _serve.check_host(host, api_key)
        _serve.check_port(host, port)
        check_writable(log_dir, "--log-dir", "no server was started")
        cell = cells.open_cell(engine, model, port=port, host=host, api_key=api_key, slots=slots, threads=threads,
                               server_args=tuple(ctx.args), log_dir=str(log_dir),
                               **({"kv_events": False} if cells.takes(engine, ["kv_events"]) else {}))
    except isolate.EngineCrashed as e:
        _fail(str(e), isolate.CRASH_EXIT_CODE)
    except (WorkbenchError, ValueError, TypeError) as e:
        _fail(str(e))
    except KeyboardInterrupt:
        _interrupted("the server was stopped before it was ready")
    try:
        with cell:
            d = cell.describe()
            typer.echo(f"{engine} {d.extra.get('server_version', d.engine_version)} serving {model} at {cell.url}")
            typer.echo(f"log: {cell.server.log_path} (pid {cell.server.pid})\npress Ctrl-C to stop")
            while (dead := cell.server.died()) is None:
                time.sleep(0.5)
    except KeyboardInterrupt:
        _interrupted("the server was stopped")
    _fail(str(dead), isolate.CRASH_EXIT_CODE)


def _key_from(path: Path, given: Optional[str]) -> str:
    """The API key on the first line of ``path`` (``--api-key-file``); exit 2 where it cannot be one."""
    if given:
        _fail("give --api-key (or WORKBENCH_API_KEY) or --api-key-file, not both")
    try:
        lines = path.read_text().splitlines() if path.is_file() else []
    except (OSError, UnicodeDecodeError) as e:
        _fail(f"--api-key-file {path}: cannot be read ({getattr(e, 'strerror', None) or e})")
    key = lines[0].strip() if lines else ""
    if not key:
        _fail(f"--api-key-file {path}: give a file whose first line is the key")
    return key


cell_app = typer.Typer(add_completion=False, no_args_is_help=True,
                       help="The cell on modeld's wire: serve an engine behind modeld's session contract.")


@cell_app.command("serve")
def cell_serve(
    engine: str = typer.Option(..., "--engine", "-e", help="llamacpp | vllm | trtllm (an in-process engine)"),
    model: str = typer.Option(models.DEFAULT_MODEL, "--model", "-m", help="model spec"),
    port: int = typer.Option(0, "--port", help="port to bind (default: one the OS picks, printed)"),
    host: str = typer.Option("127.0.0.1", "--host", help="address to bind; not loopback needs --api-key"),
    api_key: Optional[str] = typer.Option(None, "--api-key", envvar="WORKBENCH_API_KEY",
                                          help="every call but Health must carry 'authorization: Bearer KEY'"),
    api_key_file: Optional[Path] = typer.Option(None, "--api-key-file", help="read the API key from this file's first "
                                                "line (out of this command's own `ps` line)"),
    context: int = typer.Option(0, "--ctx", min=0, help="the engine's context in tokens (0: the engine's default)"),
    slots: int = typer.Option(4, "--sessions", min=1, help="sessions open at once (the engine cell's slots)"),
    threads: int = typer.Option(0, "--threads", min=0, help="engine threads (0: the engine's default)"),
    defer: Optional[bool] = typer.Option(None, "--defer-prefill/--no-defer-prefill",
                                         help="PrefillSuffix deferred to the next decode (default: the backend's)"),
    backend: Optional[str] = typer.Option(None, "--backend", help="the backend word Health and Status answer "
                                                                   "(default 'llama', what a modeld-era runtime knows)"),
) -> None:
    """Serve ENGINE on MODEL as modeld's cell: contenox.transport.v1.Compute on 127.0.0.1 (docs/transport.md).
    Stops cleanly on SIGTERM or Ctrl-C: the server, every session and the engine."""
    from . import cells, serve as _serve
    from .transport.daemon import Daemon, serve_forever

    if engine not in cells.served_as_cell():
        _fail(f"engine {engine!r} is not served as a cell; cell engines: {', '.join(cells.served_as_cell())}")
    if api_key_file is not None:
        api_key = _key_from(api_key_file, api_key)
    _env_folders()
    options = {k: v for k, v in {"context_tokens": context or None, "threads": threads or None}.items() if v}
    try:
        _serve.check_port(host, port)  # out of range or taken: refused before the engine loads
        models.check(model)
        avail = cells.availability(engine)
        if not avail.available:
            _fail(f"{engine} cannot run here: {avail.reason}")
        daemon = Daemon(engine, model, host=host, port=port, api_key=api_key, options=options, slots=slots,
                        defer_prefill=defer)
        if backend:
            daemon.service.backend = backend
        code = serve_forever(daemon, announce=lambda line: typer.echo(line, err=False))
    except (WorkbenchError, ValueError, TypeError, OSError) as e:
        _fail(str(e))
    except Exception as e:  # noqa: BLE001 - a contract error at load (model_load_failed) is a clear one-liner too
        _fail(f"{type(e).__name__}: {e}")
    raise typer.Exit(code)


app.add_typer(cell_app, name="cell")


@app.command()
def evaltable(
    backend: List[str] = typer.Option(["llamacpp-server"], "--backend", "-b",
                                      help="llamacpp-server | vllm-server | trtllm-serve | triton-ensemble | triton-llmapi (repeatable)"),
    model: str = typer.Option(models.DEFAULT_MODEL, "--model", "-m", help="model spec"),
    concurrency: str = typer.Option("1,2", "--concurrency", help="comma-separated concurrencies"),
    workload: str = typer.Option("no-prefix,prefix-1k", "--workload",
                                 help="comma-separated: no-prefix, prefix-1k, multi-turn"),
    repeats: int = typer.Option(2, "--repeats", help="AIPerf runs per cell"),
    out: Path = typer.Option(Path("runs/evaltable"), "--out", help="folder for the table and AIPerf's exports"),
    endpoint: Optional[str] = typer.Option(None, "--endpoint", help="measure the server at this URL instead of "
                                                                     "starting one (one --backend)"),
    requests: Optional[int] = typer.Option(None, "--requests", help="requests per cell (default 2 × concurrency, "
                                                                     "at least 4)"),
    prompt_tokens: int = typer.Option(64, "--prompt-tokens", help="tokens of each request's own prompt"),
    output_tokens: int = typer.Option(16, "--output-tokens", help="tokens each request decodes"),
    prefix_tokens: int = typer.Option(1024, "--prefix-tokens", help="shared prefix of the prefix-1k workload"),
    threads: int = typer.Option(1, "--threads", help="server threads"),
    prefix_caching: bool = typer.Option(True, "--prefix-caching/--no-prefix-caching",
                                        help="off: start each server with its own prefix caching off (the fault "
                                             "that must refute the prefix-caching finding)"),
    slo_ttft: float = typer.Option(2.0, "--slo-ttft", help="goodput's SLO: a request's TTFT at most this (s)"),
    slo_itl: float = typer.Option(0.1, "--slo-itl", help="goodput's SLO: a request's ITL at most this (s)"),
    ttft_crosscheck: bool = typer.Option(True, "--ttft-crosscheck/--no-ttft-crosscheck",
                                         help="the workbench's served cell times a shared-prefix run's repeats again "
                                              "beside AIPerf's TTFT (workbench-timed, settles nothing)"),
) -> None:
    """Seed 004's eval-backend table: output tokens/s, requests/s, TTFT p50/p95, ITL and end-to-end latency per
    backend × workload × concurrency, measured with AIPerf against a server started on loopback."""
    from .evaltable import run as _run
    from .files import check_writable

    try:
        req = _run.TableRequest(tuple(backend), model, _ints(concurrency, "--concurrency"),
                                tuple(w.strip() for w in workload.split(",") if w.strip()), repeats, out,
                                endpoint=endpoint, requests=requests, prompt_tokens=prompt_tokens,
                                output_tokens=output_tokens, prefix_tokens=prefix_tokens, threads=threads,
                                prefix_caching=prefix_caching, slo_ttft_s=slo_ttft, slo_itl_s=slo_itl,
                                ttft_crosscheck=ttft_crosscheck)
        req.check()
        check_writable(out)
        rows, as_json, as_md = _run.run(req, progress=lambda what: typer.echo(what, err=True))
    except KeyboardInterrupt:
        _interrupted("the server and AIPerf were stopped and no table was written")
    except (WorkbenchError, ValueError) as e:
        _fail(str(e))
    typer.echo(as_md.read_text())
    typer.echo(f"table: {as_json} and {as_md}; prefix-caching findings: {out / 'findings'}")


def _ints(text: str, what: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        _fail(f"{what} takes comma-separated integers, got {text!r}")


from .events.cli import app as _events_app  # noqa: E402 - the sub-app after the commands it sits beside

app.add_typer(_events_app, name="events")

from .certify.cli import app as _certify_app  # noqa: E402 - the sub-app after the commands it sits beside

app.add_typer(_certify_app, name="certify")


def main() -> None:
    """Every command inside :func:`workbench.lifecycle.command`: its signals, its temp root, its reaper. A command a
    signal stopped ends with one line and ``128 + signal`` (whatever its unwinding raised is part of stopping)."""
    from . import lifecycle

    code: object = 0
    try:
        with lifecycle.command():
            try:
                app()
            except SystemExit as e:
                code = e.code
    except BaseException:  # noqa: BLE001 - a signal during start-up or cleanup; anything else is re-raised
        if lifecycle.received() is None:
            raise
    if lifecycle.stopped_by_signal() is not None:
        if not _SAID_INTERRUPTED:
            lifecycle.say(lifecycle.interrupted_line(None, "stopped; nothing it started is left running"))
        code = lifecycle.exit_code()
    sys.exit(code)


if __name__ == "__main__":
    main()
