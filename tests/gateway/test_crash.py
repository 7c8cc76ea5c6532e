"""A crashed endpoint is a crash, never a verdict (issue 52): the experiment layer every gateway probe runs its
endpoints in (``gateway.pool.started``, which ``Pool`` and ``gateway.pd``'s pair use) ends in
:class:`EndpointCrashed` when a server exits that no fault of the plan killed, naming the endpoint, the signal and its
log's last lines, whether the experiment then failed (a reset connection) or carried on (its retries hid it). Two
llama-server endpoints on the tiny synthetic model (a second each to start) stand in for a pool: the layer is the
same for every served engine; tests/gateway/test_pool.py crashes a real vLLM endpoint mid-routing."""

from __future__ import annotations

import functools
import os
import signal

import httpx
import pytest

from conftest import TINY, require_engine
from workbench import cells
from workbench.gateway.pool import EndpointCrashed, started

pytestmark = pytest.mark.slow


def _opens(tmp_path):
    require_engine("llamacpp-server")
    return {n: functools.partial(cells.open_cell, "llamacpp-server", TINY, log_dir=str(tmp_path / n))
            for n in ("ep0", "ep1")}


def _crash(cell) -> None:
    os.kill(cell.server.pid, signal.SIGKILL)
    cell.server.proc.wait(30)


def test_an_endpoint_that_crashed_while_the_experiment_went_on_ends_it_as_a_crash(tmp_path):
    with pytest.raises(EndpointCrashed) as got:
        with started(_opens(tmp_path), tmp_path) as endpoints:
            _crash(endpoints["ep1"])
            log = endpoints["ep1"].server.log_path  # the experiment carries on, as routing's retries would
    e = got.value
    assert e.endpoint == "ep1" and e.signum == signal.SIGKILL and e.log_path == str(log)
    assert str(e).startswith("endpoint ep1: server crashed with SIGKILL (signal 9)") and "no verdict" in str(e)
    assert e.log_tail and "last lines of the engine's log" in str(e)  # the tail, from the log in the run folder


def test_the_crash_behind_a_failed_request_is_named_not_the_request(tmp_path):
    """``gateway.pd`` exited 1 on a bare ``httpx.RemoteProtocolError`` when an endpoint was killed: the error the
    experiment raised now stands behind the crash it came from."""
    with pytest.raises(EndpointCrashed) as got:
        with started(_opens(tmp_path), tmp_path) as endpoints:
            url = endpoints["ep0"].url
            _crash(endpoints["ep0"])
            httpx.post(f"{url}/completion", json={"prompt": "x", "n_predict": 1}, timeout=5)
    assert got.value.endpoint == "ep0" and isinstance(got.value.__cause__, httpx.TransportError)


def test_a_fault_the_plan_made_is_no_crash(tmp_path):
    faulted: set[str] = set()
    with started(_opens(tmp_path), tmp_path, faulted) as endpoints:
        faulted.add("ep0")  # as Pool.kill records it before it kills
        _crash(endpoints["ep0"])
        assert endpoints["ep1"].server.alive()
