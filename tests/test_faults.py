"""Faults end cleanly (issue 52's "Done when"): SIGINT, SIGTERM and SIGKILL of ``workbench run``, ``evaltable``,
``serve``, a gateway probe, ``cell serve`` and ``certify quality``, each at the moment it has the most running (a
probe's child under a notebook's kernel, AIPerf against its server, a server serving, a vLLM endpoint's engine core,
the cell on modeld's wire with its engine loaded, the quality smoke's child). SIGINT and SIGTERM end the command with one line on stderr, no traceback, and 128 + the
signal (``cell serve``, a daemon that a signal stops as it is meant to stop: 0); after every one of them, no process
the command started is left and nothing it made in temp.

What the command started is watched from outside, by this test, not by the workbench's own bookkeeping: the process
tree below the command, sampled while it runs (with each process's start time, so a reused pid is not confused for
it), the sessions and groups those processes lead (an engine core whose server crashed is re-parented to init but
stays in its server's session), and every process whose environment carries the test's temp folder. Each command
gets a temp folder of its own (``TMPDIR``): after the command, it must be empty. The SIGKILL of the gateway probe
comes after one endpoint crashed (its server killed, its engine core left): the case that left a ``VLLM::EngineCore``
running under init.

Every case runs side by side (each its own temp folder, run folder and ports): the suite pays about the slowest
start-up, not the sum of eighteen."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import TINY, require_engine

pytestmark = pytest.mark.slow
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)


def _stat(pid: int) -> dict | None:
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if f[0] in ("Z", "X") else {"ppid": int(f[1]), "pgid": int(f[2]), "sid": int(f[3]), "start": f[19]}


def _table() -> dict[int, dict]:
    return {int(n): s for n in os.listdir("/proc") if n.isdigit() and (s := _stat(int(n))) is not None}


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _in_temp(pid: int, base: Path) -> bool:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(v.startswith(b"TMPDIR=" + str(base).encode()) for v in env)


@dataclass
class Case:
    """One command stopped by one signal, and what it left."""

    signum: int
    base: Path
    out: Path
    before: set[int] = field(default_factory=set)
    seen: dict[int, tuple[str, str]] = field(default_factory=dict)  # pid -> (start time, command line)
    code: int | None = None
    stderr: str = ""
    ready: str = ""
    said: str = ""  # what the command printed on stdout before it was stopped

    @property
    def stdout(self) -> Path:
        return self.out.parent / f"{self.out.name}.stdout"

    def sample(self, root: int) -> dict[int, dict]:
        """Every process below ``root`` now, and every one carrying the case's temp folder, into :attr:`seen`."""
        t = _table()
        kids: dict[int, list[int]] = {}
        for pid, s in t.items():
            kids.setdefault(s["ppid"], []).append(pid)
        todo, below = [root], set()
        while todo:
            for c in kids.get(todo.pop(), []):
                below.add(c)
                todo.append(c)
        for pid in below | {p for p in t if p not in self.before and _in_temp(p, self.base)}:
            self.seen.setdefault(pid, (t[pid]["start"], _cmdline(pid)))
        return t

    def left(self) -> list[tuple[int, str]]:
        """What still runs of what the command started."""
        t = _table()
        leaders = set(self.seen)
        mine = {p for p, (start, _) in self.seen.items() if p in t and t[p]["start"] == start}
        mine |= {p for p, s in t.items() if p not in self.before and (s["sid"] in leaders or s["pgid"] in leaders)}
        mine |= {p for p in t if _in_temp(p, self.base)}
        return sorted((p, _cmdline(p)[:120]) for p in mine)


def _experiment_child(case: Case, t: dict) -> bool:
    """A probe's experiment is running: a process whose stderr is an isolated child's log (workbench.isolate)."""
    for pid in case.seen:
        try:
            if pid in t and "/wbc-" in os.readlink(f"/proc/{pid}/fd/2"):
                return True
        except OSError:
            continue
    return False


def _saying(text: str):
    """Ready once the command printed ``text`` on stdout (a daemon's address line: it serves)."""
    def ready(case: Case, t: dict) -> bool:
        return case.stdout.exists() and text in case.stdout.read_text()

    return ready


def _naming(text: str):
    """Ready once a process the case saw names ``text`` now (vLLM renames its engine core as it starts)."""
    def ready(case: Case, t: dict) -> bool:
        for pid in [p for p in case.seen if p in t]:
            if text in (now := _cmdline(pid)):
                case.seen[pid] = (case.seen[pid][0], now)
                return True
        return False

    return ready


def _run_case(args: list[str], signum: int, ready, crash: str | None, out: Path, timeout_s: float = 600) -> Case:
    base = Path(tempfile.mkdtemp(prefix="wbt-", dir="/tmp"))  # short: engines' unix sockets live below it
    case = Case(signum, base, out / signum.name, set(_table()))
    argv = [sys.executable, "-m", "workbench.cli", *[a.replace("OUT", str(case.out)) for a in args]]
    case.stdout.parent.mkdir(parents=True, exist_ok=True)
    with case.stdout.open("w") as stdout:
        proc = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.PIPE, text=True,
                                env=os.environ | {"TMPDIR": str(base)}, start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + timeout_s
        while not ready(case, case.sample(proc.pid)):
            assert proc.poll() is None, f"{args[0]} ended before it was stopped: {proc.stderr.read()[-2000:]}"
            assert time.monotonic() < deadline, f"{args[0]} never got there"
            time.sleep(0.3)
        case.ready = f"{round(timeout_s - (deadline - time.monotonic()))} s"
        for _ in range(5):  # what it starts next, too
            case.sample(proc.pid)
            time.sleep(0.2)
        case.seen = {p: (start, _cmdline(p) or cmd) for p, (start, cmd) in case.seen.items()}  # as they call themselves now
        case.said = case.stdout.read_text()
        if crash:  # an endpoint crashes first: its server dies by SIGKILL, what it started stays
            os.kill(next(p for p, (_, cmd) in case.seen.items() if crash in cmd), signal.SIGKILL)
            time.sleep(0.3)
        # Ctrl-C at a terminal reaches the whole foreground group; SIGTERM and SIGKILL come to the pid
        (os.killpg if signum == signal.SIGINT else os.kill)(proc.pid, signum)
        _, case.stderr = proc.communicate(timeout=300)
        case.code = proc.returncode
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 30  # the reaper's work after a SIGKILL takes a moment
    while (case.left() or any(base.iterdir())) and time.monotonic() < deadline:
        time.sleep(0.3)
    return case


