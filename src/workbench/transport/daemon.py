"""The cell as a daemon: one engine on one model, served on modeld's wire (``workbench cell serve``).

:class:`Daemon` puts a :class:`~workbench.transport.service.SlotService` (the model slot, the wing's session adapter)
behind a :class:`~workbench.transport.wire.Server` on 127.0.0.1 (another address only with an API key, as
``workbench serve`` refuses one without), and hands out a :class:`~workbench.transport.wire.Client` of the same wire.
The probes run it inside their own process (the engine is imported there already) and talk to it over loopback TCP,
through the client, as the runtime would; ``workbench cell serve`` runs it in the foreground until SIGTERM or Ctrl-C,
then stops the server, closes every session and the engine, and exits 0. The engine runs in this process (llama.cpp
and TensorRT-LLM's LLM API in-process, vLLM's engine core in-process where it is the only one), so nothing outlives it.
"""

from __future__ import annotations

import signal
import time
from typing import Any, Callable, Sequence

from .capacity import Policy
from .contract import Config
from .manifest import AdapterSpec
from .service import DEFAULT_SLOTS, SlotService
from .session import CellSession
from .wire import Client, Server

LOOPBACK = "127.0.0.1"


def session_class(engine: str) -> type[CellSession]:
    """The wing's session adapter for ``engine`` (its registration's ``session`` fact)."""
    from .. import cells

    return cells.session_class(engine)


class Daemon:
    """A served cell: ``with Daemon(engine, model) as d: d.client()``. ``opener`` opens the engine cell (default
    :func:`workbench.cells.open_cell`; a probe passes its context's, which records the cell it opened)."""

    def __init__(self, engine: str, model: str, *, host: str = LOOPBACK, port: int = 0, api_key: str | None = None,
                 options: dict | None = None, slots: int = DEFAULT_SLOTS, defer_prefill: bool | None = None,
                 faults: bool = False, policy: Policy | None = None, adapters: Sequence[AdapterSpec] = (),
                 config: Config | None = None, session_cls: type[CellSession] | None = None,
                 opener: Callable[..., Any] | None = None, fence: bool = True, instance_id: str = "") -> None:
        from ..serve import check_host

        check_host(host, api_key, surfaces="modeld's wire has no authentication of its own (its fence is a "
                                          "freshness check, not a secret)")
        self.engine, self.model, self.host, self.port, self.api_key = engine, model, host, port, api_key
        cls = session_cls or session_class(engine)
        self.service = SlotService(engine, model, session_cls=cls, options=options, slots=slots,
                                   defer_prefill=defer_prefill, faults=faults, policy=policy, instance_id=instance_id)
        if opener is not None:
            self.service.opener = opener
        self.server = Server(self.service, api_key=api_key, fence=fence)
        self._adapters, self._config = tuple(adapters), config
        self._clients: list[Client] = []

    def start(self) -> "Daemon":
        self.service.start(self._adapters, self._config)
        try:
            self.port = self.server.start(self.host, self.port)
        except BaseException:
            self.service.close()
            raise
        return self

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def client(self, **kw: Any) -> Client:
        host = LOOPBACK if self.host in ("0.0.0.0", "::") else self.host
        c = Client(host, self.port, api_key=self.api_key, **kw)
        self._clients.append(c)
        return c

    def stop(self) -> None:
        while self._clients:
            try:
                self._clients.pop().close()
            except Exception:  # noqa: BLE001 - a client whose loop is gone is closed already
                pass
        try:
            self.server.stop()
        finally:
            self.service.close()

    def __enter__(self) -> "Daemon":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_forever(daemon: Daemon, announce: Callable[[str], None] = print) -> int:
    """Start ``daemon`` and serve until SIGTERM, SIGINT or SIGHUP; then stop cleanly and return 0.

    The signals are :mod:`workbench.lifecycle`'s, every command's: the first one stops the daemon even while its model
    loads (the server, every session and the engine, then one line on stderr), and is its ordinary end (exit 0,
    :func:`~workbench.lifecycle.stop_is_ordinary`); a second one while it stops ends the process at once, and the
    command's reaper ends whatever it had started."""
    from .. import lifecycle

    previous = {s: signal.getsignal(s) for s in lifecycle.SIGNALS}
    lifecycle.handle_signals()  # in place already under `workbench`; for a caller of its own too
    lifecycle.stop_is_ordinary()
    stopped_by = "?"
    try:
        daemon.start()
        svc = daemon.service
        announce(f"{daemon.engine} cell serving {daemon.model} on modeld's wire at {daemon.address} "
                 f"(contenox.transport.v1.Compute, instance {svc.instance_id}, backend {svc.backend!r}, "
                 f"generation {svc.generation})")
        announce("register with a modeld-era contenox runtime: contenox backend add NAME --type modeld --url "
                 f"{daemon.address}; stop with Ctrl-C or SIGTERM")
        while True:
            time.sleep(3600)
    except lifecycle.Interrupted as e:
        stopped_by = e.name
    finally:
        daemon.stop()
        for s, h in previous.items():
            if h is not None:
                signal.signal(s, h)
    lifecycle.say(f"stopped ({stopped_by}): the wire server, every session and the engine")
    return 0


__all__ = ["Daemon", "LOOPBACK", "serve_forever", "session_class"]
