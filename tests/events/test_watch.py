"""``workbench events watch``: it takes the endpoint's lease (a held endpoint is refused, naming the holder) and
streams JSON lines of what a gateway's consumer holds."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from workbench.events import lease

CLI = [sys.executable, "-m", "workbench.cli", "events", "watch"]


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_STATE", str(tmp_path / "state"))
    return tmp_path


def test_watch_refuses_an_endpoint_another_consumer_holds(state):
    endpoint = f"ipc://{state}/pub"
    held = lease.acquire(endpoint)
    r = subprocess.run([*CLI, "--endpoint", endpoint, "--duration", "1", "--json"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and f"pid {held.holder.pid}" in r.stderr and "--steal" in r.stderr
    held.release()


def test_watch_rejects_an_endpoint_it_cannot_read(state):
    r = subprocess.run([*CLI, "--endpoint", "ftp://x", "--duration", "1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "give trtllm-serve's (http://HOST:PORT" in r.stderr and "vllm-server's (ipc://PATH" in r.stderr
    assert not lease.lease_path("ftp://x").exists()  # the lease is released


def test_watch_streams_json_lines_from_a_vllm_wire_publisher_and_sees_its_gap(state):
    """The publisher sends vLLM's own wire format, built with vLLM's own types: ``(topic, 8-byte big-endian seq,
    msgpack KVEventBatch)`` (vllm/distributed/kv_events.py, ZmqEventPublisher._publisher_thread)."""
    pytest.importorskip("vllm")
    import msgspec
    import zmq
    from vllm.distributed.kv_events import BlockStored, KVEventBatch

    endpoint = f"ipc://{state}/pub"
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.bind(endpoint)
    proc = subprocess.Popen([*CLI, "--endpoint", endpoint, "--duration", "5", "--json", "--interval", "0.5",
                             "--block-size", "4"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        enc = msgspec.msgpack.Encoder()
        deadline = time.monotonic() + 60
        seq = 0
        lines = []
        while time.monotonic() < deadline and proc.poll() is None:
            for n in (seq, seq + 1, seq + 3):  # seq + 2 never sent: a gap
                ev = BlockStored(block_hashes=[1000 + n], parent_block_hash=None, token_ids=[1, 2, 3, n],
                                 block_size=4, lora_id=None, medium="GPU", lora_name=None)
                pub.send_multipart((b"", n.to_bytes(8, "big"), enc.encode(KVEventBatch(ts=time.time(), events=[ev]))))
            seq += 10
            time.sleep(0.5)
        out, err = proc.communicate(timeout=60)
        lines = [json.loads(x) for x in out.splitlines()]
    finally:
        proc.kill()
        pub.close(linger=0)
        ctx.term()
    assert lines, err
    last = lines[-1]
    assert last["events"] > 0 and last["inventory_blocks"] > 0 and last["gaps"] > 0 and last["resyncs"] > 0
    assert str(proc.pid) in last["lease"]
