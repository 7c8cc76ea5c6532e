"""The llama-server cell on the real llama-server (loopback, synthetic model): reuse read from the server's
``timings.cache_n``, its slots, streamed decode, errors mapped onto the contract, a crash reported as one.

One server serves most of the module (each test uses its own token ids, and a slot is re-warmed before
it is read)."""

from __future__ import annotations

import os
import signal

import pytest

from conftest import TINY, ids, require_engine
from workbench import ContextOverflow, open_cell, serve
from workbench.cells.llamacpp import served as llama_served
from workbench.engine import Cell, observer_mismatches

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cell(tmp_path_factory):
    require_engine("llamacpp-server")
    with open_cell("llamacpp-server", TINY, slots=2, context_tokens=512,
                   log_dir=str(tmp_path_factory.mktemp("logs"))) as c:
        yield c


def test_it_is_a_cell_that_describes_the_server(cell):
    assert isinstance(cell, Cell)
    d = cell.describe()
    assert not observer_mismatches(cell, d.observers)
    assert d.engine == "llamacpp-server" and d.slots == 2 and d.context_tokens == 512
    assert d.extra["transport"] == "http" and d.extra["endpoint"] == cell.url.rstrip("/")
    assert d.engine_version == d.extra["build_info"] and d.engine_version not in ("", "unknown")
    assert d.extra["total_slots"] == 2 and d.extra["vocab_size"] == 512
    assert d.geometry.layers == 2 and d.geometry.kv_heads == 2 and d.geometry.head_dim == 16
    # what the HTTP surface lacks is declared, never pretended
    assert "kv_readback" not in d.observers and "engine_salt" in d.absent and "reuse_counter" not in d.absent


def test_availability_names_the_build_the_server_reports(cell):
    from workbench import cells

    version = cells.availability("llamacpp-server").version  # from `llama-server --version`, no model loaded
    commit = version.rsplit("commit ", 1)[-1].rstrip(")")
    assert len(commit) >= 7 and commit in cell.describe().engine_version  # the build the running server reports


def test_reuse_is_read_from_the_server_per_request(cell):
    a = ids(120, start=301)
    cold = cell.ensure_prefix(a, slot=0)
    assert cold.source == "timings.cache_n" and cold.engine_reused_tokens == 0
    assert cold.engine_counters["prompt_n"] == 120
    again = cell.ensure_prefix(a, slot=0)
    assert again.engine_reused_tokens == 119  # every token but the last, which the server evaluates again
    longer = cell.ensure_prefix(a + ids(30, start=400), slot=0)
    assert longer.engine_reused_tokens == 120 and longer.engine_counters["prompt_n"] == 30


def test_a_divergent_prompt_reuses_only_the_common_prefix(cell):
    a = ids(100, start=302)
    cell.ensure_prefix(a, slot=0)
    b = a[:60] + ids(40, start=450)
    st = cell.ensure_prefix(b, slot=0)
    assert st.engine_reused_tokens == 60 and st.dropped_tokens == 40


def test_slots_are_the_servers_own(cell):
    a, b = ids(80, start=303), ids(80, start=404)
    cell.ensure_prefix(a, slot=0)
    cell.ensure_prefix(b, slot=1)  # another slot: slot 0's cache survives it
    assert cell.ensure_prefix(a, slot=0).engine_reused_tokens == 79
    assert cell.ensure_prefix(b, slot=1).engine_reused_tokens == 79
    slots = cell.slots()
    assert [s["id"] for s in slots] == [0, 1] and all(s["n_ctx"] == 512 for s in slots)


def test_decode_streams_tokens_and_matches_the_in_process_engine(cell):
    p = ids(64, start=305)
    cell.ensure_prefix(p, slot=0)
    seen = []
    dec = cell.decode(slot=0, max_tokens=12, on_token=lambda t, piece, s: seen.append((t, s)))
    assert len(dec.tokens) == 12 and dec.finish_reason == "length" and len(dec.token_times_s) == 12
    assert 0 < dec.ttft_s <= dec.token_times_s[-1]
    # the synthetic vocabulary's byte tokens end inside UTF-8 characters: llama-server streams no id for them,
    # and the cell asks again, unstreamed, for the request's every id
    held = dec.engine_counters["stream_held_tokens"]
    assert held > 0 and len(seen) == 12 - held
    it = iter(dec.tokens)
    assert all(t in it for t, _ in seen)  # what was streamed is in order among them
    assert dec.engine_counters["cache_n"] == 63  # the warm-up left the prompt in the slot
    with open_cell("llamacpp", TINY, context_tokens=512) as local:
        local.ensure_prefix(p)
        assert local.decode(max_tokens=12).tokens == dec.tokens  # same llama.cpp, same greedy tokens


