"""Event sources behind one interface: every engine's KV events as :class:`workbench.contract.KvEvent`.

Each engine's sources live in its wing: vLLM's ZMQ subscriber (:class:`workbench.cells.vllm.events.Subscriber`,
in-process or from ``vllm serve``), TensorRT-LLM's drains (:mod:`workbench.cells.trtllm.sources`). Here: the
interface they share and a cell's own ``kv_events`` observer as a source. Which sources an engine offers
beyond that, its event plane says (:mod:`workbench.events.plane`).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ..contract import KvEvent, WorkbenchError


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
    """A cell's own ``kv_events`` observer (``drain_kv_events``), for probes on any engine that announces it."""

    def __init__(self, cell: Any) -> None:
        self._cell = cell
        self.engine = cell.engine
        self.endpoint = f"cell:{cell.engine}:{id(cell):x}"

    def poll(self, timeout_s: float = 2.0) -> list[KvEvent]:
        return self._cell.drain_kv_events(timeout_s)

    def replay(self, start_seq: int, timeout_s: float = 5.0) -> list[KvEvent] | None:
        return None

    def close(self) -> None:
        pass
