"""The Triton client (:mod:`workbench.evaltable.triton`) against a real ``tritonserver`` (2.51.0, from the
``nvidia-pytriton`` wheel that ``make setup-triton`` puts in ``.venv-triton``) on 127.0.0.1, one server for the
module serving a test-only Python-backend stand-in for each TensorRT-LLM model shape (``triton_models/``: their
tensor names from the backend's own config.pbtxt files, cited there). The stand-ins never make a finding: the
table's Triton rows stay ``not-run``. Also: the one-line errors for a server that is not running, one of another
kind, a model that is missing or of the other shape, and a server killed mid-run."""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from test_evaltable import _one_line_exit_2
from workbench import serve
from workbench.cli import app
from workbench.engine import WorkbenchError
from workbench.evaltable import aiperf, backends, triton
from workbench.evaltable.backends import ServerGone

ROOT = Path(__file__).resolve().parents[2]
MODELS = Path(__file__).with_name("triton_models")
TRITON_VENV_ENV = "WORKBENCH_TRITON_VENV"


def _site_packages() -> Path | None:
    venv = Path(os.environ.get(TRITON_VENV_ENV, ROOT / ".venv-triton"))
    site = next(iter(sorted(venv.glob("lib/python3.*/site-packages"))), None)
    return site if site and (site / "pytriton/tritonserver/bin/tritonserver").is_file() else None


