"""``workbench probe`` given bad input (issue 36): a served engine attached to something that is not that server,
and a parameter far out of range. Each row runs the real CLI in-process (``tests/clirun.py``) and expects exit 2, a
one-line message, no traceback and no finding; the out-of-range rows fail before any cell opens (the llamacpp-server row points at a port where
nothing listens, so a check made after the open would say so instead)."""

from __future__ import annotations

import http.server
import json
import threading

import pytest
from clirun import wb

from workbench import serve

VLLM_MODELS = {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "vllm", "max_model_len": 4096}]}
ANSWERS = {  # what the loopback server answers, by path ("*": every other path): (status, content type, body)
    "json-api": {"*": (200, "application/json", json.dumps({"status": "ok", "items": [1, 2]}))},
    "html-page": {"*": (200, "text/html", "<!doctype html><html><body><h1>Welcome</h1></body></html>")},
    "vllm-serve": {"/version": (200, "application/json", '{"version": "0.11.0"}'),
                   "/v1/models": (200, "application/json", json.dumps(VLLM_MODELS)),
                   "*": (404, "application/json", '{"detail": "Not Found"}')},
    "http-500": {"*": (500, "text/plain", "Internal Server Error")},
    "http-401": {"*": (401, "application/json", '{"error": {"message": "Invalid API Key"}}')},
}


@pytest.fixture(scope="module")
def fake():
    """One loopback server on a port the OS picks; ``/<kind>/…`` answers as ``ANSWERS[kind]``."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            kind, _, rest = self.path.lstrip("/").partition("/")
            answers = ANSWERS[kind]
            status, ctype, body = answers.get("/" + rest.split("?")[0], answers["*"])
            data = body.encode()
            self.send_response(status)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_POST = do_GET

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


NOTHING = "http://127.0.0.1:{free}"
CASES = [  # (case, engine, cell options, probe params, what the one line says)
    ("a JSON API for llama-server", "llamacpp-server", ["endpoint={fake}/json-api"], [],
     "is not llama-server: GET /props answered 200 (application/json)"),
    ("an HTML page for vllm serve", "vllm-server", ["endpoint={fake}/html-page"], [],
     "is not vllm serve: GET /version answered 200 (text/html)"),
    ("vllm serve for llama-server", "llamacpp-server", ["endpoint={fake}/vllm-serve"], [],
     "owned_by 'vllm' (vllm serve)"),
    ("HTTP 500", "llamacpp-server", ["endpoint={fake}/http-500"], [], "GET /props answered 500"),
    ("HTTP 401", "vllm-server", ["endpoint={fake}/http-401"], [], "refused the API key"),
    ("nothing listening", "llamacpp-server", [f"endpoint={NOTHING}"], [], "Connection refused"),
    ("a malformed URL", "llamacpp-server", ["endpoint=notaurl"], [], "endpoint 'notaurl' is not an http(s) URL"),
    ("32,000,001 tokens", "llamacpp", [], ["tail_tokens=32000001"],
     "tail_tokens=32000001 exceeds the context of model synthetic:tiny (4096 tokens"),
    ("32,000,001 tokens, before any cell opens", "llamacpp-server", [f"endpoint={NOTHING}"],
     ["tail_tokens=32000001"], "tail_tokens=32000001 exceeds the context"),
    ("zero tokens", "llamacpp", [], ["suffix_tokens=0"], "suffix_tokens=0 must be at least 1"),
    ("a negative item", "llamacpp", [], ["blocks=2,-1"], "blocks=-1 must be at least 1"),
    ("an unknown trace, before any pool starts", "vllm-server", [], ["trace=nope"], "unknown trace 'nope'"),
]
PROBE = {"suffix_tokens=0": "prefix.warmup_materialization", "blocks=2,-1": "prefix.warmup_materialization",
         "trace=nope": "gateway.routing"}


def argv(engine: str, cell: list[str], params: list[str], fake: str, free: int, out: str) -> list[str]:
    name = PROBE.get(params[0], "reuse.per_request_metrics") if params else "reuse.per_request_metrics"
    args = ["probe", name, "--engine", engine, "--model", "synthetic:tiny", "--out", out]
    return args + [x for c in cell for x in ("-c", c.format(fake=fake, free=free))] + [x for p in params for x in ("-p", p)]


@pytest.fixture(scope="module")
def free():
    """A loopback port where nothing listens."""
    return serve.free_port()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_exit_2(case, fake, free, tmp_path):
    _, engine, cell, params, says = case
    out = tmp_path / "findings"
    out.mkdir()
    r = wb(*argv(engine, cell, params, fake, free, str(out)))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], r.stderr
    assert not list(tmp_path.rglob("*.json"))  # no finding
