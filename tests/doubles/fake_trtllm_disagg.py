"""A double of two trtllm-serve 1.2 workers in disaggregated serving, as an ``httpx.MockTransport`` handler.

What it models, each from the 1.2-era NVIDIA/TensorRT-LLM file that says so (rows of the table in
tests/cells/test_trtllm_disagg_double.py):

* ``tensorrt_llm/serve/openai_protocol.py`` ``DisaggregatedParams``: ``request_type``, ``first_gen_tokens``,
  ``ctx_request_id``, ``encoded_opaque_state`` (base64 of the LLM API's ``opaque_state`` bytes) and
  ``draft_tokens``, in the body as ``disaggregated_params`` and answered in ``choices[0].disaggregated_params``;
* ``tensorrt_llm/disaggregated_params.py``: an unknown ``request_type`` is refused (400 here);
* ``tensorrt_llm/serve/openai_server.py`` with ``context_only``: one token (the first generated one, also
  in ``first_gen_tokens``) and ``finish_reason`` ``length``, or ``stop`` when it is a stop token; the worker's
  state for the request is kept for the generation worker to fetch through the transceiver;
* a ``generation_only`` request whose ``encoded_opaque_state``/``ctx_request_id`` names no context request
  fails (the transceiver finds nothing to receive: 500 here); otherwise it streams the continuation as SSE.

Its "model" is arithmetic: the token after a sequence is the sum of the prompt ids plus the step, modulo the
vocabulary, and the generation worker computes it from the KV it received (the context request's prompt), not
from the prompt it was sent. Nothing outside tests/ imports it; no finding comes from it.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field

import httpx

VOCAB = 512


def next_token(prompt: list[int], step: int) -> int:
    return (sum(prompt) + step) % VOCAB


@dataclass
class Workers:
    """The context and generation workers' shared view (the transceiver): context states by request id."""

    states: dict[int, list[int]] = field(default_factory=dict)
    seen: list[tuple[str, dict]] = field(default_factory=list)  # (host, body) of every request, in order

    def handler(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.seen.append((request.url.host, body))
        params = body.get("disaggregated_params") or {}
        kind = params.get("request_type", "context_and_generation")
        if kind not in ("context_only", "generation_only", "context_and_generation"):
            return httpx.Response(400, json={"error": f"Unknown request type: {kind}"})
        if kind == "context_only":
            return self._context(body)
        if kind == "generation_only":
            return self._generation(body, params)
        return httpx.Response(400, json={"error": "this double serves the two disaggregated legs only"})

    def _context(self, body: dict) -> httpx.Response:
        prompt, rid = list(body["prompt"]), len(self.states) + 1
        first = next_token(prompt, 0)
        self.states[rid] = prompt
        finish = "stop" if first in (body.get("stop_token_ids") or []) else "length"
        state = {"request_type": "context_only", "first_gen_tokens": [first], "ctx_request_id": rid,
                 "encoded_opaque_state": base64.b64encode(f"state-{rid}".encode()).decode(), "draft_tokens": None}
        return httpx.Response(200, json={"id": f"cmpl-{rid}", "object": "text_completion", "choices": [
            {"index": 0, "text": f"<{first}>", "token_ids": [first], "finish_reason": finish,
             "disaggregated_params": state}], "usage": {"prompt_tokens": len(prompt), "completion_tokens": 1}})

    def _generation(self, body: dict, params: dict) -> httpx.Response:
        rid = params.get("ctx_request_id")
        opaque = base64.b64decode(params.get("encoded_opaque_state") or b"").decode(errors="replace")
        if rid not in self.states or opaque != f"state-{rid}":
            return httpx.Response(500, json={"error": "KV cache transfer failed: no context state"})
        kv = self.states[rid]
        tokens = [next_token(kv, i) for i in range(int(body["max_tokens"]))]
        lines = [f"data: {json.dumps({'choices': [{'index': 0, 'text': f'<{t}>', 'token_ids': [t], 'finish_reason': None}]})}"
                 for t in tokens]
        lines.append(f"data: {json.dumps({'choices': [], 'usage': {'prompt_tokens': len(body['prompt'])}})}")
        lines.append("data: [DONE]")
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              content="\n\n".join(lines).encode() + b"\n\n")
