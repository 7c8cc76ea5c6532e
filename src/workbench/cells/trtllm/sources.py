"""TensorRT-LLM's KV events as an event source (:class:`workbench.events.sources.EventSource`), 1.2 and 1.4.

On 1.4 ``POST /kv_cache_events`` drains ``KvEventFanout``'s bounded buffer (``tensorrt_llm/serve/kv_event_fanout.py``,
``drain_http_buffer``): only ``stored`` and ``removed`` of the largest attention window, each with its engine
``event_id``, so the ids of the filtered ``created`` and ``updated`` events are missing from the stream (a gap there
is not by itself a loss; the fanout's deque drops its oldest silently when full). The in-process
``LLM.get_kv_cache_events`` still gives every event.

``POST /kv_cache_events`` on ``trtllm-serve`` (:class:`TrtllmHttpSource`), or ``LLM.get_kv_cache_events(timeout)``
in-process (:class:`TrtllmLlmSource`). Both drain one shared queue (``executor.aget_kv_events`` returns the
executor's single ``IterationResult``), so each event reaches one caller; there is no replay. Written against the
1.2 source; not run here (no GPU). ``/health_generate`` (a real one-token request) creates ``stored`` events, and
``/metrics`` and ``/perf_metrics`` drain their own queues: none of them may be a monitoring target beside a consumer.
"""

from __future__ import annotations

import json
from typing import Any, NoReturn

from ...engine import KvEvent
from ...events.sources import EndpointFault
from . import events as trtllm_events


EXPECTED = ("TensorRT-LLM's POST /kv_cache_events answer: HTTP 200 and a JSON list of KV events "
            f"{{event_id, window_size, data: {{type: {'|'.join(trtllm_events.KINDS)}, …}}}} (1.4: stored and removed "
            "only, with hash_algo), [] when none")
"""What a drain must answer (tensorrt_llm/serve/openai_server.py ``get_kv_cache_events``; each event as
``KVCacheEventSerializer`` writes it, tensorrt_llm/_utils.py)."""

STATUS_HINTS = {
    404: "no such route: not trtllm-serve (vLLM's events come from its ZMQ publisher: ipc:// or tcp://)",
    405: "the route refuses POST: not trtllm-serve, whose drain is a POST",
    500: "the server failed; trtllm-serve 1.2 may answer 500 to a drain before its first request "
         "(aget_kv_events asserts): send one request first",
}
"""What a status says about the endpoint, where it says more than its number (docs: event-plane.md A1)."""


