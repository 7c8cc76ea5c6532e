"""Every subcommand of ``workbench`` against bad paths, bad URLs, bad files and bad numbers: a clear error, never a
traceback (issue 36).

The commands are read from the typer app itself, so a new subcommand or parameter fails
:func:`test_every_parameter_is_swept` until it is given a row below (its inputs, or why it takes none).
Each case runs the real CLI in-process (typer's ``CliRunner``) under an alarm: a command that starts an engine or
a server on bad input runs past it and fails, naming the case. Traffic goes only to 127.0.0.1.
"""

from __future__ import annotations

import resource
import shutil
import signal
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import typer
from typer.testing import CliRunner

from workbench.cli import app

ROOT = Path(__file__).resolve().parents[1]
CASE_SECONDS = 20  # a bad input fails on its checks, long before this; an engine started on one runs past it
CASE_MEMORY = 8 << 30  # address space: an input that makes a command allocate without bound fails here, not the machine


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _file(tmp: Path, data: bytes, name: str) -> str:
    (tmp / name).write_bytes(data)
    return str(tmp / name)


def _dir(tmp: Path) -> str:
    (tmp / "a-folder").mkdir(exist_ok=True)
    return str(tmp / "a-folder")


#: Each bad input, made in the case's temporary folder.
BAD: dict[str, Callable[[Path], str]] = {
    "missing": lambda t: str(t / "no-such-thing"),
    "folder": _dir,
    "file": lambda t: _file(t, b"a file\n", "a-file.json"),
    "empty": lambda t: _file(t, b"", "empty.json"),
    "binary": lambda t: _file(t, bytes(range(256)) * 4, "garbage.json"),
    "latin1": lambda t: _file(t, "{\"caf\u00e9\": \"cr\u00e8me\"}\n".encode("latin-1"), "latin1.json"),
    "bad-json": lambda t: _file(t, b'{"a": [1, 2', "bad.json"),
    "bad-yaml": lambda t: _file(t, b"a: [1, 2\n  b: {\n", "bad.yaml"),
    "under-a-file": lambda t: str(Path(_file(t, b"x", "regular")) / "below"),  # unwritable even for root
    "closed-port": lambda t: f"http://127.0.0.1:{_closed_port()}",
    "malformed-url": lambda t: "http://127.0.0.1:notaport/[",
    "huge": lambda t: "99999999999999999999",
    "nan": lambda t: "nan",
    "negative": lambda t: "-1",
}

#: What each kind of parameter is fed.
KINDS: dict[str, tuple[str, ...]] = {
    "file-in": ("missing", "folder", "empty", "binary", "latin1", "bad-json", "bad-yaml", "under-a-file"),
    "dir-in": ("missing", "file", "under-a-file"),
    "run-in": ("missing", "file", "under-a-file", "folder"),  # a run folder: an empty folder is not one
    "dir-out": ("file", "under-a-file"),
    "file-out": ("folder", "under-a-file"),
    "model": ("missing", "folder", "empty", "binary", "latin1", "under-a-file"),
    "url": ("closed-port", "malformed-url"),
    "number": ("huge", "nan", "negative"),
    "limit": ("nan", "negative"),  # a count, a duration or a bar where a huge value means "all", "long" or "high"
}


@dataclass(frozen=True)
class Command:
    """One subcommand: a valid invocation (``{tmp}`` is the case's folder) and the kind of each parameter; a
    parameter that is not an input of these kinds maps to the reason it is not swept."""

    base: tuple[str, ...]
    params: dict[str, str]
    #: arguments a parameter needs beside it to be read at all (``--address`` only with ``--executor ray``)
    needs: dict[str, tuple[str, ...]] | None = None