def test_the_next_turn_reuses_the_decoded_reply(cell):
    p = ids(50, start=306)
    cell.ensure_prefix(p, slot=1)
    dec = cell.decode(slot=1, max_tokens=8)
    nxt = cell.ensure_prefix(p + dec.tokens + ids(10, start=420), slot=1)
    assert nxt.engine_reused_tokens >= len(p) + len(dec.tokens) - 1


def test_text_is_tokenized_by_the_server(cell):
    toks = cell.tokenize("hello world")
    assert toks and all(isinstance(t, int) for t in toks)


def test_overflow_is_refused_before_dispatch(cell):
    with pytest.raises(ContextOverflow):
        cell.ensure_prefix(ids(600, start=300), slot=0)


def test_a_refused_connection_names_the_url():
    """Nothing at an attached endpoint is the user's URL to fix (issue 36: an error, not a not-run finding)."""
    from workbench.cells.served_id import NotTheServer

    require_engine("llamacpp-server")
    port = serve.free_port()
    with pytest.raises(NotTheServer, match=f"nothing answered at http://127.0.0.1:{port} .*Connection refused"):
        open_cell("llamacpp-server", TINY, endpoint=f"http://127.0.0.1:{port}")


def test_attaching_to_a_running_server(cell):
    with open_cell("llamacpp-server", TINY, endpoint=cell.url, slots=2) as other:
        assert other.server is None and other.describe().extra["server"].startswith("attached")
        a = ids(40, start=307)
        other.ensure_prefix(a, slot=1)
        assert cell.ensure_prefix(a, slot=1).engine_reused_tokens == 39  # one server, one cache


def test_a_server_that_dies_is_reported_as_a_crash(tmp_path):
    require_engine("llamacpp-server")
    with open_cell("llamacpp-server", TINY, context_tokens=256, log_dir=str(tmp_path)) as c:
        c.ensure_prefix(ids(20))
        os.kill(c.server.pid, signal.SIGSEGV)
        c.server.proc.wait(10)
        with pytest.raises(serve.ServerDied) as e:
            c.ensure_prefix(ids(30))
    assert e.value.signum == signal.SIGSEGV and "SIGSEGV" in str(e.value) and e.value.log_tail


def test_a_public_host_without_a_key_is_refused():
    require_engine("llamacpp-server")
    with pytest.raises(ValueError, match="API key"):
        open_cell("llamacpp-server", TINY, host="0.0.0.0")


def test_another_salt_never_reuses_the_slots_kv(cell):
    """llama-server has no salt: the cell recomputes the prompt (cache_prompt false) when a slot's key changes."""
    a = ids(90, start=308)
    cell.ensure_prefix(a, slot=0, salt="tenant-a")
    assert cell.ensure_prefix(a, slot=0, salt="tenant-b").engine_reused_tokens == 0
    assert cell.ensure_prefix(a, slot=0, salt="tenant-b").engine_reused_tokens == 89


def test_the_servers_ram_prompt_cache_does_not_restore_another_sequence(cell):
    """With --cache-ram on (llama-server's default), a slot would load an earlier prompt's KV back."""
    a, b = ids(100, start=309), ids(100, start=410)
    cell.ensure_prefix(a, slot=0)
    cell.ensure_prefix(b, slot=0)
    assert cell.ensure_prefix(a, slot=0).engine_reused_tokens == 0


@pytest.mark.parametrize("gpu_layers, offloaded", [(None, None), (-1, [3, 3]), (1, [1, 3])])
def test_the_layers_on_the_gpu_are_read_from_the_servers_log(tmp_path, monkeypatch, gpu_layers, offloaded):
    """What llama-server's log says it offloaded ("offloaded N/M layers to GPU", here from a stand-in of its CUDA
    build) is the cell's ``offloaded_layers``; a server asked for nothing, which says nothing, reports none."""
    from loop import standins

    require_engine("llamacpp-server")
    monkeypatch.setenv(llama_served.LLAMA_SERVER_ENV, str(standins.cuda_llama_server(tmp_path, TINY)))
    opts = {} if gpu_layers is None else {"gpu_layers": gpu_layers}
    with open_cell("llamacpp-server", TINY, context_tokens=256, log_dir=str(tmp_path / "logs"), **opts) as c:
        assert c.describe().extra["offloaded_layers"] == offloaded
