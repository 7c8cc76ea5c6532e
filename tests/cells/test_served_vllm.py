"""The vllm-server cell on the real ``vllm serve`` (CPU build, loopback): reuse read from the server's
``usage.prompt_tokens_details.cached_tokens``, salt isolation inside the engine, KV events over ZMQ,
streamed decode, the server's own version, and no server left when the cell closes.

One server serves the module (it takes a minute or more to start here); every test uses fresh salts."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pytest

from conftest import require_engine
from workbench import open_cell
from workbench.engine import Cell, observer_mismatches

MODEL = "synthetic:cpu"
B = 32

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def cell(tmp_path_factory):
    require_engine("vllm-server")
    with open_cell("vllm-server", MODEL, kv_budget_tokens=40 * B, context_tokens=1024,
                   log_dir=str(tmp_path_factory.mktemp("logs"))) as c:
        yield c


def salt() -> str:
    return uuid.uuid4().hex


def prompt(n: int, seed: int) -> list[int]:
    return np.random.default_rng(seed).integers(260, 512, size=n).tolist()


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