NOT_INPUT = "a flag or a name, checked against a list (tests/test_cli.py)"
KEY_FILE = "a file whose first line is the key, any text (tests/test_faults.py)"
COMMANDS: dict[str, Command] = {
    "doctor": Command(("doctor", "--smoke", "--engine", "trtllm"),
                      {"as_json": NOT_INPUT, "smoke": NOT_INPUT, "engine": NOT_INPUT, "model": "model"}),
    "probes": Command(("probes",), {}),
    "probe": Command(("probe", "reuse.per_request_metrics", "--model", "synthetic:tiny", "--out", "{tmp}/findings"),
                     {"name": NOT_INPUT, "engine": NOT_INPUT, "model": "model", "out": "dir-out",
                      "param": "key=value, tests/test_cli.py", "cell": "key=value, tests/test_cli.py"}),
    "run": Command(("run", "--out", "{tmp}/run", "--only", "environment"),
                   {"out": "dir-out", "engine": NOT_INPUT, "model": "model", "param": "key=value, tests/test_cli.py",
                    "only": NOT_INPUT, "wait": NOT_INPUT, "verbose": NOT_INPUT, "executor": NOT_INPUT,
                    "address": "url", "matrix": "file-in", "job_timeout": "number", "lanes": "number"},
                   needs={"address": ("--executor", "ray")}),
    "findings": Command(("findings", "{tmp}"), {"dirs": "dir-in", "fmt": NOT_INPUT, "out": "file-out"}),
    "report": Command(("report", "{tmp}"), {"out": "run-in", "against": "run-in"}),
    "compare": Command(("compare", "{tmp}", "{tmp}"), {"before": "run-in", "after": "run-in"}),
    "writeback": Command(("writeback", "{tmp}/blueprint.md", "--findings", "{tmp}", "--out", "{tmp}/out.md"),
                         {"blueprint": "file-in", "findings_dirs": "dir-in", "dry_run": NOT_INPUT,
                          "check": NOT_INPUT, "out": "file-out"}),
    "bench": Command(("bench", "--model", "synthetic:tiny", "--rounds", "1", "--out", "{tmp}/bench.json"),
                     {"model": "model", "prompt_tokens": "number", "decode_tokens": "number", "rounds": "limit",
                      "out": "file-out"}),
    "loop": Command(("loop", "--trace", "taubench", "--arms", "llamacpp", "--model", "synthetic:tiny", "--turns", "1",
                     "--sessions", "1", "--out", "{tmp}/findings"),
                    {"trace": "file-in", "arms": NOT_INPUT, "model": "model", "turns": "limit",
                     "sessions": "limit", "out": "dir-out", "threads": "number", "context": "number",
                     "tokens_per_block": "limit", "min_speedup": "limit", "min_turns": "limit",
                     "margin": "number", "reference": NOT_INPUT, "on_target": NOT_INPUT, "certified": "file-in",
                     "arm_model": "model", "scorer_model": "model"},
                    needs={"certified": ("--on-target",)}),
    "serve": Command(("serve", "llamacpp-server", "--model", "synthetic:tiny", "--log-dir", "{tmp}/logs"),
                     {"engine": NOT_INPUT, "model": "model", "port": "number", "host": NOT_INPUT,
                      "api_key": NOT_INPUT, "api_key_file": KEY_FILE, "slots": "number", "threads": "number",
                      "log_dir": "dir-out"}),
    "cell serve": Command(("cell", "serve", "--engine", "llamacpp", "--model", "synthetic:tiny"),
                          {"engine": NOT_INPUT, "model": "model", "port": "number", "host": NOT_INPUT,
                           "api_key": NOT_INPUT, "api_key_file": KEY_FILE, "context": "limit", "slots": "number",
                           "threads": "limit", "defer": NOT_INPUT, "backend": NOT_INPUT}),
    "certify gates": Command(("certify", "gates", "--engine", "vllm", "--model", "synthetic:tiny", "--out",
                              "{tmp}/findings"),
                             {"engine": NOT_INPUT, "model": "model", "subject_model": "model",
                              "tiers": "a comma list, tests/certify/test_matrix.py", "runs": "limit",
                              "output_tokens": "limit", "memory_budget_mib": "limit",
                              "serve_kv": NOT_INPUT, "timed_kv": NOT_INPUT, "speculation": NOT_INPUT,
                              "threads": "limit", "on_target": NOT_INPUT, "certified": "file-in", "out": "dir-out"},
                             needs={"certified": ("--on-target",)}),
    "certify quality": Command(("certify", "quality", "--engine", "llamacpp", "--model", "synthetic:tiny", "--out",
                                "{tmp}/findings"),
                               {"engine": NOT_INPUT, "model": "model", "threads": "limit", "out": "dir-out"}),
    "certify matrix": Command(("certify", "matrix", "{tmp}"),
                              {"folder": "dir-in", "json_out": "file-out", "csv_out": "file-out"}),
    "evaltable": Command(("evaltable", "--model", "synthetic:tiny", "--repeats", "1", "--out", "{tmp}/table"),
                         {"backend": NOT_INPUT, "model": "model", "concurrency": "a comma list, tests/evaltable",
                          "workload": NOT_INPUT, "repeats": "limit", "out": "dir-out", "endpoint": "url",
                          "requests": "limit", "prompt_tokens": "number", "output_tokens": "number",
                          "prefix_tokens": "number", "threads": "number", "prefix_caching": NOT_INPUT,
                          "slo_ttft": "number", "slo_itl": "number", "ttft_crosscheck": NOT_INPUT}),
    "events watch": Command(("events", "watch", "--endpoint", "tcp://127.0.0.1:1", "--duration", "0.2"),
                            {"endpoint": "url", "replay": "url", "block_size": "limit", "hash_seed": NOT_INPUT,
                             "hash_algo": NOT_INPUT, "policy": NOT_INPUT, "steal": NOT_INPUT, "as_json": NOT_INPUT,
                             "requests": "file-in", "duration": "limit", "interval": "limit",
                             "timeout": "limit"}),
    "events guide": Command(("events", "guide", "{tmp}", "--guide", "{tmp}/guide.md", "--out", "{tmp}/g.md"),
                            {"findings_dirs": "dir-in", "out": "file-out", "source": "file-in", "check": NOT_INPUT}),
}

#: How a parameter is written on the command line when it is an option (else it is an argument: replaced in place).
ARM_MODEL = "llamacpp="  # --arm-model takes ARM=MODEL

