"""``workbench evaltable``: one real small table against llama-server measured by AIPerf, and the one-line
errors for a server that is not there or is another kind (before AIPerf or any engine starts)."""

from __future__ import annotations

import http.server
import json
import os
import sys
import threading

import pytest
from typer.testing import CliRunner

from conftest import require_engine
from workbench import serve
from workbench.cli import app
from workbench.evaltable import aiperf, run as evaltable


@pytest.fixture
def some_aiperf(monkeypatch):
    """An executable where the aiperf command is looked for: the errors under test come before it runs."""
    monkeypatch.setenv(aiperf.AIPERF_ENV, sys.executable)


def _table(tmp_path, *args: str):
    return CliRunner().invoke(app, ["evaltable", "--out", str(tmp_path / "t"), *args])


def _one_line_exit_2(res) -> str:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and res.output.count("\n") == 1, res.output
    return res.output


def test_a_server_not_running_is_one_line_naming_the_url_and_what_to_start(tmp_path, some_aiperf):
    url = f"http://127.0.0.1:{serve.free_port()}"
    said = _one_line_exit_2(_table(tmp_path, "--endpoint", url))
    assert f"nothing answered at {url}" in said
    assert f"`workbench serve llamacpp-server -m smollm2-135m --port {url.rsplit(':', 1)[1]}`" in said
    assert not (tmp_path / "t" / "evaltable.json").exists()


def test_a_server_of_another_kind_is_one_line_naming_what_answered(tmp_path, some_aiperf):
    class NotLlama(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"data": [{"id": "m", "owned_by": "vllm"}]}).encode()
            self.send_response(200 if self.path == "/v1/models" else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotLlama) as httpd:
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        try:
            said = _one_line_exit_2(_table(tmp_path, "--endpoint", url))
        finally:
            httpd.shutdown()
    assert f"{url} is not llama-server" in said and "owned_by 'vllm' (vllm serve)" in said
    assert "start llama-server there: `workbench serve llamacpp-server" in said


@pytest.mark.parametrize("args, says", [
    (["--backend", "ollama"], "unknown backend 'ollama'"),
    (["--workload", "prefix-2k"], "unknown workload 'prefix-2k'"),
    (["--concurrency", "0"], "--concurrency must be at least 1"),
    (["--concurrency", "one"], "--concurrency takes comma-separated integers"),
    (["--endpoint", "127.0.0.1:8080"], "is not an http(s) URL"),
])
def test_bad_input_is_refused_before_anything_starts(tmp_path, args, says):
    assert says in _one_line_exit_2(_table(tmp_path, *args))


@pytest.mark.slow
def test_a_small_table_against_llama_server(tmp_path):
    """Both workloads at concurrency 2, two repeats each: every cell measured with its spread, the server's own
    cache counter above zero on the shared prefix (and above the no-prefix workload's), TensorRT-LLM and Triton
    rows not-run with their reason, AIPerf's exports in the run folder and nothing of it in the temp folder."""
    require_engine("llamacpp-server")
    if aiperf.binary() is None:
        pytest.skip(f"no aiperf command: `make setup` installs it (or set {aiperf.AIPERF_ENV})")
    tmp = set(os.listdir(os.environ.get("TMPDIR", "/tmp")))
    req = evaltable.TableRequest(("llamacpp-server", "trtllm-serve", "triton-trtllm"), "smollm2-135m", (2,),
                                 ("no-prefix", "prefix-1k"), 2, tmp_path, requests=4, prompt_tokens=32,
                                 output_tokens=8, prefix_tokens=256)
    rows, as_json, as_md = evaltable.run(req)
    doc = json.loads(as_json.read_text())
    measured = {(r["workload"], r["concurrency"]): r for r in doc["rows"] if r["backend"] == "llamacpp-server"}
    assert set(measured) == {("no-prefix", 2), ("prefix-1k", 2)} and all(r["status"] == "ok" for r in measured.values())
    for r in measured.values():
        assert r["requests"] == 4 and len(r["artifacts"]) == 2
        for tag in doc["metrics"]:
            assert len(r["values"][tag]["runs"]) == 2 and r["values"][tag]["low"] <= r["values"][tag]["high"]
        assert r["values"]["output_tokens_per_s"]["median"] > 0 and r["values"]["load_ttft_p50_s"]["median"] > 0
    cached = {w: measured[(w, 2)]["values"]["engine_cached_prompt_tokens"]["low"] for w in ("no-prefix", "prefix-1k")}
    assert cached["prefix-1k"] > cached["no-prefix"] and cached["prefix-1k"] > 0, cached
    others = [r for r in doc["rows"] if r["backend"] != "llamacpp-server"]
    assert len(others) == 4 and all(r["status"] == "not-run" and "NVIDIA GPU" in r["reason"] for r in others)
    assert (tmp_path / measured[("prefix-1k", 2)]["artifacts"][0] / "profile_export.jsonl").is_file()
    assert "| llamacpp-server | prefix-1k | 2 |" in as_md.read_text()
    assert not {n for n in set(os.listdir(os.environ.get("TMPDIR", "/tmp"))) - tmp if n.startswith(("wb-aiperf-",
                                                                                                     "aiperf"))}
