"""The pool on real engines: two ``vllm serve`` endpoints on ``synthetic:cpu`` (one module-scoped pool), admission,
the shapes replayed and the rule's verdicts (a gain; none with a wrong block size), an endpoint killed mid-run, and
nothing left running afterwards."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from conftest import descendants, gone_within, interruptible, require_engine
from workbench import serve
from workbench.gateway import experiment
from workbench.gateway.client import complete
from workbench.gateway.pool import Pool, PoolSpec, started
from workbench.gateway.router import Router
from workbench.gateway.workload import BestPlacement, Fault, Request, run_shape, sessions_from_trace, waves
from workbench.probes import gateway_routing as gr

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
REPLAY_STEPS = 4  # batches each endpoint's publisher keeps for replay: small, so a longer loss outruns it


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    require_engine("vllm-server")
    folder = tmp_path_factory.mktemp("gateway")
    spec = PoolSpec(2, "vllm-server", "synthetic:cpu", {"kv_budget_tokens": 16384, "context_tokens": 2048},
                    replay_steps=REPLAY_STEPS)
    with Pool(spec, folder) as p:
        servers = [e.cell.server for e in p.endpoints.values()]
        yield p
    assert not any(s.alive() for s in servers) and not set(servers) & set(serve.live())


@pytest.fixture(scope="module")
def sessions():
    found, _ = sessions_from_trace("claude-code", sessions=3, turns=3, context_tokens=2048, vocab_size=512)
    return [[Request(r.session, r.turn, r.prompt, 2) for r in s] for s in found]


def test_each_endpoint_logs_in_the_run_folder_and_admits_the_engines_rule(pool):
    for e in pool.endpoints.values():
        assert e.log_path.startswith(str(pool.run_dir / "pool" / e.name))
    with httpx.Client() as http:
        right = pool.admit(http, 32)
        wrong = pool.admit(http, 16)
        blind = pool.admit(http, 16, check_events=False)
    assert {(a["engine_block"], a["rule_hash_reproduces"], a["decision"]) for a in right} == {
        (32, True, "admitted (legacy: nothing reported)")}  # vLLM answers /server_info only in its dev mode
    assert {a["decision"] for a in wrong} == {"refused (the engine's events contradict the rule)"}
    assert {a["decision"] for a in blind} == {"admitted (legacy: nothing reported)"}


def test_kv_exact_beats_fullproxy_on_the_engines_count_and_a_wrong_block_size_gains_nothing(pool, sessions):
    p = gr.Params(repeats=1, concurrency=2)
    happy = experiment.run(pool, sessions, experiment.Plan(repeats=1))
    kv = [r for r in happy.rows if r["shape"] == "kv-exact"]
    assert sum(r["predicted_tokens"] == r["cached_tokens"] for r in kv) >= len(kv) - 1  # the inventory is exact
    assert {n: g["gaps"] for n, g in happy.gaps.items()} == {"ep0": 0, "ep1": 0}  # every stream arrived whole
    assert not any(d["diverged"] for d in happy.divergence.values())
    out = gr.verdict(happy, p)
    assert out.verdict in ("confirmed", "partial"), out.summary
    assert out.metrics["routing_hit_gain_ci_low"] > 0
    fault = gr.verdict(experiment.run(pool, sessions, experiment.Plan(repeats=1, rule_block=16)), p)
    assert fault.verdict == "refuted", fault.summary
    assert {r["predicted_tokens"] for r in fault.rows if r.get("kind") == "request"} == {0}


def test_a_gap_is_recovered_from_the_engines_replay_buffer_and_cleared_once_the_buffer_no_longer_holds_it(pool):
    """The consumer loses batches between vLLM's socket and itself (Endpoint.lose). One lost batch: the next one
    shows the gap, vLLM's replay socket still holds the batch, the inventory gets it and predicts the engine's own
    count for that prompt. More lost than the publisher buffers (buffer_steps): cleared, cause beyond-buffer."""
    e = pool.endpoints["ep1"]
    rng = np.random.default_rng(7)
    e.pump(0.5, pool.t0)
    before = e.resyncs()
    with httpx.Client(timeout=120.0) as http:
        def send(prompt, salt="gap"):
            got = complete(http, e.url, e.served_model, prompt, 1, salt)
            e.pump(0.5, pool.t0)
            return got.cached_tokens

        lost = [int(t) for t in rng.integers(10, 500, 100)]
        e.lose(1)
        assert send(lost) == 0 and e.inventory.predict(lost, "gap") == 0  # its stored batch never arrived
        send([int(t) for t in rng.integers(10, 500, 100)])  # the next batch: the gap, replayed
        assert e.resyncs() == before | {"gaps": before["gaps"] + 1, "recovered": before["recovered"] + 1}
        assert e.inventory.predict(lost, "gap") == send(lost) == 96  # the replayed blocks, as the engine counts them
        e.lose(REPLAY_STEPS + 2)
        while e.consumer.source.pending:
            send([int(t) for t in rng.integers(10, 500, 100)])
        send([int(t) for t in rng.integers(10, 500, 100)])
    after = e.resyncs()
    assert after == before | {"gaps": before["gaps"] + 2, "recovered": before["recovered"] + 1,
                              "cleared": before["cleared"] + 1,
                              "cleared:beyond-buffer": before.get("cleared:beyond-buffer", 0) + 1}
    assert [m.cause for m in e.consumer.timeline if m.kind == "cleared"][-1] == "beyond-buffer"
    assert "ep1 2 (1 recovered from the engine's replay buffer, 1 lost" in gr.gap_note({"ep1": after})


def test_an_endpoint_killed_mid_run_is_dropped_and_its_requests_served_elsewhere(pool, sessions):
    router = Router("round-robin", {n: e.inventory for n, e in pool.endpoints.items()}, pool.hasher())
    plan = waves(sessions, 2)
    rows = run_shape(pool, router, plan, salt="kill", best=BestPlacement(pool.hasher()), fault=Fault("ep0", 1))
    assert len(rows) == sum(len(w) for w in plan)  # nothing lost
    assert "ep0" in router.dropped and not pool.endpoints["ep0"].alive
    retried = [r for r in rows if r["retried_from"]]
    assert retried and all(r["retried_from"] == "ep0" and r["endpoint"] == "ep1" for r in retried)
    assert all(r["endpoint"] == "ep1" for r in rows if r["wave"] > 1)


def test_an_endpoint_that_crashes_mid_run_ends_the_experiment_as_a_crash_never_a_verdict(pool, sessions):
    """A death no fault of the plan made (gateway.routing turned one into ``refuted``, exit 0): the first request
    that fails on it ends the experiment with EndpointCrashed, naming the endpoint and its log's last lines."""
    from workbench.gateway.pool import EndpointCrashed

    router = Router("round-robin", {n: e.inventory for n, e in pool.endpoints.items()}, pool.hasher())
    server = pool.endpoints["ep1"].cell.server
    try:
        os.killpg(server.pid, signal.SIGKILL)
        server.proc.wait(30)
        with pytest.raises(EndpointCrashed) as got:
            run_shape(pool, router, waves(sessions, 2), salt="crash", best=BestPlacement(pool.hasher()))
    finally:
        pool.faulted.add("ep1")  # the module's pool then closes as after a fault
    assert got.value.endpoint == "ep1" and got.value.signum == signal.SIGKILL
    assert got.value.log_path == pool.endpoints["ep1"].log_path and got.value.log_tail


