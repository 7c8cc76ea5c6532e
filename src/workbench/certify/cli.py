"""``workbench certify``: the gates G1–G3, the quality smoke, and the certification matrix of a run.

Errors a user can fix exit 2 with a one-line message naming what to fix; an engine crash is reported with its
signal and log tail (:class:`workbench.isolate.EngineCrashed`), never as a verdict.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from ..engine import WorkbenchError
from . import gates as _gates
from . import long_context as _lc

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Certify a cell the way modeld certifies one: the step-function gates, the quality smoke, the "
                       "certification matrix (docs/certify.md).")


def _fail(msg: str, code: int = 2) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code)


def _ints(text: str, what: str) -> tuple[int, ...]:
    try:
        got = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        got = ()
    if not got or min(got) < 1:
        _fail(f"{what} takes comma-separated positive integers, got {text!r}")
    return got


def _words(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _writable(out: Path) -> None:
    from ..files import check_writable

    if out.exists() and not out.is_dir():
        _fail(f"--out {out} is a file; it must be a findings folder (nothing was run)")
    try:
        check_writable(out)
    except WorkbenchError as e:
        _fail(str(e))


@app.command("gates")
def gates_cmd(
    engine: str = typer.Option(..., "--engine", "-e", help="the candidate engine (trtllm on a GPU; vllm on a CPU, a "
                                                          "reference that never answers the claims)"),
    model: str = typer.Option(_lc.DEFAULT_MODEL, "--model", "-m",
                              help="the model (a synthetic spec runs everywhere; a GGUF for llama.cpp otherwise)"),
    subject_model: Optional[str] = typer.Option(None, "--subject-model",
                                                help="the candidate's model in its engine's format (an HF folder of "
                                                     "the same checkpoint)"),
    tiers: str = typer.Option(",".join(map(str, _lc.LADDER)), "--tiers", help="the context ladder, tokens"),
    runs: int = typer.Option(_gates.CLAIM_MIN_RUNS, "--runs", min=1, help="runs of the whole ladder (p50/p90/p95 "
                                                                           "over them; the rules need 3)"),
    output_tokens: int = typer.Option(_lc.CLAIM_OUTPUT_TOKENS, "--output-tokens", min=1,
                                      help="G2's output cap (any other: exploratory)"),
    memory_budget_mib: Optional[float] = typer.Option(None, "--memory-budget-mib", min=0.001,
                                                      help="G1's KV budget for every arm (default: half the top tier "
                                                           "at 16-bit KV)"),
    serve_kv: str = typer.Option(",".join(_lc.SERVE_KV), "--serve-kv",
                                 help="llama.cpp KV precisions tried for G1 (any other set: exploratory)"),
    timed_kv: str = typer.Option(",".join(_lc.TIMED_KV), "--timed-kv",
                                 help="llama.cpp KV precisions timed for G2/G3 (match: the candidate's; any other: "
                                      "exploratory)"),
    speculation: str = typer.Option("auto", "--speculation", help="auto: llama.cpp's own speculation joins the "
                                                                  "baseline where the workload copies; always"),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="threads of every arm"),
    on_target: bool = typer.Option(False, "--on-target", help="the claim's run: an NVIDIA GPU read through NVML, every "
                                                              "model certified (--certified), llama.cpp holding every "
                                                              "layer on the GPU (off target: exploratory)"),
    certified: Optional[Path] = typer.Option(None, "--certified",
                                             help="with --on-target: file listing the certified models, one a line"),
    out: Path = typer.Option(..., "--out", help="findings folder (repeated runs into one folder pool their runs in "
                                                "the matrix)"),
) -> None:
    """G1–G3 between the candidate and the strongest llama.cpp baseline on one model: one finding, three claim rows."""
    from .. import isolate

    _writable(out)
    try:
        plan = _lc.Plan(engine, model, subject_model, tiers=_ints(tiers, "--tiers"), runs=runs,
                        output_tokens=output_tokens, serve_kv=_words(serve_kv), timed_kv=_words(timed_kv),
                        memory_budget_bytes=int(memory_budget_mib * 2**20) if memory_budget_mib else None,
                        threads=threads, speculation=speculation, on_target=on_target,
                        certified=str(certified) if certified else None)
        from .. import cells, models

        cells.ENGINES.check(engine)
        models.check(model)
        if subject_model:
            models.check(subject_model)
        _lc.verified_target(plan)  # before any engine starts: a GPU here, every model certified
        f = _lc.run_in_child(plan, out)
    except isolate.EngineCrashed as e:
        _fail(str(e), 1)
    except (WorkbenchError, ValueError) as e:
        _fail(str(e))
    if f is None:
        _fail(f"{engine} runs llama.cpp, the baseline itself: nothing to compare (give the candidate engine)")
    typer.echo(f.summary)
    typer.echo(f"finding: {out / (f.id + '.json')}")


@app.command("quality")
def quality_cmd(
    engine: str = typer.Option(..., "--engine", "-e", help="the engine"),
    model: str = typer.Option(..., "--model", "-m", help="model spec"),
    threads: Optional[int] = typer.Option(None, "--threads", min=1),
    out: Path = typer.Option(..., "--out", help="findings folder"),
) -> None:
    """The quality smoke of one engine on one model: A2 (warm suffix output = cold full prompt) and the task set."""
    from .. import cells, isolate, models
    from . import quality

    _writable(out)
    try:
        cells.ENGINES.check(engine)
        models.check(model)
        f = quality.run_in_child(engine, model, out=out, threads=threads)
    except isolate.EngineCrashed as e:
        _fail(str(e), 1)
    except (WorkbenchError, ValueError) as e:
        _fail(str(e))
    typer.echo(f.summary)


@app.command("matrix")
def matrix_cmd(
    folder: Path = typer.Argument(..., help="a run folder (its findings/) or a findings folder"),
    json_out: Optional[Path] = typer.Option(None, "--json", help="write the matrix as JSON here"),
    csv_out: Optional[Path] = typer.Option(None, "--csv", help="write the matrix as CSV here"),
) -> None:
    """The certification matrix of a run's findings, as a table; JSON and CSV on request."""
    from .. import findings
    from ..files import write_output
    from . import matrix

    for flag, path in (("--json", json_out), ("--csv", csv_out)):
        if path is not None and (path.is_dir() or any(p.exists() and not p.is_dir() for p in path.parents)):
            _fail(f"{flag} {path} is a folder or lies under a file: give a file path to write")
    where = folder / "findings" if (folder / "findings").is_dir() else folder
    if not where.is_dir():
        _fail(f"{folder} is neither a run folder nor a findings folder")
    scan = findings.scan([where])
    for path, err in scan.errors:
        print(f"skipping corrupt finding {path}: {err}", file=sys.stderr)
    dropped: list[str] = []
    cells_ = matrix.build(scan.findings, dropped)
    typer.echo("\n".join(matrix.markdown(cells_)))
    for d in dropped:
        print(f"left out: {d}", file=sys.stderr)
    try:
        if json_out:
            write_output(json_out, json.dumps(matrix.document(cells_, dropped), indent=1) + "\n")
        if csv_out:
            write_output(csv_out, matrix.csv_text(cells_))
    except (OSError, WorkbenchError) as e:
        _fail(f"cannot write the export: {getattr(e, 'strerror', None) or e}")


__all__ = ["app"]
