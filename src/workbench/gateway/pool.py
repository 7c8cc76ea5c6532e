"""A pool of served endpoints with their KV event streams: what a cache-aware gateway routes over.

Each endpoint is a served cell of a registered engine (``vllm-server`` here), started by the workbench's server
lifecycle (:mod:`workbench.serve` through the engine's wing) with its KV events on, its log in the run folder
(``<run>/pool/<endpoint>/``). The pool is one consumer per endpoint (the cell's own subscriber, fed into an
:class:`~workbench.events.consumer.Consumer` and its :class:`~workbench.events.inventory.Inventory`), and a
context manager: every server it started is stopped on leaving it, an exception or KeyboardInterrupt included
(and, beyond that, by the lifecycle's atexit, SIGTERM and parent-death hooks).

A gap in an endpoint's event sequence numbers (events lost between the engine and its consumer) is resynced from
the engine's replay buffer where it keeps one (vLLM: ``KVEventsConfig.replay_endpoint`` on a socket in a short
folder of the pool's own, ``buffer_steps`` batches): the missed batches are applied and the inventory stays whole;
only where the buffer no longer holds them (or the engine keeps none) is the inventory cleared and rebuilt from
later events. :meth:`Endpoint.lose` drops batches on the consumer's side (the fault that makes such a gap).

Admission (the guide's "confirm each endpoint's /server_info reports the expected block size"): each endpoint's
``/server_info`` is read through the engine's event plane (:func:`workbench.probes.events_admission.read_contract`)
and the gateway's gate applied to the rule's block size; the block size the engine's own stored events show and
whether the rule's hash recomputes them is checked beside it, on a warm-up request, since vLLM answers
``/server_info`` only in its dev mode (nothing reported: admitted as legacy, the blind spot the guide warns of).

Endpoints on several machines (the Ray fleet) are not pooled yet: every endpoint here is a local process.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import tempfile
import time
import uuid
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import AbstractSet, Any, Callable, Iterator, Mapping

import numpy as np

from .. import cells, serve
from ..engine import Cell, KvEvent, WorkbenchError
from ..events.consumer import Consumer
from ..events.hashing import Hasher
from ..events.inventory import Inventory
from ..events.sources import CellSource, Lossy
from ..probes.common import token_ids
from ..probes.events_admission import engine_block_size, gate, read_contract
from .client import complete


@dataclass
class Endpoint:
    """One served engine in the pool, with its sole event consumer and its inventory over time."""

    name: str
    cell: Cell
    consumer: Consumer
    url: str
    served_model: str
    log_path: str
    alive: bool = True
    admission: dict = field(default_factory=dict)
    timeline: list[dict] = field(default_factory=list)  # (t, blocks in the inventory) after every pump

    @property
    def inventory(self) -> Inventory:
        return self.consumer.inventory

    def lose(self, batches: int) -> None:
        """Fault: the consumer loses the next ``batches`` sequence numbers the endpoint publishes (a gap)."""
        source = self.consumer.source
        if not isinstance(source, Lossy):
            raise WorkbenchError(f"endpoint {self.name}'s consumer takes no loss fault")
        source.lose(batches)

    def resyncs(self) -> dict[str, int]:
        """The gaps the consumer saw in the engine's own sequence numbers, recovered from its replay buffer apart
        from cleared (:meth:`Consumer.resyncs`)."""
        return self.consumer.resyncs()

    def pump(self, timeout_s: float = 0.3, t0: float = 0.0) -> list[KvEvent]:
        """Apply every event the endpoint published since the last pump; those events."""
        if not self.alive:
            return []
        got = self.consumer.pump(timeout_s)
        self.timeline.append({"endpoint": self.name, "t_s": round(time.monotonic() - t0, 3),
                              "inventory_blocks": len(self.inventory), "events": self.consumer.events})
        return got


@dataclass(frozen=True)
class PoolSpec:
    """``size`` endpoints of ``engine`` on ``model``; ``options``: the cell options every endpoint gets (its KV
    budget, threads); the pool adds its events, its hash seed where the engine takes one, and its log folder."""

    size: int = 2
    engine: str = "vllm-server"
    model: str = "synthetic:cpu"
    options: Mapping[str, Any] = field(default_factory=dict)
    hash_seed: str = "0"
    replay_steps: int = 1000  # batches each endpoint keeps for a consumer's resync, where the engine keeps any

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"a pool needs at least one endpoint, got {self.size}")
        if cells.event_plane(self.engine) is None:
            raise ValueError(f"engine {self.engine!r} publishes no KV event stream this workbench reads; a KV-exact "
                             "pool needs one (e.g. vllm-server)")


class EndpointCrashed(serve.ServerDied):
    """An endpoint's server exited while the experiment ran, and no fault of the plan killed it: a crash, named with
    its exit status, the endpoint and its log's last lines, never a verdict (the experiment ends here)."""

    def __init__(self, signum: int | None, exitcode: int | None, step: str | None, log_tail: list[str],
                 log_path: str = "", endpoint: str = "") -> None:
        self.endpoint = endpoint
        super().__init__(signum, exitcode, step, log_tail, log_path)

    def headline(self) -> str:
        return f"endpoint {self.endpoint}: {super().headline()}; a crash settles nothing, so no verdict was drawn"

    def __reduce__(self):
        return (EndpointCrashed, (self.signum, self.exitcode, self.step, self.log_tail, self.log_path, self.endpoint))


