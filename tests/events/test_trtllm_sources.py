"""TensorRT-LLM's HTTP drain, against a loopback server that models trtllm-serve 1.2's ``POST /kv_cache_events``
(tensorrt_llm/serve/openai_server.py, ``get_kv_cache_events``: it collects ``get_kv_cache_events_async(2)``
until the queue is empty and returns the serialized events as a JSON list, ``[]`` when none; the events come
from the executor's one shared ``IterationResult`` queue, so each is returned to exactly one caller). Events are
shaped as ``KVCacheEventSerializer`` writes them (tensorrt_llm/_utils.py). Nothing here runs TensorRT-LLM."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from workbench.events.consumer import Consumer
from workbench.cells.trtllm.hashing import TrtllmHasher
from workbench.events.inventory import Inventory
from workbench.cells.trtllm.sources import TrtllmHttpSource
from workbench.probes import events_ownership


class _Queue:
    def __init__(self):
        self.lock, self.events = threading.Lock(), []

    def take(self, n):
        with self.lock:
            out, self.events = self.events[:n], self.events[n:]
            return out


@pytest.fixture
def server():
    queue = _Queue()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            if self.path != "/kv_cache_events":
                self.send_error(404)
                return
            body = json.dumps(queue.take(2)).encode()  # a short drain: one batch of the shared queue
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", queue
    httpd.shutdown()


def _stored(event_id, tokens, parent=None):
    h = TrtllmHasher(4)
    key = h.chain(tokens)[0]
    return {"event_id": event_id, "window_size": 16, "data": {"type": "stored", "parent_hash": parent, "blocks": [
        {"type": "stored_block", "block_hash": key, "cache_level": 0, "priority": 35,
         "tokens": [{"type": "unique_token", "token_id": t, "token_extra_id": 0} for t in tokens[:4]]}]}}


def test_the_http_drain_feeds_an_inventory_that_predicts_with_the_v1_key(server):
    url, queue = server
    queue.events = [{"event_id": 0, "window_size": 16, "data": {"type": "created", "num_blocks_per_cache_level": [64, 0]}},
                    _stored(1, [5, 6, 7, 8, 9])]
    c = Consumer(TrtllmHttpSource(url), Inventory(TrtllmHasher(4)))
    c.pump(5)
    assert c.inventory.predict([5, 6, 7, 8, 9]) == 4 and not c.gaps
    assert c.source.poll(5) == []  # drained: the next caller gets nothing
    c.close()


def test_two_consumers_of_one_drain_split_the_stream(server):
    url, queue = server
    queue.events = [_stored(i, [i, i + 1, i + 2, i + 3, 0]) for i in range(6)]
    consumers = [Consumer(TrtllmHttpSource(url), Inventory(TrtllmHasher(4))) for _ in range(2)]
    for _ in range(3):
        for c in consumers:
            c.pump(5)
    rows = [{"consumer": i + 1, "seqs": sorted(c.seqs), "gaps": len(c.gaps)} for i, c in enumerate(consumers)]
    assert all(r["gaps"] for r in rows)  # each sees the other's events only as gaps
    o = events_ownership.verdict(rows, [])
    assert o.verdict == "confirmed" and o.metrics["consumer_overlap_fraction"] == 0.0
    for c in consumers:
        c.close()


def test_an_error_status_raises(server):
    url, _ = server
    with pytest.raises(Exception, match="404"):
        TrtllmHttpSource(url + "/nope").poll(5)
