"""``workbench evaltable``: one real small table against llama-server measured by AIPerf (TTFT cold and cached from
its per-request records, the prefix-caching finding confirmed by the server's cached tokens), the same finding
refuted with the server's own caching off and a server killed mid-run reported in one line with what was measured
kept, one real small table against ``vllm serve``, and the one-line errors for a server that is not there or is
another kind (before AIPerf or any engine starts)."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from conftest import require_engine
from forgery import relabel, rewrite, run_folder, settles_nothing
from workbench import findings, models, probes, serve, settle
from workbench.metrics import Support
from workbench.cli import app
from workbench.evaltable import aiperf, backends, exports, finding, run as evaltable
from workbench.evaltable.exports import Request
from workbench.evaltable.split import ENGINE, POSITION, split


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
    (["--requests", "0"], "--requests must be at least 1, got 0"),  # it ran with the default and exited 0
    (["--concurrency", "one"], "--concurrency takes comma-separated integers"),
    (["--concurrency", "2,1,2"], "--concurrency names each level once, got 2,1,2"),
    (["--endpoint", "127.0.0.1:8080"], "is not an http(s) URL"),
    (["--slo-ttft", "0"], "--slo-ttft must be above 0"),
    (["--backend", "vllm-server"], "vllm-server serves a Hugging Face directory, and smollm2-135m is a GGUF"),
    (["--no-prefix-caching", "--endpoint", "http://127.0.0.1:1"], "a server found at --endpoint keeps its own"),
])
def test_bad_input_is_refused_before_anything_starts(tmp_path, args, says):
    assert says in _one_line_exit_2(_table(tmp_path, *args))


def test_a_multi_turn_cell_is_counted_in_whole_conversations_and_each_concurrency_is_a_phase(tmp_path):
    req = evaltable.TableRequest(("llamacpp-server",), "smollm2-135m", (1, 2), ("multi-turn",), 1, tmp_path,
                                 requests=5)
    w = req.workload("multi-turn")
    assert req.cell_requests(2, w) == 6 and w.stop(6) == {"sessions": 2}
    assert req.workload("no-prefix").stop(5) == {"requests": 5}
    cfg = aiperf.Cell("http://h:1", "m", tmp_path, w, ((1, 6), (2, 6)), 7).config(tmp_path / "out")["benchmark"]
    assert [(p["name"], p["concurrency"], p["sessions"]) for p in cfg["phases"]] == [("c1", 1, 2), ("c2", 2, 2)]
    assert cfg["datasets"][0]["entries"] == 4 and cfg["datasets"][0]["turns"] == {"mean": 3, "stddev": 0}


def test_aiperf_request_records_are_read_in_send_order_without_warmup_or_failed_ones(tmp_path):
    """The shape AIPerf 0.13 writes to profile_export.jsonl (one record seen in a real run, trimmed)."""
    def record(start: int, ttft_ms: float, cached: int | None, phase: str = "profiling", error=None) -> str:
        got = {"time_to_first_token": {"value": ttft_ms, "unit": "ms"}, "input_sequence_length": {"value": 302,
                                                                                                 "unit": "tokens"}}
        if cached is not None:
            got["usage_prompt_cache_read_tokens"] = {"value": cached, "unit": "tokens"}
        return json.dumps({"metadata": {"request_start_ns": start, "benchmark_phase": phase}, "metrics": got,
                           "error": error})

    path = tmp_path / exports.RECORDS
    path.write_text("\n".join([record(20, 800.0, 264), record(10, 7269.5, 3), record(5, 1.0, 0, phase="warmup"),
                               record(30, 1.0, None, error={"code": 500}), record(40, 900.0, None)]) + "\n")
    assert exports.requests(path) == (Request(10, 7.2695, 302, 3), Request(20, 0.8, 302, 264),
                                      Request(40, 0.9, 302, None))
    path.write_text('{"metadata": {}}\n')
    with pytest.raises(exports.ExportError, match="line 1 is not an AIPerf 0.13 request record"):
        exports.requests(path)


def _req(ttft: float, prompt: float | None, cached: float | None, at: int) -> Request:
    return Request(at, ttft, prompt, cached)


def test_ttft_splits_by_the_servers_cached_tokens_or_else_by_position():
    by_engine = split([_req(2.0, 300, 20, 0), _req(1.9, 300, 20, 1), _req(0.3, 300, 280, 2), _req(0.4, 300, 150, 3)], 2)
    assert (by_engine.cold, by_engine.cached, by_engine.source) == ((2.0, 1.9), (0.3, 0.4), ENGINE)
    uncounted = split([_req(2.0, 300, None, 0), _req(1.9, 300, 20, 1), _req(0.3, 300, 280, 2)], 1)
    assert (uncounted.cold, uncounted.cached, uncounted.source) == ((2.0,), (1.9, 0.3), POSITION)
    assert split([_req(2.0, 300, 0, 0)], 1).p50("cached") is None


def test_by_position_only_a_runs_first_phase_has_cold_requests(tmp_path):
    """A later phase of one AIPerf run finds the prefix its first phase computed: where the server gives no counts,
    none of its requests is cold (a reviewer's case: each phase's first `concurrency` were counted cold)."""
    from workbench.evaltable.table import Row

    reqs = tuple(_req(t, 300, None, i) for i, t in enumerate((2.0, 1.9, 0.3, 0.4)))
    run = exports.CellExport(tmp_path / "r1", dict.fromkeys(exports.FIELDS, 1.0), 4, 0, reqs, "c2")
    first, later = (Row.measured("vllm-server", "prefix-1k", 2, [run], tmp_path, first=f) for f in (True, False))
    assert first.values["load_ttft_cold_p50_s"].median == 1.95 and later.values["load_ttft_cold_p50_s"] is None
    assert later.values["load_ttft_cached_p50_s"].median == 1.15 and later.split == POSITION


def test_a_cross_check_on_records_its_inputs_lack_is_said_not_raised_as_a_key_error(tmp_path):
    """A record naming a conversation AIPerf's inputs.json lacks: a ValueError the table says beside itself
    (run._crosscheck), before any cell opens; a bare KeyError would end the table in a traceback."""
    from workbench.evaltable import crosscheck

    (tmp_path / crosscheck.INPUTS).write_text(json.dumps({"data": [
        {"session_id": "a", "payloads": [{"messages": [{"role": "user", "content": "hi"}]}]}]}))
    reqs = [Request(i, 0.1, 30, 0, conversation=c) for i, c in enumerate(("a", "b"))]
    with pytest.raises(ValueError, match="conversation.s. b that its inputs.json"):
        crosscheck.ttft("vllm-server", "m", "http://127.0.0.1:9", tmp_path, tmp_path, 1, reqs)


@pytest.mark.parametrize("cached, verdict", [((20, 1040, 1050), "confirmed"), ((20, 0, 0), "refuted"),
                                             ((20, 1040, None), "inconclusive"), ((20,), "inconclusive")])
def test_the_prefix_caching_rule_rests_on_the_repeats_cached_tokens(cached, verdict):
    rows = [{"repeat": i >= 1, "cached_tokens": c} for i, c in enumerate(cached)]
    said, _, values, rests = finding.decide(rows, 1024)
    assert said == verdict and bool(rests) == (verdict != "inconclusive")
    assert all(s.holds(values[s.metric]) for s in rests)


@pytest.mark.parametrize("cached, scraped, verdict", [
    ((20, 1040, 1050), 2100, "confirmed"), ((20, 0, 0), 0, "refuted"),
    ((20, 1040, 1050), 0, "inconclusive"), ((20, 0, 0), 2100, "inconclusive")])
def test_the_servers_metrics_counter_rests_beside_the_per_request_counts(cached, scraped, verdict):
    """The /metrics reading over the same runs must agree with the per-request counts; both then rest the verdict."""
    rows = [{"repeat": i >= 1, "cached_tokens": c} for i, c in enumerate(cached)]
    said, words, values, rests = finding.decide(rows, 1024, backends.Counters(scraped, 3000))
    assert said == verdict and {s.metric for s in rests} == (
        {"engine_repeat_prefix_cached", "engine_metrics_prefix_cached"} if verdict != "inconclusive" else set())
    assert all(s.holds(values[s.metric]) for s in rests) and ("disagree" in words) == (verdict == "inconclusive")


_RUN2_FAILED = "prefix-1k at concurrency 2, repeat 1 of 1: the read after the run failed (GET /metrics: ConnectError)"


@pytest.mark.parametrize("readings, same, verdict, rests, says", [
    # one failed read leaves that run out of the /metrics reading, named; the other run's reading still rests
    ([backends.Counters(528, 900), _RUN2_FAILED], "", "confirmed", {"engine_repeat_prefix_cached",
                                                                    "engine_metrics_prefix_cached"}, _RUN2_FAILED),
    ([_RUN2_FAILED, backends.Counters(528, 900)], "", "confirmed", {"engine_repeat_prefix_cached",
                                                                    "engine_metrics_prefix_cached"}, "1 of 2 run(s)"),
    ([backends.Counters(0, 900), _RUN2_FAILED], "", "inconclusive", set(), "disagree"),
    (["r1: the read before the run failed (/metrics has no x)", _RUN2_FAILED], "", "confirmed",
     {"engine_repeat_prefix_cached"}, "the per-request counts alone"),
    # llama-server: /metrics is the responses' own variable: it checks their sum, and rests nothing
    ([backends.Counters(536, 900), backends.Counters(536, 900)], "server-context.cpp: n_past", "confirmed",
     {"engine_repeat_prefix_cached"}, "own variable (server-context.cpp: n_past): it equals their sum (1072)"),
    # ... and a sum other than the responses' is requests the table did not send: another client
    ([backends.Counters(9999, 900), backends.Counters(536, 900)], "server-context.cpp: n_past", "inconclusive",
     set(), "something else used the server"),
    ([backends.Counters(0, 900), backends.Counters(0, 900)], "server-context.cpp: n_past", "inconclusive", set(),
     "disagree"),
])
def test_metrics_are_read_per_run_and_the_same_counter_is_no_second_reading(readings, same, verdict, rests, says):
    """A reviewer's two cases: one failed /metrics read turned the cross-check off for the whole finding; and
    llama-server's /metrics counter, the very variable each response's cached_tokens is, counted as a second
    reading. Two runs of two repeats each, 264 of a 256-token prefix cached on every repeat."""
    rows = [{"repeat": i >= 1, "cached_tokens": 264 if i >= 1 else 8, "prompt_tokens": 300, "run_index": k}
            for k in (0, 1) for i in range(3)]
    said, words, values, rested = finding.decide(rows, 256, readings, same)
    assert said == verdict and {s.metric for s in rested} == rests and says in words, words
    assert all(s.holds(values[s.metric]) for s in rested)
    if "engine_metrics_prefix_cached" in values and not any(isinstance(r, str) for r in readings):
        assert values["engine_metrics_cached_tokens"] == sum(r.cached for r in readings)
    rates = finding.hit_rates(rows, 256, readings)
    assert ("engine_metrics_hit_rate" in rates) == any(isinstance(r, backends.Counters) for r in readings)


_BOTH = ("engine_repeat_prefix_cached", "engine_metrics_prefix_cached")
_COUNTS = ("engine_repeat_prefix_cached",)


@pytest.mark.parametrize("backend, caching, rests, metrics, why", [
    ("vllm-server", True, _BOTH, 1.0, ""),
    ("vllm-server", True, _COUNTS, 0.0, "disagree"),  # a disagreeing /metrics reading left aside
    ("vllm-server", True, _COUNTS, 1.0, "does not rest on it"),  # an agreeing one left aside
    ("vllm-server", False, _BOTH, 1.0, "exploratory: prefix_caching=False"),
    ("llamacpp-server", True, _COUNTS, 1.0, ""),  # llama-server: the same counter rests nothing
    ("llamacpp-server", True, _COUNTS, 0.0, "disagree"),  # yet it must agree
    ("llamacpp-server", True, _BOTH, 1.0, "as a second reading")])
def test_a_stored_verdict_settles_only_on_both_readings_and_never_from_the_caching_off_fault(backend, caching, rests,
                                                                                               metrics, why, hand_built):
    """What settle re-checks in a stored finding (a reviewer's case: /metrics recorded at 0, the verdict resting on
    the per-request count alone, would have settled as confirmed; and one resting on llama-server's /metrics counter,
    the per-request count's own variable, as if it were a second reading). Which backend keeps one variable is the
    source's word (backends.BACKENDS), never the finding's own."""
    values = {"engine_repeat_prefix_cached": 1.0, "engine_metrics_prefix_cached": metrics}
    o = probes.Outcome("confirmed", "x", values, [{"repeat": True}],
                       rests_on=tuple(Support(m, ">=", finding.COVER) for m in rests))
    same = backends.BACKENDS[backend].same_counter
    monkey = pytest.MonkeyPatch.context()
    with monkey as m:  # hand-built rows: the rule's own re-derivation is tested on real tables below
        m.setattr(probes, "check_derivable", lambda decl, f: None)
        f = finding._as_finding(o, finding.Served(backend, "b1", caching, 1024, same), None, {"model": "m"})
    said = settle.unsettled(f, finding.CLAIM)
    assert (said == ()) if not why else any(why in s for s in said), said


def _measured(doc: dict, backend: str) -> dict:
    return {(r["workload"], r["concurrency"]): r for r in doc["rows"] if r["backend"] == backend}


def _caching_finding(folder: Path, engine: str) -> findings.Finding:
    found = [f for _, f in findings.scan([folder / "findings"]).findings if f.engine == engine]
    assert len(found) == 1, found
    return found[0]


def _settles(f: findings.Finding, fault: bool = False) -> None:
    """The verdict re-derives from what the finding recorded (workbench.settle), resting on the server's two
    counts: each response's cached tokens and its /metrics counter over the same runs (llama-server: the first
    alone, its /metrics counter being the same variable); a run with caching off (the fault) settles nothing, as
    exploratory, and for that reason only."""
    said = settle.unsettled(f, finding.CLAIM)
    assert said == (() if not fault else tuple(s for s in said if s.startswith("exploratory: prefix_caching=False"))), said
    assert bool(said) == fault
    same = backends.BACKENDS[f.engine].same_counter
    assert f.params["metrics_counter"] == ("same" if same else "independent")
    assert {s["metric"] for s in f.rests_on} == {"engine_repeat_prefix_cached"} | (
        set() if same else {"engine_metrics_prefix_cached"})
    assert "engine_metrics_prefix_cached" in f.metrics
    assert all(f.metrics[s["metric"]]["source"] == "engine" for s in f.rests_on)


def _require(engine: str) -> None:
    require_engine(engine)
    if aiperf.binary() is None:
        pytest.skip(f"no aiperf command: `make setup` installs it (or set {aiperf.AIPERF_ENV})")


def _llama_table(out: Path) -> tuple[Path, Path, Path]:
    """llama-server's small table (test_a_small_table_against_llama_server): its folder, JSON and Markdown."""
    _require("llamacpp-server")
    _, as_json, as_md = evaltable.run(evaltable.TableRequest(
        ("llamacpp-server", "trtllm-serve", "triton-ensemble", "triton-llmapi"), "smollm2-135m", (2,),
        ("no-prefix", "prefix-1k"), 1, out, requests=4, prompt_tokens=32, output_tokens=8, prefix_tokens=256))
    return out, as_json, as_md


