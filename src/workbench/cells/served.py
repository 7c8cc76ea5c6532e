"""Served cells: the base every server's cell shares (llama-server, vllm serve, trtllm-serve: each in its wing,
``cells/<engine>/served.py``, with its launch line and identity).

Every deployment the blueprint's sources describe talks to a served engine. A served cell starts its
server through :mod:`workbench.serve` (or attaches to one at ``endpoint=URL``) and maps each operation
to HTTP, the way :class:`~workbench.cells.request.RequestCell` maps them onto engines that take whole
requests:

* prompts are sent as **token ids**, so a probe controls the exact tokens;
* **EnsurePrefix** is the server's warm-up: ``n_predict: 0`` with ``cache_prompt`` and ``id_slot`` on
  llama-server, ``max_tokens: 1`` on vLLM and TensorRT-LLM;
* **Decode** is streamed (server-sent events); TTFT is the time to the first streamed token;
* **reuse** is read from the server for each request: llama-server's ``timings.cache_n``, vLLM's
  ``usage.prompt_tokens_details.cached_tokens`` (``--enable-prompt-tokens-details``), TensorRT-LLM's
  ``/perf_metrics`` ``kv_cache_metrics.num_reused_blocks``;
* **Describe** comes from ``/props`` (llama-server), ``/v1/models`` + ``/version`` (vLLM, TensorRT-LLM) and
  ``/server_info``; the description names the transport (``http``), the endpoint and the server's version;
* a refused connection is :class:`EngineUnavailable` naming the URL; a server this cell started that
  died is :class:`~workbench.serve.ServerDied` (an engine crash: exit status and log tail).

What a server's HTTP surface lacks, the cell does not pretend to have: llama-server has no KV read-back
and no cache salt, so those observers are absent and the mechanisms listed in ``Description.absent``; vLLM
states no KV bytes over HTTP, so its ``kv_memory`` refuses with the reason.
"""

from __future__ import annotations

import abc
import contextlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Iterable, Iterator, Mapping

from .. import models, serve
from ..engine import ContextOverflow, EngineUnavailable, UnsupportedFeature, WorkbenchError
from . import known_options
from .options import CellOptions
from .request import DEFAULT_CONTEXT_TOKENS, RequestCell, Slot
from .served_id import Answer, Mismatch, ServerId, check_endpoint, not_the_server, nothing_answered

TRANSPORT = "http"


@dataclass(frozen=True)
class ServedOptions(CellOptions):
    """``open_cell("llamacpp-server" | "vllm-server" | "trtllm-serve", model, **options)`` keywords every server
    takes; a server's own class adds its own (``LlamaServerOptions``, ``VllmServeOptions``,
    ``TrtllmServeOptions``)."""

    endpoint: str | None = None  # attach to a server someone else runs (its URL); None: start one
    slots: int = 1  # llama-server: -np (each its own id_slot); vLLM/TensorRT-LLM: the cell's bookkeeping
    context_tokens: int | None = None  # per slot; default min(model ceiling, 4096)
    kv_budget_tokens: int | None = None  # llama-server: -c; vLLM: whole blocks (--num-gpu-blocks-override)
    kv_budget_bytes: int | None = None  # llama-server: -c of the GGUF's bytes per token; vLLM: --kv-cache-memory-bytes
    threads: int = 1
    host: str = serve.LOOPBACK
    port: int = 0  # 0: the OS picks
    api_key: str | None = field(default=None, repr=False)  # never printed; the server gets it in its environment
    server_args: tuple[str, ...] = ()  # passed to the server as they are (e.g. llama-server's --spec-type)
    log_dir: str | None = None  # where the server's log goes; default $WORKBENCH_SERVER_LOGS or a cache folder
    ready_timeout_s: float = 600.0
    request_timeout_s: float = 600.0
    adapters: tuple[str, ...] = ()  # LoRA over HTTP is not mapped: refused

    def __post_init__(self) -> None:
        if self.slots < 1 or self.threads < 1:
            raise ValueError("slots and threads must be at least 1")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be 0 (the OS picks) to 65535, got {self.port}")
        if self.kv_budget_bytes is not None and self.kv_budget_tokens is not None:
            raise ValueError("give kv_budget_bytes or kv_budget_tokens, not both")
        if self.adapters:
            raise ValueError("LoRA adapters are not mapped onto served engines; open the in-process cell")
        if self.connector:
            raise ValueError("the recording KV connector is not mapped onto served engines; open the in-process cell")
        serve.check_host(self.host, self.api_key)
        if self.endpoint is not None:
            check_endpoint(self.endpoint)

    @classmethod
    def from_options(cls, engine: str, options: Mapping[str, Any]) -> "ServedOptions":
        """``options`` as this server's options (each server's class adds its own keywords to these)."""
        values = known_options(cls, engine, options)
        if values.get("adapters"):
            raise UnsupportedFeature("LoRA adapters", engine, "they are not mapped onto served engines; open the "
                                     "in-process cell")
        if "server_args" in values:
            values["server_args"] = tuple(str(a) for a in values["server_args"])
        return cls(**values)


