"""The server launcher on the real llama-server (loopback): readiness, a server that dies, and no server
process that outlives whatever started it (an exception, SIGTERM, SIGKILL of the parent, Ctrl-C of
`workbench serve`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from conftest import TINY, interruptible, require_engine
from workbench import models, serve
from workbench.cells.llamacpp.served import launch as llama_server
from workbench.cells.vllm.served import launch as vllm_serve

pytestmark = pytest.mark.slow


def _gone(pid: int, within_s: float = 20.0) -> bool:
    """Whether process ``pid`` has exited (a zombie counts as gone: it runs nothing) within the time."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < within_s:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        time.sleep(0.1)
    return False


def group_alive(pgid: int, settle_s: float = 0.0) -> int:
    """How many live (not zombie) processes are in process group ``pgid``, after waiting up to ``settle_s``
    for it to empty."""
    t0 = time.monotonic()
    while True:
        n = 0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            n += fields[0] != "Z" and int(fields[2]) == pgid
        if not n or time.monotonic() - t0 >= settle_s:
            return n
        time.sleep(0.2)


def _request(**kw) -> serve.ServerRequest:
    return serve.ServerRequest("llamacpp-server", str(models.resolve(TINY).path), context_tokens=256, **kw)


@pytest.mark.parametrize("host, key, refused", [
    ("127.0.0.1", None, False), ("localhost", None, False), ("::1", None, False),
    ("0.0.0.0", None, True), ("192.168.1.7", None, True), ("0.0.0.0", "secret", False),
])
def test_a_non_loopback_host_needs_an_api_key(host, key, refused):
    if refused:
        with pytest.raises(ValueError, match="API key"):
            serve.check_host(host, key)
    else:
        serve.check_host(host, key)


def test_the_os_picks_a_free_loopback_port():
    p = serve.free_port()
    assert 0 < p < 65536


def test_start_waits_until_ready_and_stop_ends_the_process_group(tmp_path):
    require_engine("llamacpp-server")
    with serve.start(_request(), tmp_path, build=llama_server) as server:
        assert server.url.startswith("http://127.0.0.1:") and server.alive()
        import httpx

        assert httpx.get(server.url + "/health").status_code == 200
        assert os.getpgid(server.pid) == server.pid  # its own group, which stop() ends
        pid = server.pid
    assert _gone(pid) and not group_alive(pid, settle_s=10)
    assert server.log_path.parent == tmp_path and "llama-server" in server.log_path.read_text()
    assert server not in serve.live()


def test_a_server_that_exits_before_it_is_ready_is_reported_with_its_status_and_log(tmp_path):
    require_engine("llamacpp-server")
    bogus = tmp_path / "not-a-model.gguf"
    bogus.write_bytes(b"this is not a GGUF file")
    req = serve.ServerRequest("llamacpp-server", str(bogus))
    with pytest.raises(serve.ServerDied) as e:
        serve.start(req, tmp_path / "logs", build=llama_server, ready_timeout_s=120)
    assert e.value.exitcode not in (None, 0) and e.value.log_tail
    assert "server" in str(e.value) and str(tmp_path / "logs") in str(e.value)
    assert not serve.live()


def test_an_exception_in_the_caller_stops_the_server(tmp_path):
    require_engine("llamacpp-server")
    pid = None
    with pytest.raises(RuntimeError):
        with serve.start(_request(), tmp_path, build=llama_server) as server:
            pid = server.pid
            raise RuntimeError("the probe failed")
    assert _gone(pid)


def test_a_server_started_from_a_thread_that_ends_lives_on(tmp_path):
    """The kernel's parent-death signal follows the thread that forked (prctl(2)): a pool's starter thread that
    ends must not take its server with it."""
    require_engine("llamacpp-server")
    started = []
    starter = threading.Thread(target=lambda: started.append(serve.start(_request(), tmp_path, build=llama_server)))
    starter.start()
    starter.join()
    with started[0] as server:
        assert not _gone(server.pid, 2.0), "the server died with the thread that started it"
        assert server.alive()


