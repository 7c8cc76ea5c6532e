"""The Triton client for the TensorRT-LLM backend's two model shapes, over Triton's HTTP generate endpoint
(``POST /v2/models/MODEL/generate``: the request's JSON keys are the model's input tensors, the answer's keys its
outputs), reading the engine's ``kv_cache_reused_block(s)`` where the model returns it.

The shapes (:data:`SHAPES`), from the backend's own files:

- ``ensemble``: tensorrtllm_backend ``all_models/inflight_batcher_llm/ensemble/config.pbtxt`` (c2e65b8, the last
  commit before the model files moved to TensorRT-LLM's ``triton_backend/``): ``text_input`` (string) and
  ``max_tokens`` (INT32) required, ``return_perf_metrics`` (BOOL) switching on ``kv_cache_reused_blocks`` (INT32),
  which ``tensorrt_llm/1/model.py`` sends only when the result carries its request perf metrics (the backend's
  ``docs/model_config.md``: "Set the optional input ``return_perf_metrics`` to ``true``");
- ``tensorrt_llm`` (the LLM-API model): TensorRT-LLM ``triton_backend/all_models/llmapi/tensorrt_llm/config.pbtxt``:
  ``text_input`` and ``sampling_param_max_tokens``, ``sampling_param_return_perf_metrics`` switching on
  ``kv_cache_reused_block``, which its ``1/model.py`` sends in ``text_output``'s dtype: a string such as ``"5"``
  (tensorrtllm_backend ``docs/llmapi.md`` shows ``"kv_cache_reused_block": "0"``).

httpx (already the served cells' client) rather than ``tritonclient``: its HTTP client (2.73.0,
``tritonclient/http/_client.py``) has ``infer``, metadata, repository, statistics, trace, log and shared-memory
calls but none for the generate extension, which is the path the backend documents; and with no server it raises
a bare ``ConnectionRefusedError`` rather than its own exception. Every failure here is :class:`~.backends.ServerGone`:
one line naming the URL and what to start there.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..engine import WorkbenchError
from ..files import write_output
from .backends import ServerGone
from .table import Row


@dataclass(frozen=True)
class Shape:
    """One TensorRT-LLM Triton model: its name, the input that bounds the answer, the input that asks for the
    engine's perf metrics and the output that counts the KV-cache blocks it reused."""

    backend: str  # the table's backend name
    model: str
    max_tokens: str
    perf_metrics: str
    reused: str
    label: str

    def start_hint(self, url: str) -> str:
        port = url.rsplit(":", 1)[-1]
        return (f"start Triton with the TensorRT-LLM backend's {self.label} there: `tritonserver "
                f"--model-repository=REPO --http-port {port}`, REPO holding its `{self.model}` model "
                "(tensorrtllm_backend docs/llmapi.md)")


SHAPES = {
    "triton-ensemble": Shape("triton-ensemble", "ensemble", "max_tokens", "return_perf_metrics",
                             "kv_cache_reused_blocks", "ensemble model"),
    "triton-llmapi": Shape("triton-llmapi", "tensorrt_llm", "sampling_param_max_tokens",
                           "sampling_param_return_perf_metrics", "kv_cache_reused_block", "LLM-API model"),
}


@dataclass(frozen=True)
class Served:
    """What answered at the URL: Triton's version and the model's input names (``GET /v2/models/MODEL``)."""

    url: str
    triton_version: str
    model: str
    inputs: tuple[str, ...]


@dataclass(frozen=True)
class Generation:
    """One generate call: the text, the engine's count of KV-cache blocks it reused (None where the model did not
    return it) and the seconds the call took, timed here (a number we computed, not the engine's)."""

    text: str
    reused_blocks: int | None
    seconds: float


def _get(http, url: str, path: str, shape: Shape):
    import httpx

    try:
        return http.get(path)
    except httpx.HTTPError as e:
        raise ServerGone(f"nothing answered at {url} (GET {path}: {type(e).__name__}); "
                         f"{shape.start_hint(url)}") from None


def connect(url: str, shape: Shape) -> Served:
    """Check that Triton answers at ``url`` and serves ``shape``'s model ready with its inputs."""
    import httpx

    url = url.rstrip("/")
    with httpx.Client(base_url=url, timeout=10) as http:
        meta = _get(http, url, "/v2", shape)
        doc = _json(meta)
        if meta.status_code != 200 or doc.get("name") != "triton":
            said = f"name {doc['name']!r}" if doc.get("name") else f"{meta.status_code} {meta.text[:80]!r}"
            raise ServerGone(f"{url} is not Triton: GET /v2 answered {said}; {shape.start_hint(url)}")
        model = _get(http, url, f"/v2/models/{shape.model}", shape)
        info = _json(model)
        if model.status_code != 200:
            raise ServerGone(f"Triton {doc.get('version', '?')} at {url} serves no model {shape.model!r} "
                             f"({info.get('error', model.status_code)}); {shape.start_hint(url)}")
        inputs = tuple(str(i.get("name")) for i in info.get("inputs", []))
        missing = [n for n in ("text_input", shape.max_tokens, shape.perf_metrics) if n not in inputs]
        if missing:
            raise ServerGone(f"the model {shape.model!r} at {url} is not the TensorRT-LLM backend's {shape.label}: "
                             f"it takes no {', '.join(missing)}; {shape.start_hint(url)}")
        if _get(http, url, f"/v2/models/{shape.model}/ready", shape).status_code != 200:
            raise ServerGone(f"the model {shape.model!r} at {url} is not ready; {shape.start_hint(url)}")
    return Served(url, str(doc.get("version", "")), shape.model, inputs)


