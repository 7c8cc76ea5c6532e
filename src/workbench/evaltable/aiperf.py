"""One AIPerf run (``aiperf profile --config``) per workload × repeat, each concurrency a profiling phase of it
(one start of AIPerf's services and one dataset for all the table's concurrencies: ``--concurrency 1,2`` would be
a sweep, each level a subprocess paying the start again), as a subprocess of its own environment.

AIPerf 0.13 pins versions of pandas, rich, pyzmq, plotly, huggingface_hub and others below the workbench's
(``pip install --dry-run aiperf==0.13.0`` in the workbench's environment would downgrade eight packages), so
``make setup`` gives it an environment of its own, ``.venv-aiperf``, and links its ``aiperf`` command beside the
workbench's Python, as it does llama-server. It runs:

- against a URL the caller's server answers on, fully offline: the tokenizer is a local folder
  (:mod:`.tokenizer`), token counts are the server's (``useServerTokenCount``, the CLI's
  ``--use-server-token-count``: the client counts prompts without the server's chat template), one connection
  per request (``connectionReuse: never``: a pooled connection failed "Can not write request body" here);
- with every file it writes in the run's folder: its configuration and exports there (each phase's summary in
  ``phases/c<N>/``, every request in ``profile_export.jsonl`` with its phase's name), and its
  scratch (IPC sockets, the dataset's memory maps, child logs: the temp folder, ``~/.cache/aiperf``) in a
  folder of its own that is removed when the run ends;
- in its own process group, ended (SIGTERM, then SIGKILL) when the run is stopped, and sent SIGTERM by the
  kernel when the workbench dies.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..engine import WorkbenchError
from ..files import tail, write_output
from ..serve import spawn

AIPERF_ENV = "WORKBENCH_AIPERF"  # an aiperf command to use instead of the one make setup linked
AIPERF_VERSION = "0.13.0"  # what this module is written against; the Makefile reads it from here and installs it
REQUEST_TIMEOUT_S = 600  # AIPerf's default is 6 h: a server that hangs would hold the table that long
CONFIG = "aiperf_config.json"  # the run's configuration, written beside its exports


@dataclass(frozen=True)
class Workload:
    """What each request of a cell sends: a prompt of ``prompt_tokens`` after a system prompt of
    ``shared_prefix_tokens`` every request shares (0: none), asking for exactly ``output_tokens``; with ``turns``
    above 1, conversations of that many turns, each turn sent with the earlier turns and their answers."""

    name: str
    shared_prefix_tokens: int = 0
    prompt_tokens: int = 64
    output_tokens: int = 16
    turns: int = 1

    def stop(self, requests: int) -> dict[str, int]:
        """A phase of ``requests`` requests: single ones, or ``requests / turns`` conversations (AIPerf counts a
        multi-turn phase in conversations, ``sessions``, not in requests)."""
        return {"requests": requests} if self.turns == 1 else {"sessions": requests // self.turns}

    def dataset(self, entries: int) -> dict[str, Any]:
        """AIPerf's synthetic dataset of ``entries`` conversations, cut from its default text corpus (its ``random``
        one, token ids drawn from the vocabulary, would save ~1.5 CPU-s a run, but decoded and tokenized again by
        the server they grow: 553 tokens for 300 asked on ``synthetic:cpu``'s tokenizer, past its context)."""
        out: dict[str, Any] = {"name": self.name, "type": "synthetic", "entries": entries,
                               "prompts": {"isl": {"mean": self.prompt_tokens, "stddev": 0},
                                           "osl": {"mean": self.output_tokens, "stddev": 0}}}
        if self.shared_prefix_tokens:
            out["prefixPrompts"] = {"sharedSystemLength": self.shared_prefix_tokens}
        if self.turns > 1:
            out["turns"] = {"mean": self.turns, "stddev": 0}
        return out