#: Documented outcomes other than exit 2: ``findings`` reads a file as a finding and reports a corrupt one
#: (docs/cli.md); ``events watch --requests`` tails the gateway's log, so a log not written yet, or a line that is
#: not a request, is waited for or skipped (workbench.events.watch.RequestFeed).
EXITS: dict[tuple[str, str, str], tuple[int, ...]] = {
    ("findings", "dirs", "file"): (0,),
    **{("events watch", "requests", bad): (0,) for bad in ("missing", "empty", "binary", "latin1", "bad-json",
                                                           "bad-yaml")},
}


def _walk(group: typer.core.TyperGroup, prefix: str = ""):
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            yield from _walk(cmd, f"{prefix}{name} ")
        else:
            yield f"{prefix}{name}", cmd


def _app_commands() -> dict[str, list]:
    return {name: cmd.params for name, cmd in _walk(typer.main.get_command(app))}


def test_every_parameter_is_swept():
    """A subcommand or parameter added to the app without a row here fails, naming it."""
    found = {name: {p.name for p in params} for name, params in _app_commands().items()}
    assert set(found) == set(COMMANDS), f"unswept subcommands: {sorted(set(found) ^ set(COMMANDS))}"
    for name, params in found.items():
        assert params == set(COMMANDS[name].params), f"{name}: unswept parameters {sorted(params ^ set(COMMANDS[name].params))}"
    for cmd in COMMANDS.values():
        assert all(kind in KINDS or kind == NOT_INPUT or " " in kind for kind in cmd.params.values())


def _argv(name: str, param: str, bad: str, tmp: Path) -> list[str]:
    cmd = COMMANDS[name]
    spec = {p.name: p for p in _app_commands()[name]}[param]
    value = BAD[bad](tmp)
    if param == "arm_model":
        value = ARM_MODEL + value
    argv = [a.replace("{tmp}", str(tmp)) for a in cmd.base]
    if spec.param_type_name == "argument":
        positional = [i for i, a in enumerate(argv) if i >= len(name.split()) and not a.startswith("-")
                      and not argv[i - 1].startswith("-")]
        arguments = [p.name for p in _app_commands()[name] if p.param_type_name == "argument"]
        argv[positional[arguments.index(param)]] = value  # the argument's own place (compare A B)
    else:
        opt = spec.opts[0]
        if opt in argv:
            argv[argv.index(opt) + 1] = value
        else:
            argv += [opt, value]
    return argv + list((cmd.needs or {}).get(param, ()))


def _cases():
    for name, cmd in COMMANDS.items():
        for param, kind in cmd.params.items():
            for bad in KINDS.get(kind, ()):
                key = (name, param, bad)
                yield pytest.param(*key, id="-".join(key).replace(" ", "_"))


class _RanLong(Exception):
    pass


class _Started(BaseException):
    """Raised where an engine or a server would start: no ``except Exception`` in the CLI can swallow it."""


def _start(*args, **kwargs):
    raise _Started("an engine or a server was started on bad input; check it before starting anything")


def _alarm(signum, frame):
    raise _RanLong(f"still running after {CASE_SECONDS} s: bad input started something instead of failing")


@pytest.fixture
def case_dir(tmp_path):
    shutil.copy(ROOT / "data/blueprint/blueprint.md", tmp_path / "blueprint.md")
    shutil.copy(ROOT / "data/guide/trtllm-gateway.md", tmp_path / "guide.md")
    (tmp_path / "findings").mkdir()  # the case folder is a run folder (report, compare), with no findings yet
    return tmp_path


@pytest.mark.parametrize("name,param,bad", list(_cases()))
def test_bad_input_is_a_clear_error(name, param, bad, case_dir, monkeypatch):
    import llama_cpp

    monkeypatch.chdir(case_dir)
    monkeypatch.setenv("WORKBENCH_STATE", str(case_dir / "state"))  # the event plane's leases
    monkeypatch.setattr(llama_cpp, "llama_init_from_model", _start)  # every llama.cpp context: cells and bench
    monkeypatch.setattr("workbench.serve.start", _start)  # llama-server, vLLM, trtllm-serve
    argv = _argv(name, param, bad, case_dir)
    old, limits = signal.signal(signal.SIGALRM, _alarm), resource.getrlimit(resource.RLIMIT_AS)
    hard = limits[1]
    resource.setrlimit(resource.RLIMIT_AS, (CASE_MEMORY if hard == resource.RLIM_INFINITY else min(CASE_MEMORY, hard), hard))
    signal.alarm(CASE_SECONDS)
    try:
        r = CliRunner().invoke(app, argv)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        resource.setrlimit(resource.RLIMIT_AS, limits)
    said = r.stdout + r.stderr
    assert r.exception is None or isinstance(r.exception, SystemExit), (argv, r.exception, said)
    assert "Traceback" not in said, (argv, said)
    assert r.exit_code in EXITS.get((name, param, bad), (2,)), (argv, r.exit_code, said)
    if r.exit_code == 2:
        lines = r.stderr.strip().splitlines()
        ours = [line for line in lines if line.startswith("error: ")]
        assert ours == lines[-1:] or "Invalid value" in r.stderr, (argv, r.stderr)