#: How long an experiment that failed waits for a dying endpoint's server to exit, to name the crash behind it.
CRASH_WAIT_S = 3.0


def crashed(cells_by_name: Mapping[str, Cell], faulted: AbstractSet[str] = frozenset(),
            wait_s: float = 0.0) -> EndpointCrashed | None:
    """The first endpoint (not in ``faulted``: killed by the plan) whose server has exited, waiting up to ``wait_s``
    for one; None: every server this experiment started runs (an attached endpoint is not watched)."""
    deadline = time.monotonic() + wait_s
    while True:
        for name, cell in cells_by_name.items():
            server = getattr(cell, "server", None)
            dead = server.died("the experiment") if server is not None and name not in faulted else None
            if dead is not None:
                return EndpointCrashed(dead.signum, dead.exitcode, dead.step, dead.log_tail, dead.log_path, name)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.1)


@contextlib.contextmanager
def _closing(started: Future) -> Iterator[None]:
    """Close the cell ``started`` opened, once it has (a start that failed has nothing to close)."""
    try:
        yield
    finally:
        try:
            cell = started.result()
        except BaseException:  # noqa: BLE001 - the failed start is raised where its result is read
            cell = None
        if cell is not None:
            cell.close()


@contextlib.contextmanager
def started(opens: Mapping[str, Callable[[], Cell]], folder: Path,
            faulted: AbstractSet[str] = frozenset()) -> Iterator[dict[str, Cell]]:
    """Open every cell of ``opens`` side by side (a served cell starts its server as it opens: seconds each, so
    one after another would add them up) and yield them by name; every cell that started is closed on leaving,
    whichever start failed. An interrupt or a failed start stops at once the servers still starting whose log lies
    under ``folder``, and each that registers later as soon as it does (their starts then end as servers that died,
    instead of waiting to be ready only to be closed).

    A server that exited while the block ran, other than those named in ``faulted`` (the plan's own kills; the set
    may grow meanwhile), is :class:`EndpointCrashed`, raised as the block ends whether it failed (the crash behind a
    reset connection) or not (a crash its retries hid): no experiment on a crashed endpoint yields a verdict."""
    with contextlib.ExitStack() as stack, ThreadPoolExecutor(len(opens), thread_name_prefix="workbench-start") as ex:
        futures = {n: ex.submit(f) for n, f in opens.items()}
        for fut in futures.values():
            stack.enter_context(_closing(fut))
        try:
            cells_by_name = _results(futures)
        except BaseException:
            _stop_starting(folder, list(futures.values()))
            raise
        try:
            yield cells_by_name
        except Exception as e:
            crash = crashed(cells_by_name, faulted, CRASH_WAIT_S)
            if crash is not None:
                raise crash from e
            raise
        crash = crashed(cells_by_name, faulted)
        if crash is not None:
            raise crash