def _endpoint_table(out: Path) -> tuple[Path, str]:
    """The table at the --endpoint of a llama-server started here with its caching off (test_a_server_at_its_…);
    its folder and the server's URL."""
    _require("llamacpp-server")
    b = backends.BACKENDS["llamacpp-server"]
    path = str(backends.model_path(b, models.resolve("smollm2-135m")))
    server = serve.start(serve.ServerRequest(b.name, path, context_tokens=1024, extra_args=b.cache_off,
                                             options=b.options(Path(path), 1024, 1)), out / "servers",
                         build=b.launch)
    try:
        evaltable.run(evaltable.TableRequest(("llamacpp-server",), "smollm2-135m", (1,), ("prefix-1k",), 1,
                                             out / "t", requests=3, prompt_tokens=32, output_tokens=8,
                                             prefix_tokens=256, endpoint=server.url,
                                             ttft_crosscheck=False))  # the cross-check: llama-server's table's test
    finally:
        server.stop()
    return out / "t", server.url


def _vllm_table(caching: bool, out: Path) -> Path:
    """A ``vllm serve`` table, caching on or off (test_a_small_table_against_vllm_serve)."""
    _require("vllm-server")
    evaltable.run(evaltable.TableRequest(("vllm-server",), "synthetic:cpu", (1,), ("prefix-1k",), 1, out,
                                         requests=3, prompt_tokens=32, output_tokens=8, prefix_tokens=256,
                                         prefix_caching=caching))
    return out


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict[Any, Any]:
    """The module's real tables that share nothing, run side by side (each its own server, port, AIPerf and folder):
    llama-server's small table, the table at a llama-server's --endpoint, and the two ``vllm serve`` tables, caching
    on and off: the suite pays about one vLLM start and the llama-server tables run beside it. What each table
    returned or raised, by name (each test fails or skips on its own), and ``"temp"``: what of AIPerf's was left in
    the temp folder once all of them had ended. (The caching-off table that kills its server mid-run runs alone:
    it kills a llama-server by name.)"""
    from concurrent.futures import ThreadPoolExecutor
    from functools import partial

    with contextlib.suppress(ImportError):  # here, not first in two threads at once: transformers' lazy module,
        from transformers import AutoTokenizer  # noqa: F401  imported by two, raised "cannot import name" in one
    runs = {"llama": _llama_table, "endpoint": _endpoint_table, "vllm-on": partial(_vllm_table, True),
            "vllm-off": partial(_vllm_table, False)}
    outs = {name: tmp_path_factory.mktemp(name) for name in runs}
    temp = os.environ.get("TMPDIR", "/tmp")
    before = set(os.listdir(temp))
    with ThreadPoolExecutor(len(runs)) as ex:
        futures = {name: ex.submit(run, outs[name]) for name, run in runs.items()}
    got: dict[Any, Any] = {name: f.exception() or f.result() for name, f in futures.items()}
    got["temp"] = {n for n in set(os.listdir(temp)) - before if n.startswith(("wb-aiperf-", "aiperf"))}
    return got


