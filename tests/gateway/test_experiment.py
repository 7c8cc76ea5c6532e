"""The pool's inventory divergence check (``experiment.divergence``) against a trtllm-serve double, where a second
consumer splits the event stream.

The double (an ``httpx.MockTransport`` handler) models one trtllm-serve 1.2 endpoint as the gateway sees it, from
the 1.2 source: ``POST /kv_cache_events`` (tensorrt_llm/serve/openai_server.py, ``get_kv_cache_events``) collects
what ``LLM.get_kv_cache_events_async`` yields, and that is the executor's one shared ``IterationResult`` queue
(tensorrt_llm/executor/executor.py ``aget_kv_events``, executor/result.py ``IterationResult.__anext__``): each
event goes to exactly one caller, so a second consumer drains events the gateway then never sees (facts gathered in
the workbench's reference notes on the event plane, A1). Events are numbered one by one (``event_id``, from the C++
``KVCacheEventManager``) and serialized as ``KVCacheEventSerializer`` writes them (tensorrt_llm/_utils.py); context
blocks are full blocks of all but the last prompt token, keyed by the v1 block key
(:class:`workbench.cells.trtllm.hashing.TrtllmHasher`), and a request's reuse is its leading stored blocks. trtllm-serve
1.2 keeps no replay buffer. Nothing here runs TensorRT-LLM, and no finding comes from it."""

from __future__ import annotations

import threading

import httpx
import pytest

from workbench.cells.trtllm.hashing import TrtllmHasher
from workbench.cells.trtllm.sources import TrtllmHttpSource
from workbench.events.consumer import Consumer
from workbench.events.inventory import Inventory
from workbench.gateway.experiment import divergence
from workbench.gateway.workload import unseen
from workbench.probes.gateway_routing import divergence_note

BLOCK = 4
URL = "http://trtllm-serve.test:8000"


class TrtllmServeDouble:
    """One endpoint's KV cache and its one destructive event queue."""

    def __init__(self) -> None:
        self.hasher, self.stored, self.queue = TrtllmHasher(BLOCK), set(), []
        self.next_id, self.lock = 0, threading.Lock()

    def complete(self, tokens: list[int]) -> int:
        """Serve one request: its cached tokens (leading stored blocks), its new blocks stored as one event."""
        chain = self.hasher.chain(tokens)
        hit = next((i for i, k in enumerate(chain) if k not in self.stored), len(chain))
        with self.lock:
            if hit < len(chain):
                blocks = [{"type": "stored_block", "block_hash": k, "cache_level": 0, "priority": 35,
                           "tokens": [{"type": "unique_token", "token_id": t, "token_extra_id": 0}
                                      for t in tokens[i * BLOCK:(i + 1) * BLOCK]]}
                          for i, k in enumerate(chain) if i >= hit]
                self.queue.append({"event_id": self.next_id, "window_size": 64, "data": {
                    "type": "stored", "parent_hash": chain[hit - 1] if hit else None, "blocks": blocks}})
                self.next_id += 1
                self.stored.update(chain[hit:])
        return hit * BLOCK

    def drain(self) -> list[dict]:
        with self.lock:
            out, self.queue = self.queue, []
        return out

    def handler(self, request: httpx.Request) -> httpx.Response:
        """``POST /kv_cache_events``: everything queued, to whichever caller asked first."""
        if request.method != "POST" or request.url.path != "/kv_cache_events":
            return httpx.Response(404)
        return httpx.Response(200, json=self.drain())


@pytest.fixture
def endpoint():
    engine = TrtllmServeDouble()
    clients = []

    def source() -> TrtllmHttpSource:  # one consumer, with its own client on the endpoint
        clients.append(httpx.Client(transport=httpx.MockTransport(engine.handler)))
        return TrtllmHttpSource(URL, client=clients[-1])

    yield source, engine
    for c in clients:
        c.close()


def _sessions(n: int = 3, turns: int = 4) -> list[list[int]]:
    """Each session's turn k extends turn k − 1 (the requests a gateway routes by prefix), sessions interleaved."""
    prompts = [[1000 * s + t for t in range(9)] for s in range(n)]
    order = []
    for _ in range(turns):
        for s in range(n):
            prompts[s] = prompts[s] + [1000 * s + 100 + len(prompts[s]) + t for t in range(8)]
            order.append(list(prompts[s]))
    return order


def _replay(source, engine, drains) -> dict:
    """The sessions through one endpoint as the pool serves them (predict, serve, pump, then the unseen check),
    a second consumer draining first after the requests ``drains`` picks; the endpoint's divergence."""
    gateway = Consumer(source(), Inventory(TrtllmHasher(BLOCK)), policy="replay")  # the pool's policy
    other = source()  # a monitoring job on the same endpoint
    rows = []
    for i, tokens in enumerate(_sessions()):
        predicted = gateway.inventory.predict(tokens)
        rows.append({"endpoint": "ep0", "predicted_tokens": predicted, "cached_tokens": engine.complete(tokens)})
        if drains(i):
            other.poll(5)  # it drains first: this request's event is gone before the gateway asks
        gateway.pump(5)
        rows[-1]["unseen"] = unseen(gateway.inventory, tokens, None)
    found = divergence(rows, {"ep0": gateway.resyncs()})["ep0"]
    gateway.close(), other.close()
    return found


def test_with_one_consumer_the_pools_inventory_is_the_engines(endpoint):
    found = _replay(*endpoint, lambda i: False)
    assert found == {"requests": 12, "mispredicted": 0, "gaps": 0, "lost": 0, "unseen": 0, "causes": {},
                     "diverged": False}
    assert "DIVERGED" not in divergence_note({"ep0": found})


def test_a_second_consumer_of_trtllm_serves_drain_makes_the_pool_say_its_inventory_diverged(endpoint):
    found = _replay(*endpoint, lambda i: i % 2)
    assert found["diverged"] and found["lost"] == found["gaps"] > 0  # no replay on trtllm-serve 1.2: each gap lost
    assert found["causes"] == {"no-replay": found["lost"]}
    assert found["mispredicted"] > 0  # the inventory missed the blocks the other consumer took
    assert "ep0 " in (note := divergence_note({"ep0": found})) and "DIVERGED" in note and "another consumer" in note


@pytest.mark.parametrize("drains", [lambda i: True, lambda i: i >= 6], ids=["every event", "every event from the 7th"])
def test_a_consumer_that_drains_every_event_leaves_no_gap_yet_the_pool_says_it_diverged(endpoint, drains):
    found = _replay(*endpoint, drains)
    assert found["gaps"] == 0 and found["lost"] == 0  # nothing later arrives to show a gap
    assert found["unseen"] > 0 and found["diverged"]
    assert "never reached it" in divergence_note({"ep0": found})
