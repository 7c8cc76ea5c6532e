"""``workbench events watch`` against endpoints that answer wrongly or stop answering, run through the real CLI
against a loopback HTTP server. Each row says what the server does, poll by poll; the CLI must exit 2 (a wrong
endpoint) or 3 (one that answered rightly, then dropped), in one line naming what came back and what a
trtllm-serve 1.2 drain answers, with no traceback, and keep the events it had drained (the drain is destructive).

The right answer is shaped as trtllm-serve 1.2's ``POST /kv_cache_events`` writes it
(tensorrt_llm/serve/openai_server.py ``get_kv_cache_events``; events by ``KVCacheEventSerializer``,
tensorrt_llm/_utils.py). "Unroutable" is a loopback socket that listens and never answers (the same timeout
without leaving this machine)."""

from __future__ import annotations

import json
import re
import socket
import tempfile
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from workbench.cli import app

EVENTS = [{"event_id": 0, "window_size": 16, "data": {"type": "created", "num_blocks_per_cache_level": [64, 0]}},
          {"event_id": 1, "window_size": 16, "data": {"type": "removed", "block_hashes": [18446744073709551557]}}]
ALL_CLEARED = {"event_id": 2, "window_size": 16, "data": {"type": "all_cleared"}}  # post-1.2 kv_event_fanout.py
JSON = "application/json"


def ok(body) -> tuple:
    return 200, JSON, json.dumps(body).encode()


@dataclass(frozen=True)
class Row:
    case: str
    script: tuple  # what the server does at each poll: (status, content-type, body), "close", "hang"; None: silent
    code: int
    said: str  # what the message must name as having come back
    kept: tuple = ()  # the events the message must say are kept, in order


ROWS = [
    Row("401", ((401, JSON, b'{"detail":"Unauthorized"}'),), 2, "HTTP 401 Unauthorized"),
    Row("404", ((404, "text/html", b"<h1>Not Found</h1>"),), 2, "HTTP 404 Not Found (no such route"),
    Row("500", ((500, "text/plain", b"Internal Server Error"),), 2, "HTTP 500 Internal Server Error"),
    Row("an HTML page", ((200, "text/html", b"<!doctype html><title>Grafana</title>"),), 2, "an HTML page"),
    Row("invalid JSON", ((200, JSON, b'[{"event_id": 0,'),), 2, "text that is not JSON"),
    Row("garbage bytes", ((200, "application/octet-stream", b"\x89PNG\r\n\x1a\n\xff\xfe\x00"),), 2,
        "11 bytes that are not text"),
    Row("an object for the list", (ok({"events": EVENTS}),), 2, "a JSON object with keys events where a JSON list"),
    Row("integer items", (ok([1, 2, 3]),), 2, "item 0 is an integer (1), not an event object"),
    Row("an unknown kind", (ok([*EVENTS, ALL_CLEARED]),), 2, "kind 'all_cleared' (item 2, event_id 2); "
        "TensorRT-LLM 1.2 serializes only created, stored, removed, updated", (*EVENTS, ALL_CLEARED)),
    Row("an event not in 1.2's shape", (ok([{"event_id": 0, "window_size": 16, "data": {"type": "stored", "blocks": [
        {"tokens": []}]}}]),), 2, "a 'stored' event (item 0, event_id 0) not in 1.2's shape: KeyError 'block_hash'",
        ({"event_id": 0, "window_size": 16, "data": {"type": "stored", "blocks": [{"tokens": []}]}},)),
    Row("unroutable (never answers)", None, 2, "gave no answer: ReadTimeout after 0.5 s"),
    Row("nothing listens", (), 2, "gave no answer: ConnectError"),
    Row("a 500 after events", (ok(EVENTS), (500, "text/plain", b"boom")), 2, "HTTP 500", tuple(EVENTS)),
    Row("dropped: closed", (ok(EVENTS[:1]), ok(EVENTS[1:]), ok([]), "close"), 3,
        "stopped answering after 3 right answer(s): RemoteProtocolError", tuple(EVENTS)),
    Row("dropped: silent", (ok(EVENTS), "hang"), 3,
        "stopped answering after 1 right answer(s): ReadTimeout after 0.5 s", tuple(EVENTS)),
]


@pytest.fixture
def endpoint(request):
    """Serves one row's script on 127.0.0.1 and yields its URL."""
    row: Row = request.param
    release = threading.Event()
    if row.script is None or row.script == ():
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        if row.script is None:
            sock.listen(8)  # the kernel accepts the connection; nobody ever reads or answers
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        if row.script == ():
            sock.close()  # nothing listens: refused
        yield row, url
        sock.close()
        return
    steps = list(row.script)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            step = steps.pop(0) if len(steps) > 1 else steps[0]
            if step == "hang":
                release.wait(30)
                return
            if step == "close":
                self.close_connection = True
                return
            status, ctype, body = step
            self.send_response(status)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield row, f"http://127.0.0.1:{httpd.server_address[1]}"
    release.set()
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize("endpoint", ROWS, ids=[r.case for r in ROWS], indirect=True)
def test_watch_says_what_the_endpoint_answered_and_keeps_what_it_drained(endpoint, tmp_path, monkeypatch):
    row, url = endpoint
    monkeypatch.setenv("WORKBENCH_STATE", str(tmp_path / "state"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the recovery folder lands here
    r = CliRunner().invoke(app, ["events", "watch", "--endpoint", url, "--json", "--timeout", "0.5",
                                 "--duration", "10"])
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == row.code, r.output
    assert "Traceback" not in r.output and len(lines) == 1 and lines[0].startswith("error: "), r.output
    msg = lines[0]
    assert f"{url}/kv_cache_events" in msg and row.said in msg, msg
    assert "expected TensorRT-LLM's POST /kv_cache_events answer: HTTP 200 and a JSON list of KV events" in msg
    kept = re.search(r"the (\d+) events drained are kept in (\S+\.jsonl)", msg)
    if not row.kept:
        assert kept is None and msg.endswith("no event was drained"), msg
        return
    assert kept and int(kept[1]) == len(row.kept), msg
    with open(kept[2]) as f:
        assert [json.loads(x) for x in f] == list(row.kept)  # as the endpoint sent them, in order
