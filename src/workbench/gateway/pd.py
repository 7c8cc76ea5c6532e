"""The gateway's sequential prefill/decode (P/D) leg, engine-neutral: context leg, relayed state, generation leg.

The guide's lifecycle (seed 001, "Sequential P/D lifecycle"): the gateway sends the client's request to a CONTEXT
endpoint as a context-only request; a context result that already reached a terminal finish reason is returned as
it is and skips generation (an early exit, counted); otherwise the GENERATION endpoint gets the *original* request
with the engine-produced opaque state relayed untouched. How an engine marks the two legs and where its state
travels is its wing's :class:`Wire` (TensorRT-LLM: ``disaggregated_params``; vLLM: ``kv_transfer_params``), found
by the engine's name in :data:`WIRES`. The relay streams the generation leg, so its TTFT is the client's: from the
context leg's send to the first generated token, the KV transfer and the first decode step included.
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Protocol

from ..engine import WorkbenchError
from ..registry import Registry

PENDING = ("length", "not_finished")
"""Finish reasons after which generation is still due (TensorRT-LLM's orchestrator, ``_need_gen`` in
tensorrt_llm/serve/openai_disagg_service.py); any other reason is terminal: the context result is the answer."""


@dataclass(frozen=True)
class Counts:
    """An endpoint's own counters (its ``/metrics``), read before and after a leg: their difference is the leg's."""

    external_tokens: float  # prompt tokens its KV connector / transceiver supplied
    requests: float  # requests it finished


class Wire(Protocol):
    """How one engine's OpenAI server takes the two legs of a P/D request and returns its opaque state, and what
    the engine itself reports of them."""

    def cell_options(self, role: str, store: str) -> dict:
        """Served-cell options for the ``context`` or ``generation`` side, transferring KV through ``store``
        (a folder of the run's, where the engine's transfer goes through files)."""

    def request(self, served_model: str, tokens: list[int], max_tokens: int, salt: str | None, **more: Any) -> dict:
        """A greedy completion on token ids whose answer carries the engine's token ids."""

    def counts(self, metrics_text: str) -> Counts:
        """The endpoint's own counters from its ``/metrics``."""

    def transferable(self, prompt_tokens: int, block_size: int) -> int:
        """The prompt tokens whose KV the transfer moves to the generation side."""

    def store(self, root: str) -> Any:
        """The transfer's files (entries, ``zero``, ``remove``), or None where the KV does not travel by files."""

    def context_body(self, body: Mapping[str, Any]) -> dict:
        """The client's request as a context-only request."""

    def state(self, doc: Mapping[str, Any]) -> Any:
        """The opaque state the context leg's answer carries (None where the engine returned none)."""

    def generation_body(self, body: Mapping[str, Any], state: Any) -> dict:
        """The client's original request as a generation-only request carrying ``state``."""


WIRES: Registry = Registry("P/D wire")
"""Each in-process engine's wire (``cells.runs(engine)`` names it for a served one)."""
WIRES.register("vllm", "workbench.cells.vllm.pd:VllmWire")
WIRES.register("trtllm", "workbench.cells.trtllm.disagg:TrtllmWire")

Tamper = Callable[[dict], dict]
"""A fault on the generation leg's body (a relay that rewrites the prompt or alters the state)."""


@dataclass
class Counters:
    """What the relay counted (its bookkeeping, never evidence): requests, early exits, generation legs sent."""

    requests: int = 0
    early_exits: int = 0
    generation_legs: int = 0


@dataclass
class Exchange:
    """One P/D request as the relay saw it: both legs' bodies, the state it relayed, and the client's timings."""

    context_body: dict
    context_doc: dict
    state: Any
    generation_body: dict | None = None
    early_exit: bool = False
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None
    usage: dict = field(default_factory=dict)  # the answering engine's own usage
    context_s: float = 0.0  # the context leg's round trip
    ttft_s: float | None = None  # from the context leg's send to the first generated token
    e2e_s: float = 0.0


def _choice(doc: Mapping[str, Any]) -> dict:
    choices = doc.get("choices") or []
    if not choices:
        raise WorkbenchError(f"the context endpoint answered no choices: {json.dumps(doc)[:300]}")
    return dict(choices[0])