COMMANDS = {
    # a notebook's kernel, the engine's forkserver and the probe's isolated child, mid-experiment
    "run": (lambda: require_engine("llamacpp"),
            ["run", "--out", "OUT", "-m", TINY, "--only", "reuse_metrics", "-p", "repeats=500"], _experiment_child, None),
    # llama-server and AIPerf's services, mid-measurement
    "evaltable": (lambda: require_engine("llamacpp-server"),
                  ["evaltable", "--backend", "llamacpp-server", "-m", TINY, "--concurrency", "1", "--workload",
                   "no-prefix", "--repeats", "1", "--requests", "400", "--out", "OUT"], _naming("aiperf"), None),
    "serve": (lambda: require_engine("llamacpp-server"),
              ["serve", "llamacpp-server", "-m", TINY, "--log-dir", "OUT/logs"], _naming("llama-server"), None),
    # a vLLM endpoint's server and engine core under the probe's child; SIGKILL after the server crashed
    "gateway probe": (lambda: require_engine("vllm-server"),
                      ["probe", "gateway.routing", "--engine", "vllm-server", "-m", "synthetic:cpu", "-p", "endpoints=1",
                       "--out", "OUT"], _naming("VLLM::EngineCore"), "vllm.entrypoints"),
    # the cell on modeld's wire, its engine (llama.cpp, in its process) loaded, serving
    "cell serve": (lambda: require_engine("llamacpp"),
                   ["cell", "serve", "--engine", "llamacpp", "-m", TINY, "--ctx", "512", "--threads", "1"],
                   _saying("cell serving"), None),
    # the quality smoke's experiment in its child (certify gates runs in the same kind of child)
    "certify quality": (lambda: require_engine("llamacpp"),
                        ["certify", "quality", "--engine", "llamacpp", "-m", "smollm2-135m", "--threads", "1", "--out",
                         "OUT"],
                        _experiment_child, None),
}
#: What each case must have seen running (a test that signalled an idle command would prove nothing).
MID_WORK = {"run": "ipykernel", "evaltable": "aiperf", "serve": "llama-server", "gateway probe": "VLLM::EngineCore",
            "cell serve": "cell serving", "certify quality": "multiprocessing"}  # a process it started, or (a daemon whose engine is in it) what it said
#: Commands a signal stops as they are meant to stop (daemons): exit 0 and their own last line.
ORDINARY_STOP = {"cell serve": "stopped ({signal}): "}


@pytest.fixture(scope="module")
def every_case(tmp_path_factory) -> dict[tuple[str, int], Case | str]:
    """Every command × signal, all side by side (each its own temp folder, run folder and ports): the suite pays
    about the slowest start-up (a vLLM endpoint's), not the sum. A command whose engine is not here: why not."""
    todo, cases = {}, {}
    for command, (check, args, ready, crash) in COMMANDS.items():
        try:
            check()
        except pytest.skip.Exception as e:
            cases |= {(command, s): str(e) for s in SIGNALS}
            continue
        out = tmp_path_factory.mktemp(command.replace(" ", "-"))
        todo |= {(command, s): (args, s, ready, crash if s == signal.SIGKILL else None, out) for s in SIGNALS}
    with ThreadPoolExecutor(max(len(todo), 1)) as ex:
        futures = {key: ex.submit(_run_case, *job) for key, job in todo.items()}
    return cases | {key: f.result() for key, f in futures.items()}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("signum", SIGNALS, ids=[s.name for s in SIGNALS])
def test_a_stopped_command_leaves_no_process_and_nothing_in_temp(every_case, command, signum):
    case = every_case[(command, signum)]
    if isinstance(case, str):
        pytest.skip(case)
    names = " ".join(cmd for _, cmd in case.seen.values()) + " " + case.said
    assert MID_WORK[command] in names, f"{command} was not stopped mid-work; it ran: {names[:2000]}"
    assert case.left() == [], f"left running after {signum.name} (ready after {case.ready}): {case.left()}"
    assert sorted(str(p.relative_to(case.base)) for p in case.base.rglob("*")) == []
    case.base.rmdir()
    if signum == signal.SIGKILL:  # the gateway probe's may have named its endpoint's crash first (exit 3)
        assert case.code == -signal.SIGKILL or (COMMANDS[command][3] and case.code == 3), case.stderr
        return
    ordinary = ORDINARY_STOP.get(command)
    assert case.code == (0 if ordinary else 128 + signum) and "Traceback" not in case.stderr, case.stderr
    last = case.stderr.strip().splitlines()[-1]
    assert last.startswith((ordinary or "interrupted ({signal}): ").format(signal=signum.name)), case.stderr
    assert not [line for line in case.stderr.strip().splitlines()[:-1] if not _progress(line)], case.stderr


def _progress(line: str) -> bool:
    """What a command says on stderr before the signal came (evaltable's progress line), which stays."""
    return line.startswith("llamacpp-server no-prefix at concurrency")
