"""The endpoint lease (real files, real processes) and the consumer's resync policies."""

import json
import subprocess
import sys

import pytest

from workbench.engine import KvEvent
from workbench.events import lease
from workbench.events.consumer import Consumer
from workbench.cells.vllm.hashing import VllmHasher
from workbench.events.inventory import Inventory
from workbench.events.sources import Lossy


@pytest.fixture(autouse=True)
def _state(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_STATE", str(tmp_path / "state"))


def test_a_live_holder_is_refused_by_name_and_steal_takes_over():
    first = lease.acquire("http://127.0.0.1:8000/")
    with pytest.raises(lease.LeaseHeld, match=r"pid \d+ on .*--steal"):
        lease.acquire("http://127.0.0.1:8000")  # the same endpoint, trailing slash or not
    second = lease.acquire("http://127.0.0.1:8000", steal=True)
    assert "--steal" in second.note and second.previous.token == first.holder.token
    with pytest.raises(lease.LeaseLost, match="taken over"):
        first.check()
    second.check()
    first.release()  # not ours any more: the new holder's file stays
    assert lease.lease_path("http://127.0.0.1:8000").exists()
    second.release()
    assert not lease.lease_path("http://127.0.0.1:8000").exists()


def test_a_holder_in_another_live_process_is_refused():
    code = ("import sys, time; from workbench.events import lease; l = lease.acquire(sys.argv[1]); "
            "print('held', flush=True); time.sleep(30)")
    p = subprocess.Popen([sys.executable, "-c", code, "ipc:///tmp/x"], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        with pytest.raises(lease.LeaseHeld, match=f"pid {p.pid} "):
            lease.acquire("ipc:///tmp/x")
    finally:
        p.kill()
        p.wait()
    taken = lease.acquire("ipc:///tmp/x")  # its holder is dead now: a stale lease
    assert "stale" in taken.note and str(p.pid) in taken.note
    taken.release()


def test_another_endpoint_has_its_own_lease():
    a = lease.acquire("http://127.0.0.1:1")
    b = lease.acquire("http://127.0.0.1:2")
    assert json.loads(lease.lease_path("http://127.0.0.1:2").read_text())["endpoint"] == "http://127.0.0.1:2"
    a.release(), b.release()


class ScriptedSource:
    """Delivers prepared KvEvents; ``buffer`` is what a replay returns, as vLLM's ZmqEventPublisher keeps the last
    ``buffer_steps`` batches and answers a start seq with every buffered batch at or after it
    (vllm/distributed/kv_events.py, ``_service_replay``). ``buffer=None``: no replay (TensorRT-LLM 1.2)."""

    engine, endpoint = "scripted", "scripted://one"

    def __init__(self, batches, buffer):
        self.batches, self.buffer = list(batches), buffer

    def poll(self, timeout_s=0.0):
        return self.batches.pop(0) if self.batches else []

    def replay(self, start_seq, timeout_s=0.0):
        if self.buffer == "silent":  # a replay socket that never sends END_SEQ (cells/vllm/events.py)
            raise TimeoutError("sent no END_SEQ")
        return None if self.buffer is None else [e for e in self.buffer if e.event_id >= start_seq]

    def close(self):
        pass


def _ev(seq, toks, h):
    return KvEvent("stored", seq, tuple(h.chain(toks)), None, (tuple(toks[:4]),))


@pytest.mark.parametrize("policy,buffer_from,expect,kept,cause", [
    ("replay", 0, "replayed", True, ""),   # the buffer still holds the missed batches
    ("replay", 2, "cleared", False, "beyond-buffer"),   # it starts after the gap: rebuild
    ("replay", None, "cleared", False, "no-replay"),  # no replay at all
    ("replay", "silent", "cleared", False, "beyond-buffer"),  # a replay that does not answer recovers nothing
    ("clear", 0, "cleared", False, "policy"),  # never asked: the loss is the consumer's choice
])
def test_a_gap_follows_the_declared_policy(policy, buffer_from, expect, kept, cause):
    h = VllmHasher(4)
    evs = [_ev(i, list(range(10 * i, 10 * i + 5)), h) for i in range(4)]
    buffer = buffer_from if buffer_from in (None, "silent") else evs[buffer_from:]
    c = Consumer(ScriptedSource([[evs[0]], [evs[3]]], buffer), Inventory(h), policy)
    c.pump(), c.pump()
    assert [m.kind for m in c.timeline if m.kind != "events"] == ["gap", expect]
    assert c.timeline[-1].cause == cause
    assert (c.inventory.predict(list(range(10, 15))) == 4) is kept
    assert c.inventory.predict(list(range(30, 35))) == 4  # the event after the gap is always applied


def test_a_lossy_source_drops_whole_batches_even_across_polls_and_replays_from_its_source():
    """vLLM numbers batches (every event of one shares its number): the fault drops the next n numbers whole, the
    part of a batch that arrives in the next poll included, and a replay still asks the source."""
    h = VllmHasher(4)
    evs = [_ev(i, list(range(10 * i, 10 * i + 5)), h) for i in range(4)]
    twin = KvEvent("stored", 1, (7,), None, ((1, 2, 3, 4),))  # batch 1's second event, in the next poll
    lossy = Lossy(ScriptedSource([[evs[0]], [evs[1]], [twin, evs[2]], [evs[3]]], evs))
    assert [e.event_id for e in lossy.poll()] == [0]
    lossy.lose(1)
    assert [e.event_id for e in lossy.poll() + lossy.poll() + lossy.poll()] == [2, 3] and lossy.dropped == [1]
    c = Consumer(Lossy(ScriptedSource([[evs[0]], [evs[1]], [evs[2], evs[3]]], evs)), Inventory(h), "replay")
    c.pump()
    c.source.lose(1)
    c.pump(), c.pump()
    assert [m.kind for m in c.timeline if m.kind != "events"] == ["gap", "replayed"]
    assert c.inventory.predict(list(range(10, 15))) == 4  # the lost batch, back from the replay