def sse(client: Any, url: str, body: Mapping[str, Any]) -> Iterator[dict]:
    """POST ``body`` with ``stream: true`` (and the usage in the last chunk) to ``url``; each ``data:`` line as
    JSON until ``[DONE]``."""
    with client.stream("POST", url, json=dict(body, stream=True, stream_options={"include_usage": True})) as r:
        if r.status_code != 200:
            r.read()
            raise WorkbenchError(f"{url} answered {r.status_code}: {r.text[:300]}")
        for line in r.iter_lines():
            if line.startswith("data:"):
                data = line[5:].strip()
                if data == "[DONE]":
                    return
                yield json.loads(data)


def relay(client: Any, wire: Wire, body: Mapping[str, Any], *, context_url: str, generation_url: str,
          counters: Counters | None = None, tamper: Tamper | None = None, early_exit: bool = True,
          between: Callable[[Exchange], None] | None = None) -> Exchange:
    """One request through the P/D shape (``/v1/completions`` on both endpoints). ``tamper`` alters the
    generation body (a faulty relay); ``early_exit=False`` is a relay that sends every request on to generation;
    ``between`` runs after the context leg, before the generation leg (a fault on the transferred state)."""
    counters = counters if counters is not None else Counters()
    counters.requests += 1
    original = copy.deepcopy(dict(body))
    t0 = time.perf_counter()
    ctx_body = wire.context_body(original)
    r = client.post(f"{context_url}/v1/completions", json=ctx_body)
    if r.status_code != 200:
        raise WorkbenchError(f"the context endpoint {context_url} answered {r.status_code}: {r.text[:300]}")
    doc = r.json()
    ex = Exchange(ctx_body, doc, wire.state(doc), context_s=time.perf_counter() - t0)
    choice = _choice(doc)
    if early_exit and choice.get("finish_reason") not in PENDING:
        counters.early_exits += 1
        ex.early_exit, ex.finish_reason, ex.text = True, choice.get("finish_reason"), choice.get("text") or ""
        ex.token_ids, ex.usage = [int(t) for t in choice.get("token_ids") or []], dict(doc.get("usage") or {})
        ex.e2e_s = ex.ttft_s = ex.context_s
        return ex
    if between is not None:
        between(ex)
    gen = wire.generation_body(original, ex.state)
    ex.generation_body = tamper(copy.deepcopy(gen)) if tamper else gen
    counters.generation_legs += 1
    return _streamed(ex, sse(client, f"{generation_url}/v1/completions", dict(ex.generation_body)), t0)


def single(client: Any, url: str, body: Mapping[str, Any]) -> Exchange:
    """The same request on one engine, streamed (the reference P/D must equal, and its TTFT)."""
    t0 = time.perf_counter()
    return _streamed(Exchange(dict(body), {}, None), sse(client, f"{url}/v1/completions", body), t0)


def _streamed(ex: Exchange, chunks: Iterator[dict], t0: float) -> Exchange:
    """``ex`` filled from a streamed answer: tokens, text, finish reason, the engine's usage and the timings."""
    for chunk in chunks:
        for c in chunk.get("choices") or []:
            ids = [int(t) for t in c.get("token_ids") or []]
            if (ids or c.get("text")) and ex.ttft_s is None:
                ex.ttft_s = time.perf_counter() - t0
            ex.token_ids += ids
            ex.text += c.get("text") or ""
            ex.finish_reason = c.get("finish_reason") or ex.finish_reason
        ex.usage = dict(chunk.get("usage") or ex.usage)
    ex.e2e_s = time.perf_counter() - t0
    return ex


def wire_for(engine: str) -> Wire:
    """The wire of ``engine`` (an in-process engine's name, ``cells.runs`` of a served one)."""
    return WIRES.get(engine)()


def rewrite_prompt(body: dict) -> dict:
    """A relay that rewrites the prompt (its first token id, or its first character): the generation leg no longer
    keeps the original prompt."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt:
        first = int(prompt[0])
        body["prompt"] = [first - 1 if first > 1 else first + 1, *prompt[1:]]
    elif isinstance(prompt, str) and prompt:
        body["prompt"] = ("X" if prompt[0] != "X" else "Y") + prompt[1:]
    return body