def _table_of(tables: dict, name: str) -> Any:
    got = tables[name]
    if isinstance(got, BaseException):
        raise got
    return got


@pytest.mark.slow
def test_a_small_table_against_llama_server(tables):
    """Both workloads at concurrency 2, one repeat each (two AIPerf runs; the spread over repeats is Spread's and the
    table's own tests', the per-run /metrics reading decide's): every cell measured, TTFT cold and cached
    split by the server's cached tokens, the server's own cache counter above zero on the shared prefix (and above
    the no-prefix workload's), prefix caching confirmed by it, TensorRT-LLM and Triton rows not-run with their
    reason (trtllm-serve's finding too), AIPerf's exports in the run folder and nothing of it in the temp folder
    (nor of the tables run beside it)."""
    tmp_path, as_json, as_md = _table_of(tables, "llama")
    doc = json.loads(as_json.read_text())
    measured = _measured(doc, "llamacpp-server")
    assert set(measured) == {("no-prefix", 2), ("prefix-1k", 2)} and all(r["status"] == "ok" for r in measured.values())
    for r in measured.values():
        assert r["requests"] == 4 and len(r["artifacts"]) == 1 and r["split"] == ENGINE
        for tag in doc["metrics"]:
            v = r["values"][tag]
            assert v is None or (len(v["runs"]) == 1 and v["low"] <= v["median"] <= v["high"]), (tag, v)
        assert r["values"]["output_tokens_per_s"]["median"] > 0 and r["values"]["load_ttft_p50_s"]["median"] > 0
    prefix = measured[("prefix-1k", 2)]["values"]
    assert prefix["load_ttft_cold_p50_s"] and prefix["load_ttft_cached_p50_s"]  # each run: 2 slots cold, then cached
    cached = {w: measured[(w, 2)]["values"]["engine_cached_prompt_tokens"]["low"] for w in ("no-prefix", "prefix-1k")}
    assert cached["prefix-1k"] > cached["no-prefix"] and cached["prefix-1k"] > 0, cached
    others = [r for r in doc["rows"] if r["backend"] != "llamacpp-server"]
    assert len(others) == 6 and all(r["status"] == "not-run" and "NVIDIA GPU" in r["reason"] for r in others)
    assert (tmp_path / measured[("prefix-1k", 2)]["artifacts"][0] / "profile_export.jsonl").is_file()
    assert "| llamacpp-server | prefix-1k | 2 |" in as_md.read_text()
    f = _caching_finding(tmp_path, "llamacpp-server")
    assert f.verdict == "confirmed", f.summary
    _settles(f)
    [check] = doc["ttft_crosscheck"]  # the served cell's TTFT beside AIPerf's, on prefix-1k's first run
    assert check.startswith("TTFT cross-check on 2 repeats of aiperf/llamacpp-server/prefix-1k/r1 (workbench-timed"), check
    assert check in f.evidence["notes"] and "Cross-check of AIPerf's TTFT" in as_md.read_text()
    assert f.metric("load_ttft_repeat_over_first") is not None  # the TTFT drop beside it, with its interval
    assert 0 < f.metric("engine_metrics_hit_rate") <= 1 and f.metric("expected_prefix_hit_rate") > 0  # cross-check
    subject = _caching_finding(tmp_path, "trtllm-serve")
    assert subject.verdict == "not-run" and "tensorrt_llm" in subject.reason
    assert not tables["temp"], tables["temp"]


