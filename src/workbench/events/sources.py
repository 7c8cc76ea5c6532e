"""Event sources behind one interface: every engine's KV events as :class:`workbench.engine.KvEvent`.

Each engine's sources live in its wing: vLLM's ZMQ subscriber (:class:`workbench.cells.vllm.events.Subscriber`,
in-process or from ``vllm serve``), TensorRT-LLM's drains (:mod:`workbench.cells.trtllm.sources`). Here: the
interface they share and a cell's own ``kv_events`` observer as a source. Which sources an engine offers
beyond that, its event plane says (:mod:`workbench.events.plane`).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ..engine import KvEvent, WorkbenchError


class EndpointFault(WorkbenchError):
    """An endpoint's stream answered something other than what its engine sends (``expected``), or stopped
    answering. ``dropped``: it had answered rightly before (a server that went away, not a wrong address).
    ``drained`` holds every event object it handed over: a destructive drain's events exist nowhere else, so the
    caller must keep them."""

    def __init__(self, url: str, answered: str, drained: list[dict], expected: str, *, dropped: bool = False) -> None:
        self.url, self.answered, self.drained, self.dropped = url, answered, drained, dropped
        super().__init__(f"{url} {answered}; expected {expected}")


@runtime_checkable
class EventSource(Protocol):
    engine: str
    endpoint: str

    def poll(self, timeout_s: float = 2.0) -> list[KvEvent]:
        """Every event since the last poll, oldest first."""

    def replay(self, start_seq: int, timeout_s: float = 5.0) -> list[KvEvent] | None:
        """The events from ``start_seq`` on that the engine still buffers; None where it keeps none."""

    def close(self) -> None: ...


class CellSource:
    """A cell's own ``kv_events`` observer (``drain_kv_events``), for probes on any engine that announces it; its
    replay is the cell's ``replay_kv_events`` where the cell has one (vLLM's replay socket), else none."""

    def __init__(self, cell: Any) -> None:
        self._cell = cell
        self.engine = cell.engine
        self.endpoint = f"cell:{cell.engine}:{id(cell):x}"

    def poll(self, timeout_s: float = 2.0) -> list[KvEvent]:
        return self._cell.drain_kv_events(timeout_s)

    def replay(self, start_seq: int, timeout_s: float = 5.0) -> list[KvEvent] | None:
        again = getattr(self._cell, "replay_kv_events", None)
        return again(start_seq, timeout_s) if again is not None else None

    def close(self) -> None:
        pass


class Lossy:
    """``source`` with a fault: :meth:`lose` makes it drop every event of the next ``n`` sequence numbers it would
    hand over, as a consumer that fell behind its socket's high-water mark loses them. Its replay is the source's
    own, so what the engine still buffers can be asked for again."""

    def __init__(self, source: EventSource) -> None:
        self.source, self.engine, self.endpoint = source, source.engine, source.endpoint
        self.pending = 0  # sequence numbers still to drop
        self.dropped: list[int] = []
        self._dropping: int | None = None  # the number being dropped (its batch may span two polls)

    def lose(self, n: int) -> None:
        self.pending += n

    def poll(self, timeout_s: float = 2.0) -> list[KvEvent]:
        kept = []
        for e in self.source.poll(timeout_s):
            if e.event_id == self._dropping:
                continue
            if self.pending:
                self.pending -= 1
                self._dropping = e.event_id
                self.dropped.append(e.event_id)
                continue
            kept.append(e)
        return kept

    def replay(self, start_seq: int, timeout_s: float = 5.0) -> list[KvEvent] | None:
        return self.source.replay(start_seq, timeout_s)

    def close(self) -> None:
        self.source.close()