def _json(r) -> dict:
    try:
        doc = r.json()
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def generate(url: str, shape: Shape, text: str, max_tokens: int) -> Generation:
    """One generate call asking for the engine's perf metrics; :class:`ServerGone` where the server does not
    answer or answers with an error."""
    import httpx

    url = url.rstrip("/")
    body = {"text_input": text, shape.max_tokens: max_tokens, shape.perf_metrics: True}
    start = time.perf_counter()
    try:
        r = httpx.post(f"{url}/v2/models/{shape.model}/generate", json=body, timeout=300)
    except httpx.HTTPError as e:
        raise ServerGone(f"nothing answers at {url} any more (POST /v2/models/{shape.model}/generate: "
                         f"{type(e).__name__}); {shape.start_hint(url)}") from None
    seconds = time.perf_counter() - start
    doc = _json(r)
    if r.status_code != 200 or "text_output" not in doc:
        raise ServerGone(f"Triton at {url} did not generate with {shape.model!r} ({r.status_code}: "
                         f"{doc.get('error', r.text[:120])!r}); {shape.start_hint(url)}")
    return Generation(str(doc["text_output"]), reused_count(doc.get(shape.reused), shape, url), seconds)


def reused_count(value: object, shape: Shape, url: str) -> int | None:
    """The engine's reused-block count as the model answered it: an integer, the LLM-API model's string of one
    (``"5"``), or either as a one-element list (a shape-[1] tensor); None where the model did not return it.
    Anything else (a fraction, a negative, ``"inf"``, not-a-number, text, several values) is one line naming the
    value: a count the table cannot read is never guessed."""
    if value is None:
        return None
    got = value[0] if isinstance(value, list) and len(value) == 1 else value
    try:
        number = float(got) if isinstance(got, (int, float, str)) and not isinstance(got, bool) else math.nan
    except ValueError:
        number = math.nan
    if math.isfinite(number) and number >= 0 and number == int(number):
        return int(number)
    what = "not a number" if math.isnan(number) else "not a whole count of blocks"
    raise WorkbenchError(f"Triton at {url}: the {shape.label} {shape.model!r} answered {shape.reused} = "
                         f"{json.dumps(value)[:80]}, {what}; the table reads only a count of reused KV-cache blocks "
                         "(check the model's outputs in its config.pbtxt)")


def prefix_reuse(url: str, shape: Shape, prefix: str, prompts: Sequence[str], max_tokens: int,
                 after: Callable[[int], None] = lambda _: None) -> tuple[Generation, ...]:
    """Each prompt sent after ``prefix``, one at a time: the first computes the prefix cold, each later one can
    reuse its blocks. ``after(i)`` runs once the i-th answer is in."""
    out = []
    for i, prompt in enumerate(prompts):
        try:
            out.append(generate(url, shape, prefix + prompt, max_tokens))
        except ServerGone as e:
            raise ServerGone(f"after {i} of {len(prompts)} requests: {e}") from None
        after(i)
    return tuple(out)


def rows(name: str, url: str, workloads: Sequence[tuple[str, bool]], prefix_tokens: int, requests: int,
         output_tokens: int, out: Path) -> list[Row]:
    """The table's rows for a Triton backend at ``url`` (``workloads``: each name and whether it shares a prefix):
    the server checked, then, where a workload shares a prefix, the engine's reused blocks read over ``requests``
    prompts after one shared prefix (kept in ``out/NAME.json``). Load is not measured (AIPerf's profile here speaks
    the OpenAI routes), so every row is ``not-run``, saying what was read."""
    shape = SHAPES[name]
    served = connect(url, shape)
    said = (f"Triton {served.triton_version} at {served.url} serves the {shape.label} {shape.model!r}; load not "
            "measured: this table's AIPerf profile speaks the OpenAI routes, not Triton's generate endpoint")
    read = ""
    if any(shares for _, shares in workloads):
        prefix = "shared prefix " * (prefix_tokens // 2)  # about prefix_tokens tokens: no tokenizer is asked
        got = prefix_reuse(served.url, shape, prefix, [f" question {k}: answer briefly." for k in range(requests)],
                           output_tokens)
        counts = [g.reused_blocks for g in got]
        write_output(out / f"{name}.json", json.dumps(
            {"served": asdict(served), "shape": asdict(shape), "prefix_chars": len(prefix),
             "generations": [asdict(g) for g in got]}, indent=1) + "\n")
        read = (f"; the engine's {shape.reused} on {len(counts)} requests after one shared prefix, in order: "
                f"{counts} ({name}.json)")
    return [Row(name, w, None, "not-run", said + (read if shares else "")) for w, shares in workloads]
