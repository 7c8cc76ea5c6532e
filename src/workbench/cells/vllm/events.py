"""vLLM KV-cache events → :class:`workbench.engine.KvEvent`, received over ZMQ on loopback.

vLLM's scheduler publishes a ``KVEventBatch`` after every engine step in which blocks were stored
or removed (``vllm/distributed/kv_events.py``: ``ZmqEventPublisher`` sends the multipart message
``(topic, 8-byte big-endian sequence number, msgpack payload)``). Its endpoint rule: an endpoint
with ``*`` binds, any other connects. So the subscriber here *binds* a SUB socket on
``127.0.0.1`` at a port the OS picks, and the engine's publisher is told to connect to it: nothing
listens beyond loopback and no port is guessed.

A ZMQ socket only sends its subscription to a newly connected publisher when its own thread
touches it, so a background thread polls the socket all the time and buffers what arrives; the
cell drains that buffer (one consumer). Events are published asynchronously after the step, so a
drain waits until the stream has been quiet for ``settle_s``.

Payload types (0.32): ``BlockStored(block_hashes, parent_block_hash, token_ids, block_size,
lora_id, medium, lora_name, extra_keys, …)``, ``BlockRemoved(block_hashes, medium, …)`` and
``AllBlocksCleared()``; block hashes are bytes, or ints with ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES``.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Iterable

from ...engine import KvEvent

KINDS = ("stored", "removed", "cleared")


def block_hash(h: bytes | int) -> int:
    """One block hash as an int (vLLM publishes SHA-256 bytes by default)."""
    return h if isinstance(h, int) else int.from_bytes(h, "big")


def normalize(event: Any, seq: int, ts: float) -> KvEvent:
    """One decoded vLLM event (msgspec struct) as a :class:`KvEvent`."""
    kind = type(event).__name__
    if kind == "BlockStored":
        size = int(event.block_size)
        ids = list(event.token_ids)
        blocks = tuple(tuple(ids[i:i + size]) for i in range(0, len(ids), size))
        parent = event.parent_block_hash
        raw = {"seq": seq, "ts": ts, "type": kind, "block_size": size, "medium": event.medium,
               "lora_name": event.lora_name, "extra_keys": _plain(event.extra_keys), "group_idx": event.group_idx}
        return KvEvent("stored", event_id=seq, block_hashes=tuple(block_hash(h) for h in event.block_hashes),
                       parent_hash=None if parent is None else block_hash(parent), block_tokens=blocks, raw=raw)
    if kind == "BlockRemoved":
        return KvEvent("removed", event_id=seq, block_hashes=tuple(block_hash(h) for h in event.block_hashes),
                       raw={"seq": seq, "ts": ts, "type": kind, "medium": event.medium, "group_idx": event.group_idx})
    if kind == "AllBlocksCleared":
        return KvEvent("cleared", event_id=seq, raw={"seq": seq, "ts": ts, "type": kind})
    raise ValueError(f"unknown vLLM KV event {kind!r}; known: BlockStored, BlockRemoved, AllBlocksCleared")


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value.hex() if isinstance(value, bytes) else value


class Subscriber:
    """A SUB socket with a thread that buffers every decoded event, and the replay client.

    By default the socket binds on 127.0.0.1 (free port) and the engine's publisher connects to it (one
    consumer). With ``connect`` (a publisher that binds, e.g. ``ipc://…``) it connects instead, so several
    consumers can subscribe to one engine. ``replay``: the publisher's ROUTER endpoint
    (``KVEventsConfig.replay_endpoint``), asked by :meth:`replay` for buffered batches from a sequence number."""

    engine = "vllm"

    def __init__(self, host: str = "127.0.0.1", *, connect: str | None = None, replay: str | None = None) -> None:
        import msgspec
        import zmq
        from vllm.distributed.kv_events import KVEventBatch

        self._zmq = zmq
        self._decoder = msgspec.msgpack.Decoder(type=KVEventBatch)
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.SUB)
        self._sock.setsockopt(zmq.SUBSCRIBE, b"")
        self._sock.setsockopt(zmq.LINGER, 0)
        if connect:
            self._sock.connect(connect)
            self.endpoint = connect
        else:
            self._sock.bind(f"tcp://{host}:0")
            self.endpoint = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.replay_endpoint = replay
        self._lock = threading.Lock()
        self._events: list[KvEvent] = []
        self._last = 0.0  # monotonic time of the last message
        self.received = 0  # batches
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="workbench-vllm-kv-events", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if not self._sock.poll(50):
                    continue
                _topic, seq, payload = self._sock.recv_multipart()
                events = self._decode(seq, payload)
            except self._zmq.ZMQError:
                break
            except Exception as e:  # noqa: BLE001 - a bad payload is kept as an error, the stream goes on
                self.errors.append(f"{type(e).__name__}: {e}")
                continue
            with self._lock:
                self._events.extend(events)
                self._last = time.monotonic()
                self.received += 1

    def _decode(self, seq: bytes, payload: bytes) -> list[KvEvent]:
        batch = self._decoder.decode(payload)
        n = int.from_bytes(seq, "big")
        return [normalize(e, n, batch.ts) for e in batch.events]

    def poll(self, timeout_s: float = 2.0) -> list[KvEvent]:
        """The event-source interface (:class:`workbench.events.sources.EventSource`): :meth:`drain`."""
        return self.drain(timeout_s=timeout_s)

    def replay(self, start_seq: int, timeout_s: float = 5.0) -> list[KvEvent] | None:
        """Every batch the publisher still buffers from ``start_seq`` on (``ZmqEventPublisher._service_replay``:
        a DEALER sends the 8-byte big-endian start, the ROUTER streams ``(topic, seq, payload)`` frames, then
        ``END_SEQ`` = −1 with an empty payload). None without a replay endpoint."""
        if not self.replay_endpoint:
            return None
        zmq = self._zmq
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.replay_endpoint)
        out: list[KvEvent] = []
        try:
            sock.send_multipart((b"", int(start_seq).to_bytes(8, "big")))
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                if not sock.poll(100):
                    continue
                _empty, _topic, seq, payload = sock.recv_multipart()
                if int.from_bytes(seq, "big", signed=True) == -1:
                    return out
                out.extend(self._decode(seq, payload))
            raise TimeoutError(f"vLLM's replay socket {self.replay_endpoint} sent no END_SEQ within {timeout_s:g} s")
        finally:
            sock.close(linger=0)

    def drain(self, settle_s: float = 0.1, timeout_s: float = 2.0) -> list[KvEvent]:
        """Every event since the last drain, oldest first, once the stream has been quiet ``settle_s``
        (the publisher sends from its own thread after the step, so the last batch may still be in flight)."""
        deadline = time.monotonic() + timeout_s
        time.sleep(settle_s)
        while time.monotonic() < deadline and time.monotonic() - self._last < settle_s:
            time.sleep(settle_s / 4)
        with self._lock:
            out, self._events = self._events, []
        return out

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)
        self._sock.close(linger=0)
        self._ctx.term()


def stored_blocks(events: Iterable[KvEvent]) -> int:
    return sum(len(e.block_hashes) for e in events if e.kind == "stored")


__all__ = ["KINDS", "Subscriber", "block_hash", "normalize", "stored_blocks"]
