"""What the event plane asks of an engine with a KV event stream, answered in the engine's wing
(``cells/<engine>/plane.py``) and found through the registry (:func:`workbench.cells.event_plane`), never by
guessing the engine from its description's keys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable, Mapping, Protocol

from ..engine import Description
from .hashing import Hasher
from .sources import EventSource


@dataclass(frozen=True)
class Watch:
    """What ``workbench events watch`` consumes at one endpoint: its stream, the hasher of its blocks, and how long
    one refresh waits on it (None: the user's ``--interval``; a drain that blocks on the server waits its timeout)."""

    source: EventSource
    hasher: Hasher
    wait_s: float | None


class EventPlane(Protocol):
    def hasher(self, d: Description, seed: str | None, block_size: int) -> Hasher:
        """The client-side hasher for the scheme the cell declares, at ``block_size`` tokens per block; ValueError
        where the cell declares none this workbench reproduces."""

    def rule(self, doc: Mapping[str, Any]) -> tuple[int | None, str | None]:
        """The block size and hash algorithm the server's ``/server_info`` states (None where it states none)."""

    def rule_hasher(self, block_size: int, algo: str, d: Description) -> Hasher:
        """The hasher ``algo`` names at ``block_size``; ValueError for an algorithm this workbench does not
        reproduce."""

    def lora_key(self, d: Description) -> Hashable:
        """How the engine keys the blocks of a request carrying the cell's loaded adapter."""

    def subscribe(self, d: Description) -> EventSource | None:
        """A new, independent consumer of the cell's published stream, where its publisher binds an endpoint
        others can connect to; None where the stream has room for the cell's own consumer only."""

    def watch(self, endpoint: str, replay: str | None, timeout_s: float, block_size: int, seed: str | None,
              algo: str) -> Watch:
        """The stream at ``endpoint`` (one of the forms the engine declared as its facts' ``watched_at``), with
        ``replay`` where the engine keeps a replay buffer; ValueError naming the flag (``--endpoint``,
        ``--replay``) whose value this engine's stream cannot take."""


HOOKS = ("hasher", "rule", "rule_hasher", "lora_key", "subscribe", "watch")
"""The calls an engine's plane answers (:class:`EventPlane`'s methods), checked when the plane is first asked."""