def _kill_llama_server_once_running(folder: Path) -> threading.Thread:
    """SIGKILL this test's llama-server once AIPerf has started on ``folder`` (it made the folder) and run a while."""
    import psutil

    def kill() -> None:
        deadline = time.monotonic() + 300
        while not folder.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)  # AIPerf is starting its services (tens of seconds on two busy cores): the server stops
        # under the run, which the table's poll of the server sees whichever of AIPerf's steps it is in
        for child in psutil.Process().children(recursive=True):
            if child.name() == "llama-server":
                os.kill(child.pid, signal.SIGKILL)

    t = threading.Thread(target=kill, daemon=True)
    t.start()
    return t


@pytest.mark.slow
def test_caching_off_refutes_and_a_server_killed_mid_run_is_one_line_with_what_was_measured_kept(tmp_path):
    """llama-server started with its own prompt caching off (``--no-cache-prompt``): the shared prefix is computed
    again on every request, so the finding is refuted by the server's count. Then the server is SIGKILLed during
    the next AIPerf run: one line naming the URL, the signal and the log's end, exit 2, the measured row, its
    AIPerf exports and the finding kept, and the cell it stopped in marked crashed."""
    require_engine("llamacpp-server")
    if aiperf.binary() is None:
        pytest.skip(f"no aiperf command: `make setup` installs it (or set {aiperf.AIPERF_ENV})")
    out = tmp_path / "t"
    killer = _kill_llama_server_once_running(out / "aiperf" / "llamacpp-server" / "no-prefix")
    res = _table(tmp_path, "--no-prefix-caching", "--workload", "prefix-1k,no-prefix", "--concurrency", "1",
                 "--repeats", "1", "--requests", "3", "--prompt-tokens", "32", "--output-tokens", "8",
                 "--prefix-tokens", "256", "--no-ttft-crosscheck")  # the cross-check: the table above's test
    killer.join(timeout=10)
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    said = res.output.splitlines()[-1]  # after the progress lines: the error, one line
    assert said.startswith("error: "), res.output
    assert "llama-server: server crashed with SIGKILL (signal 9) during no-prefix at concurrency 1" in said, said
    assert "against http://127.0.0.1:" in said and "its log ends" in said and "1 cell(s) measured" in said
    doc = json.loads((out / "evaltable.json").read_text())
    rows = _measured(doc, "llamacpp-server")
    assert rows[("prefix-1k", 1)]["status"] == "ok" and rows[("no-prefix", 1)]["status"] == "crashed"
    assert doc["setup"]["prefix caching"] == "off (the fault)"
    assert (out / rows[("prefix-1k", 1)]["artifacts"][0] / "profile_export.jsonl").is_file()
    f = _caching_finding(out, "llamacpp-server")
    assert f.verdict == "refuted" and f.params["prefix_caching"] is False, f.summary
    assert f.metric("engine_repeat_prefix_cached") == 0 and f.metric("engine_metrics_cached_tokens") == 0
    _settles(f, fault=True)