class TrtllmHttpSource:
    """``POST <url>/kv_cache_events``: a JSON list of serialized events, ``[]`` when none (1.2 handler
    ``get_kv_cache_events``: it collects until ``get_kv_cache_events_async(2)`` times out, so an idle drain
    takes about 2 s and, under steady load, stays open while events keep coming). Every answer is read into
    :class:`KvEvent` here (:meth:`read`) or refused as an :class:`EndpointFault`; every event object drained is
    kept in ``drained``."""

    engine = "trtllm"

    def __init__(self, url: str, *, timeout_s: float = 30.0, client: Any = None) -> None:
        import httpx

        try:
            host, why = httpx.URL(url).host, "no host"
        except httpx.InvalidURL as e:
            host, why = "", str(e)
        if not host:
            raise ValueError(f"{url!r} is not trtllm-serve's URL (http://HOST:PORT): {why}")
        self.endpoint = url.rstrip("/")
        self.url = f"{self.endpoint}/kv_cache_events"
        self._client = client or httpx.Client(timeout=timeout_s)
        self._own = client is None
        self.drained: list[dict] = []
        self.answers = 0  # right answers so far: after one, silence is a drop, not a wrong address

    def poll(self, timeout_s: float = 30.0) -> list[KvEvent]:
        """One drain; ``timeout_s`` bounds connecting and the answer (1.2's idle drain takes about 2 s)."""
        import httpx

        try:
            r = self._client.post(self.url, timeout=timeout_s)
        except httpx.TransportError as e:
            why = f"{type(e).__name__} after {timeout_s:g} s" if isinstance(e, httpx.TimeoutException) else (
                f"{type(e).__name__}: {e}")
            answered = f"stopped answering after {self.answers} right answer(s): {why}" if self.answers else (
                f"gave no answer: {why}")
            raise EndpointFault(self.url, answered, self.drained, EXPECTED, dropped=self.answers > 0) from None
        events = self.read(r.status_code, r.reason_phrase, r.headers.get("content-type", ""), r.content)
        self.answers += 1
        return events

    def read(self, status: int, reason: str, content_type: str, body: bytes) -> list[KvEvent]:
        """The one reading of a drain's answer: its events, or :class:`EndpointFault` naming what came back."""
        if status != 200:
            hint = f" ({STATUS_HINTS[status]})" if status in STATUS_HINTS else ""
            self._refuse(f"answered HTTP {status} {reason}{hint}: {_snippet(content_type, body)}")
        try:
            doc = json.loads(body)
        except ValueError:  # UnicodeDecodeError included
            self._refuse(f"answered {_not_json(content_type, body)}")
        if not isinstance(doc, list):
            self._refuse(f"answered {_json_kind(doc)} where a JSON list of events belongs: "
                                f"{_snippet(content_type, body)}")
        self.drained.extend(item for item in doc if isinstance(item, dict) and item)
        # {} (and null) is how the 1.2 serializer writes a None event (to_json_str): nothing, skipped as upstream does
        return [self._event(n, item) for n, item in enumerate(doc) if item is not None and item != {}]

    def _event(self, n: int, item: Any) -> KvEvent:
        if not isinstance(item, dict):
            self._refuse(f"answered a list whose item {n} is {_json_kind(item)}, not an event object")
        data = item.get("data")
        kind = data.get("type") if isinstance(data, dict) else None
        if kind not in trtllm_events.KINDS:
            # 1.2's serializer has no other kinds: get_event_serialize_func maps exactly these four data types
            # and to_json_str raises on any other (tensorrt_llm/_utils.py, KVCacheEventSerializer)
            what = "no data.type" if kind is None else f"kind {kind!r}"
            self._refuse(f"answered an event with {what} (item {n}, event_id {item.get('event_id')!r}); "
                         f"TensorRT-LLM 1.2 serializes only {', '.join(trtllm_events.KINDS)} (tensorrt_llm/_utils.py"
                         ", KVCacheEventSerializer)")
        if type(item.get("event_id")) is not int:
            self._refuse(f"answered a {kind!r} event without an integer event_id (item {n}): "
                         f"{_json_kind(item.get('event_id'))}")
        try:
            return trtllm_events.parse_event(item)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            self._refuse(f"answered a {kind!r} event (item {n}, event_id {item['event_id']}) not in 1.2's "
                                f"shape: {type(e).__name__} {e}")

    def _refuse(self, answered: str) -> NoReturn:
        raise EndpointFault(self.url, answered, self.drained, EXPECTED)

    def replay(self, start_seq: int, timeout_s: float = 5.0) -> list[KvEvent] | None:
        return None  # 1.2 keeps no replay buffer: a gap is rebuilt by the consumer

    def close(self) -> None:
        if self._own:
            self._client.close()


def _snippet(content_type: str, body: bytes, n: int = 60) -> str:
    """The start of an answer on one line, with its content type: enough to tell what answered."""
    text = " ".join(body[:n * 4].decode("utf-8", "replace").split())
    shown = repr(text[:n] + ("…" if len(text) > n else "")) if text else "an empty body"
    return f"{content_type or 'no content-type'}, {len(body)} bytes, {shown}"


def _not_json(content_type: str, body: bytes) -> str:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return f"{len(body)} bytes that are not text: {body[:24]!r}{'…' if len(body) > 24 else ''}"
    if "html" in content_type or text.lstrip().startswith("<"):
        return f"an HTML page ({_snippet(content_type, body)})"
    return f"text that is not JSON ({_snippet(content_type, body)})"


def _json_kind(value: Any) -> str:
    """A JSON value named by its kind, with a glimpse of it."""
    kinds = ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"), (list, "a list"),
             (dict, "a JSON object"), (type(None), "null"))
    name = next(k for t, k in kinds if isinstance(value, t))
    glimpse = f" with keys {', '.join(map(str, list(value)[:6]))}" if isinstance(value, dict) else (
        "" if value is None else f" ({json.dumps(value)[:40]})")
    return name + glimpse


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