CHILD = textwrap.dedent("""
    import sys, time
    from workbench import models, serve
    from workbench.cells.llamacpp.served import launch
    req = serve.ServerRequest("llamacpp-server", str(models.resolve("synthetic:tiny").path), context_tokens=256)
    s = serve.start(req, sys.argv[1], build=launch)
    print(s.pid, flush=True)
    time.sleep(600)
""")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_no_server_outlives_the_process_that_started_it(tmp_path, sig):
    """SIGKILL: the kernel's parent-death signal; SIGTERM: the launcher's handler; SIGINT: atexit."""
    require_engine("llamacpp-server")
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                             env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)}, preexec_fn=interruptible)
    try:
        pid = int(child.stdout.readline())
        assert not _gone(pid, 0.5)
        child.send_signal(sig)
        child.wait(30)
        assert _gone(pid), f"llama-server {pid} outlived its parent after {sig.name}"
        assert not group_alive(pid, settle_s=10)
    finally:
        child.kill()


def test_workbench_serve_prints_its_url_and_stops_the_server_on_ctrl_c(tmp_path):
    require_engine("llamacpp-server")
    cli = subprocess.Popen([sys.executable, "-m", "workbench.cli", "serve", "llamacpp-server", "--model", TINY,
                            "--log-dir", str(tmp_path), "--", "--ctx-size", "512"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)}, preexec_fn=interruptible)
    try:
        line = cli.stdout.readline()
        assert " at http://127.0.0.1:" in line, line + cli.stderr.read()
        url = line.rsplit(" at ", 1)[1].strip()
        import httpx

        assert httpx.get(url + "/health").status_code == 200
        log = cli.stdout.readline()
        pid = int(log.rsplit("(pid ", 1)[1].rstrip(")\n"))
        assert "--ctx-size 512" in Path(log.split()[1]).read_text()  # the arguments after -- reach the server
        cli.send_signal(signal.SIGINT)
        _, said = cli.communicate(timeout=30)
        assert (cli.returncode, said) == (130, "interrupted (SIGINT): the server was stopped\n")  # one line
        assert _gone(pid)
        with pytest.raises(httpx.ConnectError):
            httpx.get(url + "/health")
    finally:
        cli.kill()


def test_workbench_serve_refuses_a_public_host_without_a_key(tmp_path):
    from typer.testing import CliRunner

    from workbench.cli import app

    r = CliRunner().invoke(app, ["serve", "llamacpp-server", "--model", TINY, "--host", "0.0.0.0",
                                 "--log-dir", str(tmp_path)])
    assert r.exit_code == 2 and "API key" in r.output


def _serve_cli(tmp_path, *args, env=None):
    return subprocess.run([sys.executable, "-m", "workbench.cli", "serve", "llamacpp-server", "--model", TINY,
                           "--log-dir", str(tmp_path / "logs"), *args], capture_output=True, text=True, timeout=120,
                          env=os.environ | (env or {}))


def test_a_flag_the_server_refuses_or_a_port_in_use_is_bad_input_not_a_crash(tmp_path):
    """``serve -- --no-such-flag`` exited 3 as a crash, and a port in use failed two ways; both are exit 2, one
    line, the server's own words for its arguments, the port named before anything starts."""
    import socket

    require_engine("llamacpp-server")
    r = _serve_cli(tmp_path, "--", "--no-such-flag")
    assert (r.returncode, r.stderr.count("\n"), "Traceback" in r.stderr) == (2, 1, False), r.stderr
    assert "llamacpp-server refused its arguments: error: invalid argument: --no-such-flag" in r.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = _serve_cli(tmp_path, "--port", str(port))
        assert (r.returncode, r.stderr) == (2, f"error: port {port} on 127.0.0.1 is in use by another process: give "
                                               "another --port, or leave it out for one the OS picks\n")
        with pytest.raises(serve.ServerRefused, match=f"port {port} on 127.0.0.1 is in use"):  # the library too
            serve.start(_request(port=port), tmp_path / "lib", build=llama_server)