INTERRUPTED = textwrap.dedent("""
    import json, sys, time
    from workbench import serve
    from workbench.gateway.pool import Pool, PoolSpec, started
    try:
        with Pool(PoolSpec(2, "vllm-server", "synthetic:cpu", {"context_tokens": 256}), sys.argv[1]):
            print("ready", flush=True)
    except KeyboardInterrupt:
        print("interrupted", json.dumps([s.pid for s in serve.live()]), flush=True)
        time.sleep(600)  # held: whatever still runs now was left by the pool, not by the interpreter's exit
""")


def test_ctrl_c_while_the_pool_starts_leaves_nothing_running(tmp_path):
    """Ctrl-C once both servers are spawned, long before either is ready: the pool stops both at once (neither
    gets to serve), with every process each started (vLLM's engine core and worker), before the interrupt leaves
    it (the child then holds on, so the interpreter's exit hooks stop nothing)."""
    require_engine("vllm-server")
    child = subprocess.Popen([sys.executable, "-c", INTERRUPTED, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                             env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)}, preexec_fn=interruptible)
    try:
        deadline = time.monotonic() + 300
        while len(servers := [p for p in descendants(child.pid) if b"vllm" in _cmdline(p)]) < 2:
            assert child.poll() is None and time.monotonic() < deadline, "the pool never spawned its two servers"
            time.sleep(0.2)
        assert not any(_ready(tmp_path / "pool" / n) for n in ("ep0", "ep1"))
        child.send_signal(signal.SIGINT)
        line = child.stdout.readline()
        assert line == "interrupted []\n", line  # the pool let go of every server it had started
        assert gone_within(30, servers + descendants(child.pid)) == []
        assert not any(_ready(tmp_path / "pool" / n) for n in ("ep0", "ep1"))  # stopped, not waited for
    finally:
        child.kill()
        child.wait()


def _cmdline(pid: int) -> bytes:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes()
    except OSError:
        return b""


def _ready(folder: Path) -> bool:
    """Whether the server logging in ``folder`` already said it serves (the interrupt would then not be mid-start)."""
    return any("Starting vLLM server" in f.read_text(errors="replace") for f in folder.glob("*.log"))


SLOW_HEALTH = textwrap.dedent("""
    import http.server, sys, time
    time.sleep(float(sys.argv[2]))  # a server that takes its time to start, then answers GET /health
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
""")


class _Opened:
    def __init__(self, server):
        self.server = server

    def close(self):
        self.server.stop()


def test_a_start_that_registers_its_server_after_the_interrupt_is_stopped_then_not_waited_for(tmp_path):
    """One start is interrupted at once; the other had not yet spawned its server (a thread cannot be
    interrupted). That server is stopped the moment it registers, so its start ends as a server that died, never
    one that got to answer /health (with the old single sweep it started, became ready, and was closed then)."""
    ended = {}

    def late():
        time.sleep(0.5)
        try:
            return _Opened(serve.start(serve.ServerRequest("slow", "none"), tmp_path / "late", build=lambda req, port,
                                       folder: serve.Launch((sys.executable, "-c", SLOW_HEALTH, str(port), "5"))))
        except BaseException as e:
            ended["late"] = e
            raise

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt), started({"late": late, "now": interrupted}, tmp_path):
        pass
    assert isinstance(ended.get("late"), serve.ServerDied), ended
    assert not [s for s in serve.live() if tmp_path in Path(s.log_path).parents]  # (the module's pool is still up)