def default_log_dir() -> Path:
    """``$WORKBENCH_SERVER_LOGS`` (``workbench run`` sets it to the run folder) or ``~/.cache/workbench/servers``."""
    return Path(os.environ.get("WORKBENCH_SERVER_LOGS") or models.cache_dir().parent / "servers")


class _Tokenizer:
    """The server's own tokenizer (``POST /tokenize``), with the ``encode`` RequestCell calls."""

    def __init__(self, cell: "ServedCell") -> None:
        self.cell = cell

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.cell._tokenize_remote(text, add_special_tokens)


class ServedCell(RequestCell):
    """What every served cell shares: the server's lifecycle, HTTP with error mapping, SSE."""

    label: ClassVar[str]
    server_engine: ClassVar[str]  # the in-process engine the server runs (for messages)
    identity: ClassVar[type[ServerId]]  # what the server says it is, read once at open
    launch: ClassVar[serve.Builder]  # its launch line (a staticmethod): what serve.start runs

    def __init__(self, model: models.ResolvedModel, opts: ServedOptions) -> None:
        self.model, self.opts = model, opts
        self.server: serve.Server | None = None
        self.url = (opts.endpoint or "").rstrip("/")
        self._http: Any = None
        self.context_tokens = opts.context_tokens or DEFAULT_CONTEXT_TOKENS
        self._vocab_size = None
        self._begin(opts.slots)

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def open(cls, model: str, **options: Any) -> "ServedCell":
        opts = cls._options(options)
        resolved = models.resolve(model)
        if opts.endpoint is None:  # a format the server never runs is refused before its engine is imported
            cls._refuse_model(resolved)
            # attached at an endpoint, the engine need not be installed here (vLLM's check imports it: ~5 s)
            avail = cls.availability()
            if not avail.available:
                raise EngineUnavailable(cls.engine, avail.reason or "unknown reason")
        return cls(resolved, opts)

    @classmethod
    def _options(cls, options: Mapping[str, Any]) -> ServedOptions:
        """``options`` as the options class this engine declared at registration."""
        from . import options_class

        return options_class(cls.engine).from_options(cls.engine, options)

    #: The model format the server runs (a GGUF file, else a Hugging Face directory; a synthetic spec has both),
    #: and what to tell a user who gives it the other.
    runs_gguf: bool = False
    model_hint: str = ""

    @classmethod
    def _refuse_model(cls, model: models.ResolvedModel) -> None:
        """Raise :class:`UnsupportedFeature` for a model format the server does not run (a user's to fix); checked
        before :meth:`availability`, which may import the engine (vLLM: seconds) only to refuse the model then."""
        runs = model.is_gguf if cls.runs_gguf else model.kind in ("hf", "synthetic")
        if not runs:
            raise UnsupportedFeature(f"{model.kind} model {model.spec!r}", cls.engine, cls.model_hint)

    def _start(self) -> None:
        import httpx

        o = self.opts
        if o.endpoint is None:
            self._prepare_model()
            options = self._server_options()  # first: it may cap the context to what the KV budget holds
            req = serve.ServerRequest(self.engine, str(self._model_path()), host=o.host, port=o.port, api_key=o.api_key,
                                      threads=o.threads, slots=o.slots, context_tokens=self.context_tokens,
                                      extra_args=o.server_args, options=options)
            self.server = serve.start(req, o.log_dir or default_log_dir(), build=self.launch,
                                      ready_timeout_s=o.ready_timeout_s)
            self.url = self.server.url
        headers = {"Authorization": f"Bearer {o.api_key}"} if o.api_key else {}
        self._http = httpx.Client(base_url=self.url, headers=headers,
                                  timeout=httpx.Timeout(o.request_timeout_s, connect=10.0))
        self._llm = self._http  # RequestCell's "is open" handle
        self._tokenizer = _Tokenizer(self)
        self._read_server()

    def _stop(self) -> None:
        if self._http is not None:
            with contextlib.suppress(Exception):
                self._http.close()
            self._http = None
        self._llm = None
        if self.server is not None:
            self.server.stop()
            self.server = None

    def _prepare_model(self) -> None:
        """Check the model can be served before a server is started (a format error is the user's to fix)."""

    def _model_path(self) -> Path:
        return self.model.path

    def _server_options(self) -> dict[str, Any]:
        return {}

    @abc.abstractmethod
    def _read_server(self) -> None:
        """Read what the server says about itself (version, slots, context, vocabulary) once it answers, from
        :meth:`_identify`."""

    def _identify(self) -> Any:
        """The server's :attr:`identity`, the one read of its self-description. An endpoint that answers as
        another thing, or not at all, is :class:`~.served_id.NotTheServer` (the user's URL); a server this cell
        started that died is its crash (:meth:`_failed`)."""
        import httpx

        answers: dict[str, Answer] = {}
        for path in self.identity.paths:
            try:
                r = self._http.get(path)
            except httpx.HTTPError as e:
                if self.server is not None:
                    raise self._failed(path, e) from e
                raise nothing_answered(self.url, self.label, path, e) from None
            answers[path] = Answer(path, r.status_code, r.headers.get("content-type", ""), r.text)
        try:
            return self.identity.read(answers)
        except Mismatch as e:
            raise not_the_server(self.url, self.label, answers, e) from None

    # ------------------------------------------------------------------ HTTP

    def _failed(self, path: str, e: Exception) -> WorkbenchError:
        """The contract's error for a transport failure: a dead server is a crash, a refusal names the URL."""
        if self.server is not None:
            dead = self.server.died(f"{path} on {self.url}")
            if dead is not None:
                return dead
        return EngineUnavailable(self.engine, f"no answer from {self.url}{path} ({type(e).__name__}: {e}); "
                                 "is the server running there?")

    def _check_status(self, path: str, r: Any) -> None:
        if r.status_code < 400:
            return
        with contextlib.suppress(Exception):
            r.read()
        text = r.text[:500]
        try:
            doc = json.loads(text)
            err = doc.get("error", doc)
            text = err.get("message", text) if isinstance(err, dict) else str(err)
        except (ValueError, AttributeError):
            pass
        if r.status_code == 401:
            raise EngineUnavailable(self.engine, f"{self.url} refused the API key (401): {text}")
        if r.status_code == 503:
            raise EngineUnavailable(self.engine, f"{self.url}{path} is not ready (503): {text}")
        m = re.search(r"(\d+) tokens.*?(?:context|maximum)[^\d]*(\d+)", text)
        if r.status_code == 400 and m and "context" in text.lower():
            raise ContextOverflow(int(m.group(1)), int(m.group(2)), "server context")
        raise WorkbenchError(f"{self.label} at {self.url} answered {r.status_code} to {path}: {text}")

    def _send(self, method: str, path: str, **kw: Any) -> Any:
        """One request; a kept-alive connection the server closed meanwhile is retried once on a new one
        (the request never reached the server: httpx raises RemoteProtocolError before any response)."""
        import httpx

        for attempt in (0, 1):
            try:
                r = self._http.request(method, path, **kw)
                break
            except httpx.RemoteProtocolError as e:
                if attempt or (self.server is not None and not self.server.alive()):
                    raise self._failed(path, e) from e
            except httpx.HTTPError as e:
                raise self._failed(path, e) from e
        self._check_status(path, r)
        return r

    def _get(self, path: str, **params: Any) -> Any:
        r = self._send("GET", path, params=params or None)
        return r.json() if "json" in r.headers.get("content-type", "") else r.text

    def _post(self, path: str, body: Mapping[str, Any]) -> Any:
        return self._send("POST", path, json=dict(body)).json()

    def _sse(self, path: str, body: Mapping[str, Any]) -> Iterator[dict]:
        """POST with ``stream: true``; each ``data:`` line as JSON, until ``[DONE]`` or the end."""
        import httpx

        try:
            with self._http.stream("POST", path, json=dict(body, stream=True)) as r:
                self._check_status(path, r)
                for line in r.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    yield json.loads(data)
        except httpx.HTTPError as e:
            raise self._failed(path, e) from e

    # ------------------------------------------------------------------ shared contract parts

    def _chat_tokens(self, messages: list, *, continuation: bool) -> list[int]:
        raise UnsupportedFeature("chat messages", self.engine, "send token ids or text")

    def embed(self, texts: Iterable[str]) -> list[list[float]]:
        raise UnsupportedFeature("embed", self.engine, "the server runs a generative model; embeddings need a "
                                 "server started for them")

    def _slot_index(self, st: Slot) -> int:
        return next(i for i, s in enumerate(self._slots) if s is st)

    def _served_extra(self) -> dict[str, Any]:
        """What every served description records: the transport, the endpoint and who started the server."""
        return {"transport": TRANSPORT, "endpoint": self.url,
                "server": "started by the cell" if self.server is not None else "attached (started elsewhere)",
                "server_log": str(self.server.log_path) if self.server is not None else None,
                "server_argv": list(self.server.argv) if self.server is not None else None,
                "vocab_size": self._vocab_size}


__all__ = ["ServedCell", "ServedOptions"]