def test_the_api_key_reaches_the_server_in_its_environment_never_its_command_line_or_log(tmp_path):
    """``serve --api-key`` put the key on the server's command line (every local user's ``ps``) and the first line
    of its log: now the server reads it from its environment (llama-server: LLAMA_API_KEY), and still enforces it."""
    import httpx

    require_engine("llamacpp-server")
    key = "wb-test-key-3f9a1c"
    with serve.start(_request(api_key=key), tmp_path, build=llama_server) as server:
        assert httpx.get(server.url + "/v1/models").status_code == 401
        assert httpx.get(server.url + "/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code == 200
        for pid in [server.pid, *_below(server.pid)]:
            assert key.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
        assert key not in server.log_path.read_text() and key not in repr(server.request)
    (tmp_path / "key").write_text(key + "\n")
    r = _serve_cli(tmp_path, "--api-key-file", str(tmp_path / "key"), "--api-key", "other")
    assert (r.returncode, r.stderr) == (2, "error: give --api-key (or WORKBENCH_API_KEY) or --api-key-file, not both\n")


def _below(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(stat.parent.name))
        except (OSError, ValueError):
            continue
    return out


def test_vllm_serve_reports_cached_tokens_and_publishes_kv_events_on_loopback(tmp_path):
    import json

    req = serve.ServerRequest("vllm-server", str(tmp_path), options={"kv_events_endpoint": "tcp://127.0.0.1:5999"})
    argv = vllm_serve(req, 8000, tmp_path).argv
    assert "--enable-prompt-tokens-details" in argv and argv[argv.index("--host") + 1] == "127.0.0.1"
    events = json.loads(argv[argv.index("--kv-events-config") + 1])
    assert events == {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://127.0.0.1:5999"}


def test_vllm_serve_runs_its_model_in_the_engine_core_unless_the_user_says_otherwise(tmp_path, monkeypatch):
    """Two processes per server (front end, engine core), not three: the worker's import of torch and vLLM saved."""
    req = serve.ServerRequest("vllm-server", str(tmp_path))
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    assert vllm_serve(req, 8000, tmp_path).env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in vllm_serve(req, 8000, tmp_path).env


def test_trtllm_serve_is_not_run_here_and_says_why():
    from workbench import cells

    a = cells.availability("trtllm-serve")
    if a.available:
        pytest.skip("tensorrt_llm is installed here")
    assert "tensorrt_llm" in a.reason


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _tasks(folder: Path) -> int:
    """Requests the run's llama-server has taken so far, as its log counts them (one line a request it processes)."""
    return sum(p.read_text(errors="replace").count("processing task") for p in folder.glob("llamacpp-server-*.log"))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_on_a_served_engine_leaves_no_server_and_no_partial_finding(tmp_path, sig):
    """``workbench run --engine llamacpp-server`` stopped while a notebook's probe talks to its llama-server:
    the server goes with the run, every finding on disk is whole, and the interrupted notebook is not `ok`."""
    import json

    from conftest import descendants, gone_within
    from workbench import findings

    require_engine("llamacpp-server")
    out = tmp_path / "run"
    run = subprocess.Popen([sys.executable, "-m", "workbench.cli", "run", "--engine", "llamacpp-server", "--model", TINY,
                            "--only", "reuse_metrics", "-p", "repeats=200", "--out", str(out)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path),
                                             "WORKBENCH_SERVER_LOGS": str(out / "servers")},
                           preexec_fn=interruptible)
    try:
        deadline = time.monotonic() + 240
        while not (servers := [p for p in descendants(run.pid) if "llama-server" in _cmdline(p)]):
            assert run.poll() is None and time.monotonic() < deadline, run.stderr.read() if run.poll() is not None else ""
            time.sleep(0.2)
        while _tasks(out / "servers") < 3:  # polled, not a fixed wait: the probe is sending its requests now
            assert run.poll() is None and time.monotonic() < deadline, run.stderr.read() if run.poll() is not None else ""
            time.sleep(0.1)
        below = descendants(run.pid)
        run.send_signal(sig)
        run.wait(60)
        assert run.returncode != 0
        assert gone_within(20, servers) == [], f"llama-server outlived the run after {sig.name}"
        assert gone_within(20, below) == []
        for path in (out / "findings").glob("*.json"):  # nothing half-written
            findings.validate(json.loads(path.read_text()))
        manifest = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {}
        entry = (manifest.get("notebooks") or {}).get("llamacpp-server/20_reuse_metrics", {})
        assert entry.get("status") != "ok"
    finally:
        run.kill()
