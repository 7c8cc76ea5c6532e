"""The gateway's one request to an endpoint: an OpenAI completion of token ids, streamed, with what the engine
reports of it (``usage.prompt_tokens_details.cached_tokens``) and the times the gateway sees (TTFT, end to end).

Token ids, ``stream_options.include_usage`` and ``cache_salt`` are the OpenAI protocol as both vLLM's server and
trtllm-serve take it; nothing here is one engine's."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Sequence


class EndpointFailed(Exception):
    """The endpoint refused the connection, reset it, or answered other than 200: the gateway retries elsewhere."""


@dataclass(frozen=True)
class Served:
    """One request as the engine answered it: ``cached_tokens`` is the engine's own count (None where its answer
    carried none); ``ttft_s`` and ``e2e_s`` are timed by the gateway around the stream."""

    prompt_tokens: int
    cached_tokens: int | None
    completion_tokens: int
    ttft_s: float
    e2e_s: float


def complete(http: Any, url: str, model: str, prompt: Sequence[int], max_tokens: int, salt: str | None = None,
             timeout_s: float = 600.0) -> Served:
    """Stream one completion of ``prompt`` from ``url`` through the ``httpx.Client`` ``http``."""
    import httpx

    body: dict[str, Any] = {"model": model, "prompt": list(prompt), "max_tokens": max_tokens, "temperature": 0.0,
                            "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
    if salt:
        body["cache_salt"] = salt
    t0 = time.perf_counter()
    first, usage = None, None
    try:
        with http.stream("POST", f"{url}/v1/completions", json=body, timeout=timeout_s) as r:
            if r.status_code != 200:
                r.read()
                raise EndpointFailed(f"{url} answered {r.status_code}: {r.text[:200]}")
            for line in r.iter_lines():
                if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                    continue
                chunk = json.loads(line[5:])
                if first is None and any(c.get("text") or c.get("token_ids") for c in chunk.get("choices") or []):
                    first = time.perf_counter() - t0
                usage = chunk.get("usage") or usage
    except httpx.HTTPError as e:
        raise EndpointFailed(f"{url}: {type(e).__name__}: {e}") from e
    e2e = time.perf_counter() - t0
    if usage is None:
        raise EndpointFailed(f"{url} closed the stream without its usage (stream_options.include_usage)")
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens")
    return Served(int(usage.get("prompt_tokens", len(prompt))), None if cached is None else int(cached),
                  int(usage.get("completion_tokens") or 0), e2e if first is None else first, e2e)
