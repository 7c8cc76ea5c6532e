"""Every "resolve with" command the workbench prints for a GPU machine (the blueprint's and the report's resolve
line per claim, the gateway guide's, a not-run finding's, the eval table's trtllm-serve row) is one shell line that
pastes there: each part parses with the real CLI parser (click, under typer) with no error and nothing left over,
and names ``--model`` and ``--out``. Nothing runs: only the parser is asked."""

from __future__ import annotations

import re
import shlex

import pytest
import typer

from workbench import claims, standing
from workbench.cli import app
from workbench.evaltable.backends import NOT_HERE
from workbench.probes import ProbeContext
from workbench.probes.events_admission import served_command


def parse(line: str) -> list[tuple[str, dict]]:
    """Each ``&&``-joined command of ``line`` as (its subcommand path, its parsed parameters); raises on any error.
    The parser is the app's own (typer's click): subcommands are looked up by name, then the command's own
    arguments are parsed as the CLI would parse them, callbacks included; nothing is invoked."""
    out = []
    for part in line.split("&&"):
        argv = shlex.split(part, comments=True)
        assert argv[0] == "workbench", part
        cmd = typer.main.get_command(app)
        ctx = cmd.make_context("workbench", [], resilient_parsing=True)
        path, rest = [], argv[1:]
        while hasattr(cmd, "list_commands"):  # a group: the next word names its subcommand
            name, rest = rest[0], rest[1:]
            cmd = cmd.get_command(ctx, name)
            assert cmd is not None, f"{part!r}: no command {name!r}"
            path.append(name)
            if hasattr(cmd, "list_commands"):
                ctx = cmd.make_context(name, [], parent=ctx, resilient_parsing=True)
        ctx = cmd.make_context(path[-1], rest, parent=ctx)
        assert ctx.args == [], f"{part!r} leaves {ctx.args} unparsed"
        assert {"--model", "--out"} <= set(argv), f"{part!r} must name --model and --out"
        out.append((" ".join(path), ctx.params))
    return out


def _printed() -> list[str]:
    lines = [standing.resolve_command(c.id) for c in claims.CLAIMS.values()]
    lines.append(served_command(ProbeContext("trtllm", "HF_DIR", {})))
    lines += re.findall(r"`(workbench [^`]+)`", " ".join(NOT_HERE.values()))
    return [line for line in lines if line.startswith("workbench ")]


@pytest.mark.parametrize("line", sorted(set(_printed())))
def test_each_resolve_command_parses_with_the_real_cli_and_names_model_and_out(line):
    for path, params in parse(line):
        assert path in {"probe", "loop", "evaltable", "certify gates", "certify quality"} and params["out"] is not None \
            and params["model"]


def test_a_command_the_cli_would_refuse_is_caught_here():
    with pytest.raises(Exception, match="No such option"):
        parse("workbench probe prefix.warmup_materialization --engine trtllm --modle HF_DIR --out findings")
    with pytest.raises(AssertionError):
        parse("workbench probe prefix.warmup_materialization --engine trtllm --model HF_DIR, once per release")