@pytest.mark.slow
@pytest.mark.parametrize("caching", [True, False], ids=["caching-on", "caching-off"])
def test_a_small_table_against_vllm_serve(tables, caching):
    """``vllm serve`` on the synthetic model's Hugging Face twin (its own folder is AIPerf's tokenizer): the shared
    prefix at concurrency 1, every cell measured, TTFT split by vLLM's own cached tokens, prefix caching confirmed
    by them and by vLLM's /metrics; started with ``--no-enable-prefix-caching`` (the fault), refuted by both."""
    tmp_path = _table_of(tables, "vllm-on" if caching else "vllm-off")
    doc = json.loads((tmp_path / "evaltable.json").read_text())
    row = _measured(doc, "vllm-server")[("prefix-1k", 1)]
    assert row["status"] == "ok" and row["requests"] == 3 and row["split"] == ENGINE
    assert row["values"]["output_tokens_per_s"]["median"] > 0
    assert bool(row["values"]["load_ttft_cached_p50_s"]) == caching
    f = _caching_finding(tmp_path, "vllm-server")
    assert f.verdict == ("confirmed" if caching else "refuted"), f.summary
    assert (f.metric("engine_metrics_cached_tokens") > 0) == caching and f.params["prefix_caching"] is caching
    assert f.params["server_flags"]["vllm:cache_config_info"]["enable_prefix_caching"] == str(caching)  # its word
    _settles(f, fault=not caching)
    if caching:  # issue 48's eval relabel: this real vLLM finding filed as trtllm-serve's settles nothing
        forged = run_folder(tmp_path / "forged", tmp_path / "findings" / f"{f.id}.json")
        rewrite(forged / "findings" / f"{f.id}.json", relabel("trtllm-serve"))
        settles_nothing(forged, finding.CLAIM, "edited after its run", "runs only on an NVIDIA GPU")