def _results(futures: Mapping[str, Future]) -> dict[str, Cell]:
    """Each start's cell; the first start that fails raises as soon as it does, not after the others are ready."""
    wait(futures.values(), return_when=FIRST_EXCEPTION)
    for fut in futures.values():
        if fut.done() and fut.exception() is not None:
            fut.result()
    return {n: fut.result() for n, fut in futures.items()}


def _stop_starting(folder: Path, starts: list[Future], poll_s: float = 0.1) -> None:
    """Stop every server under ``folder`` until each of ``starts`` has ended: a start that had not yet spawned or
    registered its server (a thread cannot be interrupted) is stopped the moment it has, not once it is ready. One
    stop that fails does not end the sweep; a start still running after the servers' own start limit is left to
    the exit hooks (serve.py), which stop every server this process started."""
    root, deadline = Path(folder).resolve(), time.monotonic() + serve.READY_TIMEOUT_S
    while time.monotonic() < deadline:
        for server in serve.live():
            if root in Path(server.log_path).resolve().parents:
                with contextlib.suppress(Exception):
                    server.stop(grace_s=5.0)
        if wait(starts, timeout=poll_s).not_done == set():
            return


class Pool:
    """``with Pool(spec, run_dir) as pool:`` — the endpoints, started in parallel and stopped on leaving."""

    def __init__(self, spec: PoolSpec, run_dir: str | os.PathLike) -> None:
        self.spec, self.run_dir = spec, Path(run_dir)
        self.endpoints: dict[str, Endpoint] = {}
        self._stack = contextlib.ExitStack()
        self._sockets = ""  # a short folder for the endpoints' replay sockets (an ipc:// path must be short)
        self.faulted: set[str] = set()  # endpoints the plan killed (:meth:`kill`): their death is no crash
        self.t0 = time.monotonic()

    def _cell_options(self, name: str) -> dict[str, Any]:
        o = dict(self.spec.options) | {"log_dir": str(self.run_dir / "pool" / name)}
        for key, value in (("kv_events", True), ("hash_seed", self.spec.hash_seed)):
            if cells.takes(self.spec.engine, [key]):
                o.setdefault(key, value)
        if self.spec.replay_steps and cells.takes(self.spec.engine, ["kv_events_config"]):
            o["kv_events_config"] = {"replay_endpoint": f"ipc://{self._sockets}/{name}",
                                     "buffer_steps": self.spec.replay_steps} | dict(o.get("kv_events_config") or {})
        return o

    def _open(self, name: str) -> Cell:
        return cells.open_cell(self.spec.engine, self.spec.model, **self._cell_options(name))

    def __enter__(self) -> "Pool":
        names = [f"ep{i}" for i in range(self.spec.size)]
        self._sockets = tempfile.mkdtemp(prefix="wbgw-")
        self._stack.callback(shutil.rmtree, self._sockets, True)  # last: once every server stopped
        try:
            cells_by_name = self._stack.enter_context(
                started({n: functools.partial(self._open, n) for n in names}, self.run_dir / "pool", self.faulted))
            for n in names:
                self.endpoints[n] = self._endpoint(n, cells_by_name[n])
        except BaseException:
            self._stack.close()
            raise
        self.t0 = time.monotonic()
        return self

    def _endpoint(self, name: str, cell: Cell) -> Endpoint:
        d = cell.describe()
        plane = cells.event_plane(self.spec.engine)
        hasher = plane.hasher(d, d.extra.get("kv_hash_seed"), d.block_tokens)
        consumer = Consumer(Lossy(CellSource(cell)), Inventory(hasher), policy="replay")
        self._stack.callback(consumer.close)
        server = getattr(cell, "server", None)
        return Endpoint(name, cell, consumer, str(d.extra.get("endpoint") or getattr(cell, "url", "")),
                        str(d.extra.get("served_model") or self.spec.model),
                        str(server.log_path) if server is not None else "")

    def __exit__(self, *exc: Any) -> bool:
        return bool(self._stack.__exit__(*exc))  # the block's exception reaches started(), which names a crash

    def check(self) -> None:
        """Raise :class:`EndpointCrashed` for an endpoint whose server exited and that the plan did not kill."""
        crash = crashed({n: e.cell for n, e in self.endpoints.items()}, self.faulted)
        if crash is not None:
            raise crash

    def alive(self) -> list[Endpoint]:
        return [e for e in self.endpoints.values() if e.alive]

    def pump(self, timeout_s: float = 0.3) -> int:
        """Every alive endpoint's pump, side by side (each waits for its stream to settle: one after another, the
        waits would add up after every wave); the events applied."""
        alive = self.alive()
        with ThreadPoolExecutor(max(len(alive), 1), thread_name_prefix="workbench-pump") as ex:
            return sum(len(got) for got in ex.map(lambda e: e.pump(timeout_s, self.t0), alive))

    def hasher(self, block_size: int | None = None) -> Hasher:
        """The rule's hasher: the engine's scheme as the first endpoint declares it, at ``block_size`` tokens per
        block (None: the endpoint's own)."""
        d = next(iter(self.endpoints.values())).cell.describe()  # the cell's own record: no request
        return cells.event_plane(self.spec.engine).hasher(d, d.extra.get("kv_hash_seed"), block_size or d.block_tokens)

    def admit(self, http: Any, rule_block: int, *, check_events: bool = True, seed: int = 0) -> list[dict]:
        """Each endpoint's admission against a rule of ``rule_block`` tokens per block, before any routing: what
        ``/server_info`` says and the gate's decision on it, beside the block size the engine's own stored events
        show for a warm-up prompt and whether the rule's hash recomputes them. ``check_events``: refuse a rule the
        events contradict (False: the gate alone, which admits anything where ``/server_info`` names nothing)."""
        rows = []
        plane = cells.event_plane(self.spec.engine)
        rule = self.hasher(rule_block)
        rng = np.random.default_rng(seed)
        for e in self.alive():
            r = http.get(f"{e.url}/server_info", params={"config_format": "json"}, timeout=30.0)
            doc = r.json() if r.headers.get("content-type", "").startswith("application/json") else None
            contract = read_contract(r.status_code, doc, plane)
            e.pump(0.2, self.t0)
            prompt = token_ids(rng, 4 * max(rule_block, e.cell.describe().block_tokens) + 1, e.cell.describe())
            salt = f"admission-{e.name}-{uuid.uuid4().hex[:8]}"  # new blocks, so the engine stores (and says) them
            complete(http, e.url, e.served_model, prompt, 1, salt)
            stored = [x for x in e.pump(1.0, self.t0) if x.kind == "stored"]
            hashes = {h for x in stored for h in x.block_hashes}
            engine_block = engine_block_size(stored)
            reproduces = bool(hashes) and set(rule.chain(prompt, salt)) <= hashes
            decision = gate(contract, rule_block)
            if check_events and decision.startswith("admitted") and not (engine_block == rule_block and reproduces):
                decision = "refused (the engine's events contradict the rule)"
            e.admission = {"endpoint": e.name, "status": r.status_code, "reported_block": contract.block_size,
                           "reported_hash": contract.hash_algo, "engine_block": engine_block, "rule_block": rule_block,
                           "rule_hash_reproduces": reproduces, "decision": decision}
            rows.append(e.admission)
        return rows

    def died(self, name: str) -> bool:
        """Whether endpoint ``name``'s server process has exited."""
        server = getattr(self.endpoints[name].cell, "server", None)
        return server is not None and not server.alive()

    def kill(self, name: str) -> None:
        """Fault: SIGKILL one endpoint's server process group (the engine dies as a crash would end it)."""
        server = getattr(self.endpoints[name].cell, "server", None)
        if server is None:
            raise WorkbenchError(f"endpoint {name} runs no server this pool started")
        self.faulted.add(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)
        server.proc.wait(30)