def _repository(root: Path, site: Path) -> tuple[Path, Path]:
    """A backend folder (the python backend with the stub for the environment's Python, as PyTriton lays it out)
    and a model repository with each stand-in as its model's ``1/model.py``."""
    server = site / "pytriton/tritonserver"
    python = root / "backends/python"
    python.mkdir(parents=True)
    for f in (server / "backends/python").glob("*.*"):
        shutil.copy(f, python)
    shutil.copy(server / "python_backend_stubs" / site.parent.name[len("python"):] / "triton_python_backend_stub", python)
    for config in MODELS.glob("*/config.pbtxt"):
        (root / "models" / config.parent.name / "1").mkdir(parents=True)
        shutil.copy(config, root / "models" / config.parent.name)
        shutil.copy(MODELS / "standin.py", root / "models" / config.parent.name / "1/model.py")
    return root / "backends", root / "models"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``(url, process)`` of one tritonserver serving both stand-ins; stopped after the module."""
    site = _site_packages()
    if site is None:
        pytest.skip(f"no tritonserver: `make setup-triton` installs nvidia-pytriton in .venv-triton (or set {TRITON_VENV_ENV})")
    root = tmp_path_factory.mktemp("triton")
    backend_dir, repo = _repository(root, site)
    python = site.parents[2] / "bin/python"
    libdir = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    # the stub links libpython and PyTriton's bundled CUDA runtime; the stand-ins import numpy from the environment
    env = os.environ | {"LD_LIBRARY_PATH": os.pathsep.join([libdir, str(site / "nvidia_pytriton.libs")]),
                        "STANDIN_SITE_PACKAGES": str(site)}
    port = serve.free_port()
    shm = "triton_python_backend_shm_region_"  # the python backend's: those it made are removed, even after a kill
    before = set(Path("/dev/shm").glob(shm + "*"))
    log = open(root / "tritonserver.log", "w")
    proc = subprocess.Popen([site / "pytriton/tritonserver/bin/tritonserver", f"--model-repository={repo}",
                             f"--backend-directory={backend_dir}", "--http-address=127.0.0.1", f"--http-port={port}",
                             "--allow-grpc=false", "--allow-metrics=false"],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, proc, root / "tritonserver.log")
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
        for region in set(Path("/dev/shm").glob(shm + "*")) - before:
            region.unlink(missing_ok=True)


def _wait_ready(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"tritonserver exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(url + "/v2/health/ready", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    pytest.fail(f"tritonserver not ready in 120 s: {log.read_text()[-2000:]}")


def test_the_shapes_are_the_tables_triton_backends():
    assert set(triton.SHAPES) == set(backends.AT_ENDPOINT) <= set(backends.NOT_HERE)


@pytest.mark.parametrize("name", sorted(triton.SHAPES))
def test_each_shape_answers_and_its_reused_blocks_are_read(server, name):
    """The first request after a new shared prefix reuses nothing, the later ones its blocks (the LLM-API model
    sends the count as a string: read as an integer)."""
    url, _ = server
    shape = triton.SHAPES[name]
    served = triton.connect(url, shape)
    assert served.triton_version == "2.51.0" and served.model == shape.model and shape.max_tokens in served.inputs
    got = triton.prefix_reuse(url, shape, f"{name} shared prefix " * 8, [" one", " two", " three"], 3)
    assert [g.text for g in got] == ["tok tok tok"] * 3
    counts = [g.reused_blocks for g in got]
    assert counts[0] == 0 and all(isinstance(c, int) and c > 0 for c in counts[1:]), counts


def _table(tmp_path, monkeypatch, *args: str):
    monkeypatch.setenv(aiperf.AIPERF_ENV, sys.executable)  # the Triton rows never run AIPerf
    return CliRunner().invoke(app, ["evaltable", "--out", str(tmp_path / "t"), *args])


def test_the_table_reads_a_triton_at_its_endpoint_into_not_run_rows_and_makes_no_finding(server, tmp_path, monkeypatch):
    url, _ = server
    res = _table(tmp_path, monkeypatch, "--backend", "triton-llmapi", "--endpoint", url, "--workload",
                 "no-prefix,prefix-1k", "--requests", "3", "--prefix-tokens", "64")
    assert res.exit_code == 0, res.output
    rows = json.loads((tmp_path / "t/evaltable.json").read_text())["rows"]
    assert [(r["workload"], r["status"]) for r in rows] == [("no-prefix", "not-run"), ("prefix-1k", "not-run")]
    assert "Triton 2.51.0" in rows[0]["reason"] and "kv_cache_reused_block" not in rows[0]["reason"]
    assert "kv_cache_reused_block on 3 requests" in rows[1]["reason"]
    read = json.loads((tmp_path / "t/triton-llmapi.json").read_text())
    counts = [g["reused_blocks"] for g in read["generations"]]
    assert counts[0] == 0 and counts[1] == counts[2] == read["prefix_chars"] // 16, read  # the stand-in's 16-char blocks
    assert not list((tmp_path / "t").glob("findings/*.json"))


def test_without_an_endpoint_the_triton_rows_are_not_run_with_the_command_that_resolves_them(tmp_path, monkeypatch):
    res = _table(tmp_path, monkeypatch, "--backend", "triton-ensemble", "--backend", "triton-llmapi",
                 "--workload", "prefix-1k")
    assert res.exit_code == 0, res.output
    rows = json.loads((tmp_path / "t/evaltable.json").read_text())["rows"]
    assert [(r["backend"], r["status"]) for r in rows] == [("triton-ensemble", "not-run"), ("triton-llmapi", "not-run")]
    for r in rows:
        assert "NVIDIA GPU" in r["reason"] and f"`workbench evaltable --backend {r['backend']} --endpoint " in r["reason"]
    assert not list((tmp_path / "t").glob("findings/*.json"))


def test_a_triton_not_running_is_one_line_naming_the_url_and_what_to_start(tmp_path, monkeypatch):
    url = f"http://127.0.0.1:{serve.free_port()}"
    said = _one_line_exit_2(_table(tmp_path, monkeypatch, "--backend", "triton-ensemble", "--endpoint", url))
    assert f"nothing answered at {url}" in said and "start Triton with the TensorRT-LLM backend's ensemble model" in said
    assert f"--http-port {url.rsplit(':', 1)[1]}" in said and not (tmp_path / "t/evaltable.json").exists()


def test_a_server_of_another_kind_is_one_line(tmp_path, monkeypatch):
    """A plain file server: ``GET /v2`` is its 404 page."""
    class Files(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass

    handler = functools.partial(Files, directory=str(tmp_path))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as httpd:
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        try:
            said = _one_line_exit_2(_table(tmp_path, monkeypatch, "--backend", "triton-llmapi", "--endpoint", url))
        finally:
            httpd.shutdown()
    assert f"{url} is not Triton: GET /v2 answered 404" in said and "LLM-API model" in said


@pytest.mark.parametrize("name, value, read", [
    ("triton-ensemble", "5", 5), ("triton-llmapi", '"5"', 5), ("triton-ensemble", "[5]", 5),
    ("triton-llmapi", '["7"]', 7), ("triton-ensemble", "null", None),
    ("triton-llmapi", '"inf"', "not a whole count"), ("triton-ensemble", "Infinity", "not a whole count"),
    ("triton-llmapi", "NaN", "not a number"), ("triton-llmapi", '"nan"', "not a number"),
    ("triton-ensemble", '"five"', "not a number"), ("triton-ensemble", "[1, 2]", "not a number"),
    ("triton-ensemble", "[]", "not a number"), ("triton-ensemble", "{}", "not a number"),
    ("triton-ensemble", "true", "not a number"), ("triton-ensemble", "2.5", "not a whole count"),
    ("triton-llmapi", '"-1"', "not a whole count"),
])
def test_an_odd_reused_block_count_is_read_or_one_line_never_a_traceback(name, value, read):
    """What a model may send as its reused-block count: an integer, a string of one, either in a one-element list
    (a shape-[1] tensor) is read; "inf", not-a-number, text, several values, a fraction or a negative is one
    line naming the value (a reviewer's case: a one-element list and "inf" ended in a traceback)."""
    shape, url = triton.SHAPES[name], "http://triton.test:8000"
    answered = json.loads(f'{{"text_output": "x", "{shape.reused}": {value}}}')  # as generate reads the answer
    if not isinstance(read, str):
        assert triton.reused_count(answered[shape.reused], shape, url) == read
        return
    with pytest.raises(WorkbenchError) as e:
        triton.reused_count(answered[shape.reused], shape, url)
    said = str(e.value)
    assert read in said and f"{shape.reused} = {value}"[:60] in said and "\n" not in said and url in said, said


def test_a_missing_model_and_one_of_the_other_shape_are_refused(server):
    url, _ = server
    with pytest.raises(ServerGone, match="Triton 2.51.0 at .* serves no model 'nope'"):
        triton.connect(url, replace(triton.SHAPES["triton-ensemble"], model="nope"))
    with pytest.raises(ServerGone, match="'tensorrt_llm' .* is not the TensorRT-LLM backend's ensemble model: it "
                                         "takes no max_tokens, return_perf_metrics"):
        triton.connect(url, replace(triton.SHAPES["triton-ensemble"], model="tensorrt_llm"))


def test_a_server_killed_mid_run_is_one_line(server):
    """Last in the module: it kills the module's server."""
    url, proc = server
    shape = triton.SHAPES["triton-ensemble"]

    def kill_after_first(i: int) -> None:
        if i == 0:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    with pytest.raises(ServerGone) as e:
        triton.prefix_reuse(url, shape, "killed prefix " * 8, [" a", " b", " c"], 2, after=kill_after_first)
    assert str(e.value).startswith(f"after 1 of 3 requests: nothing answers at {url} any more") and "\n" not in str(e.value)