def test_a_batch_on_tensorrt_llm_writes_its_rows_not_run_with_the_command_beside_the_runs_findings(tmp_path, some_aiperf):
    """``make run``'s TensorRT-LLM arm of ``notebooks/80_evaltable`` (``in_batch``): no GPU, so trtllm-serve and
    Triton rows are not-run with their reason, the table lands in the run folder's ``evaltable/trtllm/`` and
    trtllm-serve's finding in the run's findings, naming the command that resolves it."""
    assert backends.for_engine("vllm") == ("vllm-server",) and backends.for_engine("vllm-server") == ("vllm-server",)
    with pytest.raises(ValueError, match="no eval-table backend for engine 'ollama'"):
        backends.for_engine("ollama")
    rows, table, found = evaltable.in_batch("trtllm", "smollm2-135m", tmp_path / "findings", concurrency="1,2",
                                            workloads="prefix-1k", requests=4, repeats=1)
    assert table == tmp_path / "evaltable" / "trtllm" / "evaltable.md"
    assert [(r.backend, r.status) for r in rows] == [(n, "not-run") for n in backends.NOT_HERE]  # trtllm-serve, Triton
    assert rows[0].backend == "trtllm-serve" and len(rows) >= 2
    [f] = found
    assert f.verdict == "not-run" and "workbench evaltable --backend trtllm-serve" in f.reason
    assert [p.name.split("-")[0] for p in (tmp_path / "findings").glob("*.json")] == ["evaltable.prefix_caching"]


@pytest.mark.slow
def test_a_server_at_its_endpoint_is_measured_as_it_says_it_caches_never_as_assumed(tables):
    """Issue 48 (LOW): an ``--endpoint`` run recorded "caching on" for a llama-server started with it off, and neither
    the endpoint nor the server's flags. llama-server states no server-wide cache flag, so its caching is unsaid: the
    finding records the endpoint and exactly that, and is exploratory (settles nothing)."""
    folder, url = _table_of(tables, "endpoint")
    f = _caching_finding(folder, "llamacpp-server")
    assert f.params["prefix_caching"] is None and f.params["endpoint"] == url, f.params
    assert "caching not said by the server" in f.summary, f.summary
    assert any(w.startswith("exploratory: prefix_caching=None") for w in settle.unsettled(f, finding.CLAIM))
