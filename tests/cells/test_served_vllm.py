"""The vllm-server cell on the real ``vllm serve`` (CPU build, loopback): reuse read from the server's
``usage.prompt_tokens_details.cached_tokens``, salt isolation inside the engine, KV events over ZMQ,
streamed decode, the server's own version, and no server left when the cell closes.

One server serves the module (it takes a minute or more to start here); every test uses fresh salts. Its publisher
is bound on ``ipc://`` with a replay buffer and a fixed ``PYTHONHASHSEED``, as the event probes open it, so the event
source's own test (SUB, the replay ROUTER, the inventory against ``cached_tokens``) runs on it too: it had a server of
its own with the same engine and model. So do the served vLLM warm-up and isolation probes (and the warm-up's fault),
attached to it (``endpoint=``, the cell's own attach path): they were in tests/probes/test_on_served.py on a server of
their own, with vLLM's dev routes (``VLLM_SERVER_DEV_MODE=1``) for the fault's ``POST /reset_prefix_cache``, which this
server is started with too."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import numpy as np
import pytest

from conftest import require_engine
from workbench import open_cell, probes
from workbench.cells.vllm.hashing import VllmHasher
from workbench.engine import Cell, observer_mismatches
from workbench.events.consumer import Consumer
from workbench.events.inventory import Inventory

MODEL = "synthetic:cpu"
B = 32

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


SEED = "7"  # the server's PYTHONHASHSEED


@pytest.fixture(scope="module")
def events(tmp_path_factory) -> dict:
    """The publisher's endpoints (short ``ipc://`` paths) and the replay buffer's depth."""
    folder = tmp_path_factory.mktemp("ev")
    return {"endpoint": f"ipc://{folder}/pub", "replay_endpoint": f"ipc://{folder}/replay", "buffer_steps": 100}


@pytest.fixture(scope="module")
def cell(tmp_path_factory, events):
    require_engine("vllm-server")
    with pytest.MonkeyPatch.context() as mp:  # the server reads it as it starts (its dev routes: the probes' fault)
        mp.setenv("VLLM_SERVER_DEV_MODE", "1")
        c = open_cell("vllm-server", MODEL, kv_budget_tokens=40 * B, context_tokens=1024, hash_seed=SEED,
                      kv_events_config=events, log_dir=str(tmp_path_factory.mktemp("logs")))
    with c:
        yield c


def salt() -> str:
    return uuid.uuid4().hex


def prompt(n: int, seed: int) -> list[int]:
    return np.random.default_rng(seed).integers(260, 512, size=n).tolist()


def test_events_from_vllm_serve_replay_and_predict_cached_tokens(cell, events):
    """The vLLM event source from a real ``vllm serve`` (started by workbench.serve): SUB on the publisher's ipc
    endpoint, the replay ROUTER, hash parity over HTTP, and the inventory against ``cached_tokens``. Runs first: the
    server has stored nothing yet, so replay from 0 returns this prompt's batch first (was tests/events/test_vllm_serve.py,
    on a ``vllm serve`` of its own)."""
    from workbench.cells.vllm import events as vllm_events

    sub = vllm_events.Subscriber(connect=events["endpoint"], replay=events["replay_endpoint"])
    consumer = Consumer(sub, Inventory(VllmHasher(B, "sha256", SEED)))
    try:
        prompt = list(range(20, 120))  # 3 full blocks of 32
        model = httpx.get(f"{cell.url}/v1/models").json()["data"][0]["id"]
        rows = []
        for _ in range(2):
            consumer.pump(0.3)
            predicted = consumer.inventory.predict(prompt)
            r = httpx.post(f"{cell.url}/v1/completions", timeout=120, json={
                "model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0.0})
            rows.append((predicted, r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]))
        consumer.pump(0.5)
        assert rows == [(0, 0), (96, 96)]
        stored = [h for e in sub.replay(0) if e.kind == "stored" for h in e.block_hashes]
        assert stored == VllmHasher(B, "sha256", SEED).chain(prompt)  # replay from 0 returns the first batch
        assert stored != VllmHasher(B, "sha256", "0").chain(prompt)
    finally:
        consumer.close()


def test_it_describes_the_server(cell):
    assert isinstance(cell, Cell)
    d = cell.describe()
    assert not observer_mismatches(cell, d.observers)
    assert d.engine == "vllm-server" and d.engine_version.startswith("0.32")
    assert d.extra["transport"] == "http" and d.extra["endpoint"] == cell.url
    assert d.block_tokens == B and int(d.extra["num_gpu_blocks"]) == 40 and d.kv_capacity_tokens == 39 * B
    assert d.context_tokens == 1024 and {"request_counters", "kv_events"} <= set(d.observers)


@pytest.mark.parametrize("n, reused", [(4 * B, 3 * B), (4 * B + 1, 4 * B)])
def test_reuse_is_read_from_the_server(cell, n, reused):
    s, p = salt(), prompt(n, n)
    cold = cell.ensure_prefix(p, salt=s)
    warm = cell.ensure_prefix(p, salt=s)
    assert cold.engine_reused_tokens == 0 and cold.source == "usage.prompt_tokens_details.cached_tokens"
    assert warm.engine_reused_tokens == reused and warm.granularity_tokens == B


def test_another_salt_is_isolated_by_the_server_and_its_events_say_so(cell):
    p, a = prompt(3 * B, 7), salt()
    cell.drain_kv_events()
    cell.ensure_prefix(p, salt=a)
    assert cell.ensure_prefix(p, salt=salt()).engine_reused_tokens == 0
    stored = [e for e in cell.drain_kv_events() if e.kind == "stored"]
    assert len(stored) >= 2 and stored[0].block_tokens == stored[1].block_tokens
    assert not set(stored[0].block_hashes) & set(stored[1].block_hashes)


def test_decode_streams_token_ids_and_the_request_reports_its_reuse(cell):
    s, p = salt(), prompt(2 * B + 5, 9)
    cell.ensure_prefix(p, salt=s)
    seen = []
    dec = cell.decode(max_tokens=8, on_token=lambda t, piece, at: seen.append(t))
    assert len(dec.tokens) == 8 and seen == dec.tokens and dec.finish_reason == "length"
    assert 0 < dec.ttft_s <= dec.token_times_s[-1]
    assert dec.engine_counters["cached_tokens"] == 2 * B


# --------------------------------------------------------------------------- probes attached to this server


def attached(name: str, tmp_path, cell, **params):
    """The probe in this process (so a fault patched onto the served cell reaches the server), attached to the
    module's server; its finding says it went over HTTP to that server, attached, and which build answered."""
    f = probes.run(name, engine="vllm-server", model=MODEL, params=params, out=tmp_path, isolated=False,
                   cell_options={"endpoint": cell.url})
    extra = f.environment["cell"]["extra"]
    assert extra["transport"] == "http" and extra["endpoint"].startswith("http://127.0.0.1:")
    assert extra["server"] == "attached (started elsewhere)" and extra["endpoint"] == cell.url
    assert extra["server_version"].split()[0] == "vllm"
    return f


