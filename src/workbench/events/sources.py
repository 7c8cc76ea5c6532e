"""Event sources behind one interface: every engine's KV events as :class:`workbench.contract.KvEvent`.

- vLLM: ZMQ SUB (+ the replay ROUTER) — :class:`workbench.observe.vllm_events.Subscriber`, in-process (the
  cell's engine) or from ``vllm serve`` (:mod:`workbench.serve`).
- TensorRT-LLM 1.2: ``POST /kv_cache_events`` on ``trtllm-serve`` (:class:`TrtllmHttpSource`), or
  ``LLM.get_kv_cache_events(timeout)`` in-process (:class:`TrtllmLlmSource`). Both drain one shared queue
  (``executor.aget_kv_events`` returns the executor's single ``IterationResult``), so each event reaches one
  caller; there is no replay. Written against the 1.2 source; not run here (no GPU). ``/health_generate``
  (a real one-token request) creates ``stored`` events, and ``/metrics`` and ``/perf_metrics`` drain their own
  queues: none of them may be a monitoring target beside a consumer.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ..contract import KvEvent
from ..observe import trtllm_events


@runtime_checkable
class EventSource(Protocol):
    engine: str
    endpoint: str

    def poll(self, timeout_s: float = 2.0) -> list[KvEvent]:
        """Every event since the last poll, oldest first."""

    def replay(self, start_seq: int, timeout_s: float = 5.0) -> list[KvEvent] | None:
        """The events from ``start_seq`` on that the engine still buffers; None where it keeps none."""

    def close(self) -> None: ...


def vllm(*, connect: str | None = None, replay: str | None = None) -> EventSource:
    """vLLM's stream: a SUB bound on loopback for the publisher to connect to, or connected to ``connect``."""
    from ..observe import vllm_events

    return vllm_events.Subscriber(connect=connect, replay=replay)


class TrtllmHttpSource:
    """``POST <url>/kv_cache_events``: a JSON list of serialized events, ``[]`` when none (1.2 handler
    ``get_kv_cache_events``: it collects until ``get_kv_cache_events_async(2)`` times out, so an idle drain
    takes about 2 s and, under steady load, stays open while events keep coming)."""

    engine = "trtllm"

    def __init__(self, url: str, *, timeout_s: float = 30.0, client: Any = None) -> None:
        import httpx

        self.endpoint = url.rstrip("/")
        self._client = client or httpx.Client(timeout=timeout_s)
        self._own = client is None

    def poll(self, timeout_s: float = 30.0) -> list[KvEvent]:
        r = self._client.post(f"{self.endpoint}/kv_cache_events", timeout=timeout_s)
        r.raise_for_status()
        body = r.json()
        if not isinstance(body, list):
            raise ValueError(f"{self.endpoint}/kv_cache_events answered {type(body).__name__}, not a list of events")
        return trtllm_events.parse_events(body)

    def replay(self, start_seq: int, timeout_s: float = 5.0) -> list[KvEvent] | None:
        return None  # 1.2 keeps no replay buffer: a gap is rebuilt by the consumer

    def close(self) -> None:
        if self._own:
            self._client.close()


class TrtllmLlmSource:
    """``LLM.get_kv_cache_events(timeout)`` on an in-process ``tensorrt_llm.LLM`` (``llm.py``, beta API; needs
    ``KvCacheConfig(enable_block_reuse=True, event_buffer_max_size>0)``)."""

    engine = "trtllm"

    def __init__(self, llm: Any, endpoint: str = "in-process") -> None:
        self._llm, self.endpoint = llm, endpoint

    def poll(self, timeout_s: float = 2.0) -> list[KvEvent]:
        return trtllm_events.parse_events(self._llm.get_kv_cache_events(timeout_s))

    def replay(self, start_seq: int, timeout_s: float = 5.0) -> list[KvEvent] | None:
        return None

    def close(self) -> None:
        pass


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


def subscribe(description: Any) -> EventSource | None:
    """A new, independent consumer of a cell's published stream, where its publisher binds an endpoint others
    can connect to (``kv_events_endpoint`` ``ipc://…``, with ``kv_events_replay_endpoint`` where it has one); None
    where the stream has room for the cell's own consumer only."""
    extra = getattr(description, "extra", {}) or {}
    endpoint = extra.get("kv_events_endpoint")
    if not endpoint or not str(endpoint).startswith("ipc://"):
        return None
    return vllm(connect=endpoint, replay=extra.get("kv_events_replay_endpoint"))
