"""``workbench events``: watch an endpoint's event plane; write the verdicts back into the gateway guide."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import List, Optional

import typer

from ..engine import WorkbenchError
from ..files import OutputError, check_env_folders
from ..params import check_hash_seed
from .guide import GUIDE
from .sources import EndpointFault

app = typer.Typer(no_args_is_help=True, help="The KV event plane: a gateway's consumer of one endpoint.")

DROPPED_EXIT = 3
"""``watch``'s exit when an endpoint that had answered rightly stops answering (2 is a wrong endpoint)."""


def _fail(msg: str, code: int = 2) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code)


def _seconds(value: Optional[float]) -> Optional[float]:
    """Option callback: a duration is a finite number of seconds above 0 (NaN compares false: it never ends)."""
    if value is not None and not 0 < value < float("inf"):
        raise typer.BadParameter(f"give a finite number of seconds above 0, got {value}")
    return value


def _watch(endpoint: str, replay: Optional[str], timeout: float, block_size: int, hash_seed: Optional[str],
           hash_algo: str):
    """The stream at ``endpoint``, from the engine that declares its form (the registry's ``watched_at``)."""
    from .. import cells

    engine = cells.watched_at(endpoint)
    if engine is None:
        _fail(f"--endpoint {endpoint!r}: give {cells.watch_forms()} event endpoint")
    return cells.event_plane(engine).watch(endpoint, replay, timeout, block_size, hash_seed, hash_algo)


def _keep(drained: list[dict], url: str) -> str:
    """Where the events a failed watch drained now are: the drain took them from the engine for good, so they go
    to the recovery folder as JSON lines, exactly as the endpoint sent them (printed where it cannot take them)."""
    from ..files import atomic_write
    from ..findings import recovery_dir

    if not drained:
        return "no event was drained"
    text = "".join(json.dumps(e) + "\n" for e in drained)
    name = "".join(c if c.isalnum() or c in ".-" else "_" for c in url.split("://", 1)[-1])
    try:
        recovery_dir().mkdir(mode=0o700, exist_ok=True)
        path = atomic_write(recovery_dir() / f"events-{name}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.jsonl",
                            text, mode=0o600, overwrite=False)
    except OSError as e:
        sys.stdout.write(text)
        return f"the {len(drained)} events drained are printed above ({recovery_dir()} could not take them: {e})"
    return f"the {len(drained)} events drained are kept in {path} (one a line, as the endpoint sent them)"


@app.command()
def watch(
    endpoint: str = typer.Option(..., "--endpoint", help="trtllm-serve URL, or vLLM's ZMQ publisher (ipc://, tcp://)"),
    replay: Optional[str] = typer.Option(None, "--replay", help="vLLM's replay endpoint (KVEventsConfig.replay_endpoint)"),
    block_size: int = typer.Option(32, "--block-size", help="the engine's tokens per block"),
    hash_seed: Optional[str] = typer.Option(None, "--hash-seed", help="vLLM's PYTHONHASHSEED (unset: vLLM's default)"),
    hash_algo: str = typer.Option("sha256", "--hash-algo", help="vLLM's prefix_caching_hash_algo"),
    policy: str = typer.Option("replay", "--policy", help="resync on a gap: replay (where the engine keeps one) or clear"),
    steal: bool = typer.Option(False, "--steal", help="take the endpoint's lease from its live holder"),
    as_json: bool = typer.Option(False, "--json", help="one JSON line per refresh instead of the live view"),
    requests: Optional[Path] = typer.Option(None, "--requests", help="the gateway's JSONL request log to predict"),
    duration: Optional[float] = typer.Option(None, "--duration", callback=_seconds, help="stop after this many seconds"),
    interval: float = typer.Option(1.0, "--interval", callback=_seconds, help="seconds per refresh (vLLM)"),
    timeout: float = typer.Option(30.0, "--timeout", callback=_seconds,
                                  help="seconds trtllm-serve may take to connect and answer one "
                                  "drain (1.2's idle drain takes about 2 s)"),
) -> None:
    """Consume one endpoint's KV events (taking its lease) and show the inventory a gateway would hold.

    An endpoint that answers other than trtllm-serve 1.2's drain exits 2; one that stops answering after it had
    answered rightly exits 3. Either way the events drained so far (the drain is destructive) are kept in the
    recovery folder, and the message says how many and where."""
    from . import lease as _lease
    from . import watch as _watcher
    from .consumer import Consumer
    from .inventory import RESYNC, Inventory

    if policy not in RESYNC:
        _fail(f"--policy {policy!r}: valid: {', '.join(RESYNC)}")
    if not (math.isfinite(timeout) and timeout > 0):
        _fail(f"--timeout {timeout}: give a number of seconds above 0")
    try:
        check_hash_seed(hash_seed, "--hash-seed")
        check_env_folders("nothing was read")  # the lease is written under WORKBENCH_STATE
        held = _lease.acquire(endpoint, steal=steal)  # before anything is read from the endpoint
    except (_lease.LeaseHeld, OutputError, ValueError) as e:
        _fail(str(e))
    if held.note:
        typer.echo(held.note, err=True)
    try:
        watching = _watch(endpoint, replay, timeout, block_size, hash_seed, hash_algo)
    except (ValueError, typer.Exit) as e:
        held.release()
        if isinstance(e, typer.Exit):
            raise
        _fail(str(e))
    consumer = Consumer(watching.source, Inventory(watching.hasher), policy, None, held)
    try:  # a drain waits on the server (--timeout), a vLLM poll on the refresh (--interval)
        _watcher.watch(consumer, duration_s=duration, interval_s=watching.wait_s or interval,
                         as_json=as_json, requests=requests, out=sys.stdout)
    except EndpointFault as e:
        _fail(f"{e}; {_keep(e.drained, e.url)}", DROPPED_EXIT if e.dropped else 2)
    except WorkbenchError as e:
        _fail(str(e))
    finally:
        consumer.close()


@app.command()
def guide(
    findings_dirs: List[Path] = typer.Argument(..., help="findings folder(s)"),
    out: Optional[Path] = typer.Option(None, "--out", help="write here instead of data/guide/trtllm-gateway.md"),
    source: Path = typer.Option(Path("data") / GUIDE, "--guide", help="the guide to write back"),
    check: bool = typer.Option(False, "--check", help="exit 1 when the guide is out of date"),
) -> None:
    """Write the event-plane verdicts back into the gateway guide (managed blocks, as `workbench writeback`)."""
    from . import guide as _guide

    try:
        code = _guide.run_writeback(source, list(findings_dirs), "check" if check else "write", out)
    except WorkbenchError as e:
        _fail(str(e))
    raise typer.Exit(code)