@dataclass(frozen=True)
class Cell:
    """One AIPerf run: a workload at each concurrency of ``levels`` in turn (``(concurrency, requests)``, one
    profiling phase each, named ``c<concurrency>``), against ``url``: one start of AIPerf's services and one
    dataset for all of them (each run of ``aiperf profile`` costs ~8 CPU-s before its first request)."""

    url: str
    served_model: str
    tokenizer: Path
    workload: Workload
    levels: tuple[tuple[int, int], ...]
    seed: int
    slo_s: tuple[float, float] = (2.0, 0.1)  # goodput's SLO: a request's TTFT and ITL at most these

    @property
    def requests(self) -> int:
        return sum(n for _, n in self.levels)

    def config(self, out: Path) -> dict[str, Any]:
        """The run as AIPerf's configuration (schema 2.0, ``aiperf profile --config``)."""
        w = self.workload
        return {"schemaVersion": "2.0", "randomSeed": self.seed, "benchmark": {
            "models": [self.served_model],
            # --use-server-token-count, --connection-reuse-strategy never; every request decodes the tokens asked
            # for (llama-server and vLLM both honour ignore_eos)
            "endpoint": {"urls": [self.url], "type": "chat", "streaming": True, "timeout": REQUEST_TIMEOUT_S,
                         "connectionReuse": "never", "useServerTokenCount": True, "extra": {"ignore_eos": True}},
            "tokenizer": {"name": str(self.tokenizer)},
            "datasets": [w.dataset(self.requests // w.turns)],
            "phases": [{"name": f"c{c}", "kind": "profiling", "type": "concurrency", "concurrency": c, **w.stop(n)}
                       for c, n in self.levels],
            "slos": {"time_to_first_token": self.slo_s[0] * 1e3, "inter_token_latency": self.slo_s[1] * 1e3},
            # no DCGM to scrape here, and the table reads the server's /metrics itself: two services fewer, and
            # no 2 s flush wait at the end of each run
            "gpuTelemetry": {"enabled": False}, "serverMetrics": {"enabled": False},
            "runtime": {"ui": "none", "workers": 1, "recordProcessors": 1},
            "artifacts": {"dir": str(out)}}}

    def argv(self, binary: str, config: Path) -> list[str]:
        return [binary, "profile", "--config", str(config)]


def binary() -> str | None:
    """``$WORKBENCH_AIPERF``, the ``aiperf`` ``make setup`` linked beside this Python, or one on PATH."""
    for cand in (os.environ.get(AIPERF_ENV), str(Path(sys.executable).parent / "aiperf"), shutil.which("aiperf")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def require() -> str:
    found = binary()
    if found is None:
        raise WorkbenchError(f"no aiperf command: `make setup` installs AIPerf {AIPERF_VERSION} into .venv-aiperf and "
                             f"links it beside the workbench's Python; or set {AIPERF_ENV} to an aiperf command")
    return found


class AiperfFailed(WorkbenchError):
    """AIPerf exited non-zero: its exit status and the last lines of its log."""


class ServerStopped(WorkbenchError):
    """The server stopped while AIPerf ran (AIPerf was ended): why, as ``server_gone`` said it."""


def run(cell: Cell, out: Path, *, server_gone: Callable[[], str | None], poll_s: float = 1.0) -> Path:
    """Run ``cell`` with its exports in ``out``; return ``out``. ``server_gone`` is asked every ``poll_s``: a
    reason (the server stopped) ends AIPerf at once and is raised as :class:`ServerStopped`."""
    out.mkdir(parents=True, exist_ok=True)
    config = write_output(out / CONFIG, json.dumps(cell.config(out), indent=1) + "\n")  # JSON is YAML
    scratch = Path(tempfile.mkdtemp(prefix="wb-aiperf-"))  # short: AIPerf's IPC socket paths live in it
    env = os.environ | {"TMPDIR": str(scratch), "XDG_CACHE_HOME": str(scratch / "cache"),
                        "HF_HOME": str(scratch / "hf"), "AIPERF_DATASET_MMAP_CACHE_ENABLED": "false",
                        "AIPERF_DATASET_MMAP_BASE_PATH": str(scratch)}
    log = out / "aiperf.log"
    try:
        with open(log, "wb") as sink:
            proc = spawn(cell.argv(require(), config), signal.SIGTERM, stdin=subprocess.DEVNULL, stdout=sink,
                         stderr=subprocess.STDOUT, env=env, close_fds=True)
            try:
                gone = _wait(proc, server_gone, poll_s)
            finally:
                _end(proc)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if not gone and proc.returncode:  # AIPerf may fail on a server that stopped before the poll saw it
        gone = server_gone()
    if gone:
        raise ServerStopped(gone)
    if proc.returncode:
        raise AiperfFailed(f"aiperf exited {proc.returncode} on {cell.workload.name} at concurrency "
                           f"{', '.join(str(c) for c, _ in cell.levels)} against {cell.url}; last lines of {log}:\n"
                           + "\n".join(f"  | {x}" for x in tail(log, 12)))
    return out


def _wait(proc: subprocess.Popen, server_gone: Callable[[], str | None], poll_s: float) -> str | None:
    while proc.poll() is None:
        gone = server_gone()
        if gone:
            return gone
        time.sleep(poll_s)
    return None


def _end(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """End AIPerf's process group (its services are its children): SIGTERM, then SIGKILL to what is left."""
    if proc.poll() is None:
        _signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
    _signal_group(proc, signal.SIGKILL)
    proc.wait()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