def test_vllm_server_warmup_materializes_whole_blocks_read_from_cached_tokens(tmp_path, cell):
    f = attached("prefix.warmup_materialization", tmp_path, cell, blocks="2", pressure="0")
    by_len = {r["prefix_tokens"]: r["followup_reused"] for r in f.evidence["rows"]}
    assert by_len == {63: 32, 64: 64, 65: 64} and f.verdict == "refuted"  # ⌊n/B⌋ blocks of 32


def test_vllm_server_isolation_is_the_servers_cache_salt(tmp_path, cell):
    f = attached("isolation.cache_salt", tmp_path, cell, trials=8, prompt_tokens=128)
    assert f.metrics["cross_manifest_reused_tokens"] == {"value": 0, "unit": "tokens", "source": "engine"}
    assert f.metrics["reused_tokens"]["value"] == 96  # cached_tokens under the same salt: 3 whole blocks of 32
    arm = next(r for r in f.evidence["rows"] if r.get("arm") == "adapter requests")
    assert arm["refused"] is None and "not mapped onto served engines" in arm["error"]  # the cell's, not the engine's


def test_vllm_server_that_drops_the_warmed_prefix_is_seen_by_the_warmup_probe(tmp_path, monkeypatch, cell):
    """Fault through the server's own API: its prefix cache reset (``POST /reset_prefix_cache``, a dev route) right
    after each warm-up, so no warm-up leaves anything to reuse; the follow-up's ``cached_tokens`` says so. (It was
    ``--no-enable-prefix-caching``, a server of its own: the same nothing-to-reuse, read the same way.)"""
    from workbench.cells.vllm import served as vllm_served

    warm = vllm_served.VllmServerCell._warm

    def warm_then_reset(self, tokens, key, retention, *, slot=0):
        out = warm(self, tokens, key, retention, slot=slot)
        assert self.reset_prefix_cache()  # the server's own word that its pool holds no cached block now
        return out

    monkeypatch.setattr(vllm_served.VllmServerCell, "_warm", warm_then_reset)
    f = attached("prefix.warmup_materialization", tmp_path, cell, blocks="2", pressure="0")
    assert f.verdict == "confirmed", f.summary
    assert all(r["from_engine"] and r["followup_reused"] == 0 for r in f.evidence["rows"])


def test_closing_the_cell_stops_every_process_of_the_server(cell):
    """Runs last: vLLM's API server and its engine core share the server's process group."""
    from test_serve import group_alive

    pgid = cell.server.pid
    assert group_alive(pgid) >= 2  # the API server and its engine core
    (rpc,) = map(Path, cell.server.scratch)  # VLLM_RPC_BASE_PATH: the two talk over unix sockets in it
    assert any(p.is_socket() for p in rpc.iterdir()), list(rpc.iterdir())
    cell.close()
    assert not group_alive(pgid, settle_s=20)
    assert not rpc.exists()  # vLLM leaves its sockets behind; the folder holding them goes with the server
