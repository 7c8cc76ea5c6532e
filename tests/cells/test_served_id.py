"""Each served engine's identity read (``cells/served_id.py``), as a table: the answers its server gives (shaped as
each one's source writes them) read into the typed identity; anything else is a mismatch saying what came back.
trtllm-serve cannot run here, so its row is also driven through a real cell's open against a loopback server."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from conftest import TINY
from workbench.cells.llamacpp.served import LlamaServerId
from workbench.cells.served_id import Answer, Mismatch, NotTheServer
from workbench.cells.trtllm.served import TrtllmServeCell, TrtllmServeId
from workbench.cells.vllm.served import VllmId


def ok(doc) -> Answer:
    return Answer("", 200, "application/json", json.dumps(doc))


def models(owner: str, **card) -> Answer:
    return ok({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": owner, **card}]})


# tools/server/server-context.cpp (llama.cpp in llama-cpp-python 0.3.36): /props and /v1/models
LLAMA = {"/props": ok({"default_generation_settings": {"n_ctx": 512}, "total_slots": 2, "model_path": "/m.gguf",
                       "eos_token": "</s>", "build_info": "b1-abc"}),
         "/v1/models": models("llamacpp", meta={"n_vocab": 512, "n_ctx_train": 4096})}
# vllm/entrypoints/serve/instrumentator/basic.py (/version), engine/protocol.py ModelCard, /metrics
VLLM = {"/version": ok({"version": "0.11.0"}), "/v1/models": models("vllm", root="/m", max_model_len=256),
        "/metrics": Answer("/metrics", 200, "text/plain", 'vllm:cache_config_info{block_size="32",num_gpu_blocks="9"} 1.0\n')}
# TensorRT-LLM 1.2-era tensorrt_llm/serve/openai_server.py (/version, /server_info) and openai_protocol.py ModelCard
TRTLLM = {"/version": ok({"version": "1.2.0"}), "/v1/models": models("tensorrt_llm"),
          "/server_info": ok({"disaggregated_params": None})}
HTML = Answer("", 200, "text/html", "<html><body>hello</body></html>")

CASES = [  # (case, identity, answers, a field of the identity read, or the words of the mismatch)
    ("llama-server", LlamaServerId, LLAMA, ("slot_ctx", 512)),
    ("vllm serve", VllmId, VLLM, ("cache_info", {"block_size": "32", "num_gpu_blocks": "9"})),
    ("trtllm-serve 1.2", TrtllmServeId, TRTLLM, ("server_info", {"disaggregated_params": None})),
    ("vllm serve named as llama-server", LlamaServerId, VLLM | {"/props": Answer("", 404, "application/json", "{}")},
     "200 with JSON"),
    ("vllm serve named as trtllm-serve", TrtllmServeId, VLLM | {"/server_info": ok({})}, "owned_by 'tensorrt_llm'"),
    ("trtllm-serve named as vllm serve", VllmId, TRTLLM | {"/metrics": Answer("", 404, "text/plain", "")},
     "owned_by 'vllm'"),
    ("an HTML page", VllmId, dict.fromkeys(VLLM, HTML), "JSON"),
    ("a string where the context belongs", LlamaServerId,
     LLAMA | {"/props": ok({"default_generation_settings": {"n_ctx": "512"}})}, "default_generation_settings.n_ctx (int)"),
    ("vLLM without its cache metrics", VllmId, VLLM | {"/metrics": Answer("", 200, "text/plain", "up 1\n")},
     "vllm:cache_config_info"),
]


@pytest.mark.parametrize("case, identity, answers, expected", CASES, ids=[c[0] for c in CASES])
def test_identity_read(case, identity, answers, expected):
    if isinstance(expected, tuple):
        assert getattr(identity.read(answers), expected[0]) == expected[1]
        return
    with pytest.raises(Mismatch, match=expected.replace("(", r"\(").replace(")", r"\)")):
        identity.read(answers)


def test_trtllm_serve_attached_to_llama_server_says_so():
    """The cell's open (the class's: open_cell refuses an engine that is not installed) reads the identity first: a llama-server where trtllm-serve was named is refused in one line."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            answer = LLAMA.get(self.path, Answer("", 404, "application/json", '{"error": "File Not Found"}'))
            self.send_response(answer.status)
            self.send_header("content-type", answer.content_type)
            self.end_headers()
            self.wfile.write(answer.text.encode())

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with pytest.raises(NotTheServer) as e:
            TrtllmServeCell.open(TINY, endpoint=url)  # attached: no tensorrt_llm needed to open
    finally:
        server.shutdown()
    said = str(e.value)
    assert said.startswith(f"{url} is not trtllm-serve: GET /version answered 404")
    assert "owned_by 'llamacpp' (llama-server)" in said and "\n" not in said
