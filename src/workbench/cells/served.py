"""Served cells: the contract over an inference server's HTTP API (llama-server, vllm serve, trtllm-serve).

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
import itertools
import json
import os
import random
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Iterable, Iterator, Mapping, Sequence

from .. import models, serve
from .options import CellOptions, check_llama_counts
from ..files import tail
from ..contract import (ContextOverflow, Description, EngineUnavailable, KvEvent, KvMemory, Retention,
                        UnsupportedFeature, WorkbenchError)
from . import Availability, known_options
from .request import DEFAULT_CONTEXT_TOKENS, RequestCell, Slot, Step, Warm
from .served_id import (Answer, LlamaServerId, Mismatch, ServerId, TrtllmServeId, VllmId, check_endpoint, not_the_server,
                        nothing_answered, prometheus_sum)
from .vllm import EventCapacity

TRANSPORT = "http"


@dataclass(frozen=True)
class ServedOptions(CellOptions):
    """``open_cell("llamacpp-server" | "vllm-server" | "trtllm-serve", model, **options)`` keywords."""

    endpoint: str | None = None  # attach to a server someone else runs (its URL); None: start one
    slots: int = 1  # llama-server: -np (each its own id_slot); vLLM/TensorRT-LLM: the cell's bookkeeping
    context_tokens: int | None = None  # per slot; default min(model ceiling, 4096)
    kv_budget_tokens: int | None = None  # llama-server: -c; vLLM: whole blocks (--num-gpu-blocks-override)
    kv_budget_bytes: int | None = None  # llama-server: -c of the GGUF's bytes per token; vLLM: --kv-cache-memory-bytes
    threads: int = 1
    host: str = serve.LOOPBACK
    port: int = 0  # 0: the OS picks
    api_key: str | None = None
    server_args: tuple[str, ...] = ()  # passed to the server as they are (e.g. llama-server's --spec-type)
    gpu_layers: int | None = None  # llama-server: -ngl, a negative count for all layers (-ngl all); None: its default
    speculative_config: Mapping[str, Any] | None = None  # vLLM's --speculative-config
    kv_events: bool = True  # vLLM: KV events on a loopback ZMQ socket the cell binds
    # vLLM: more KVEventsConfig fields; an ``endpoint`` the publisher binds (``ipc://…``, with ``replay_endpoint``,
    # ``buffer_steps``) lets several consumers subscribe, and the cell's own subscriber then connects to it
    kv_events_config: Mapping[str, Any] | None = None
    hash_seed: str | None = None  # vLLM: the server's PYTHONHASHSEED (the root of every block hash)
    block_size: int = 32  # vLLM's CPU backend wants a multiple of 32
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
        values = known_options(cls, engine, options)
        if values.get("adapters"):
            raise UnsupportedFeature("LoRA adapters", engine, "they are not mapped onto served engines; open the "
                                     "in-process cell")
        if values.get("gpu_layers") is not None and engine != LlamaServerCell.engine:
            raise UnsupportedFeature("gpu_layers", engine, "it is llama.cpp's layer offload (llama-server's -ngl)")
        if "server_args" in values:
            values["server_args"] = tuple(str(a) for a in values["server_args"])
        opts = cls(**values)
        if engine == LlamaServerCell.engine:
            check_llama_counts(opts.slots, opts.threads)
        return opts


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
        opts = ServedOptions.from_options(cls.engine, options)
        resolved = models.resolve(model)
        if opts.endpoint is None:  # a format the server never runs is refused before its engine is imported
            cls._refuse_model(resolved)
        avail = cls.availability()
        if not avail.available and opts.endpoint is None:
            raise EngineUnavailable(cls.engine, avail.reason or "unknown reason")
        return cls(resolved, opts)

    @classmethod
    def _refuse_model(cls, model: models.ResolvedModel) -> None:
        """Raise :class:`UnsupportedFeature` for a model format the server does not run (a user's to fix); checked
        before :meth:`availability`, which may import the engine (vLLM: seconds) only to refuse the model then."""

    def _start(self) -> None:
        import httpx

        o = self.opts
        if o.endpoint is None:
            self._prepare_model()
            options = self._server_options()  # first: it may cap the context to what the KV budget holds
            req = serve.ServerRequest(self.engine, str(self._model_path()), host=o.host, port=o.port, api_key=o.api_key,
                                      threads=o.threads, slots=o.slots, context_tokens=self.context_tokens,
                                      extra_args=o.server_args, options=options)
            self.server = serve.start(req, o.log_dir or default_log_dir(), ready_timeout_s=o.ready_timeout_s)
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


# --------------------------------------------------------------------------- llama-server


LLAMA_ABSENT = {
    "eviction": "llama-server never evicts a slot's KV for another request: each slot keeps its own cells and a "
                "prompt longer than the slot's n_ctx is refused (tools/server/server-context.cpp)",
    "retention_priority": "llama-server has no retention priority: nothing is evicted, so there is nothing to order",
    "engine_salt": "llama-server's /completion has no cache salt: a slot reuses its longest common token prefix "
                   "whatever the request (tools/server/server-schema.cpp lists no salt field)",
    "partial_warmup": "an n_predict 0 request returns after the server evaluated the whole prompt into the slot "
                      "(it still samples one token, measured: tokens_cached is the prompt's length); there is no "
                      "block store that could lag behind it (tools/server/server-context.cpp)",
    "kv_events": "llama-server has no KV event stream and no block hashes: a slot reuses its longest common token "
                 "prefix, seen only as timings.cache_n per request (tools/server/server-task.h, result_timings)",
}


class LlamaServerCell(ServedCell):
    """llama.cpp's own server. Slots are the server's (``id_slot``); reuse is each slot's common token prefix,
    counted by the server (``timings.cache_n``)."""

    engine = "llamacpp-server"
    label = "llama-server"
    identity = LlamaServerId
    server_engine = "llamacpp"
    prefill_now = True

    @classmethod
    def availability(cls) -> Availability:
        binary = serve.llama_server_binary()
        if binary is None:
            return Availability(cls.engine, False, None,
                                "no llama-server binary: `make setup` builds it from the pinned llama-cpp-python "
                                f"sdist into ~/.cache/workbench/; or set {serve.LLAMA_SERVER_ENV} to one")
        return Availability(cls.engine, True, serve.llama_server_version(binary), None, {"binary": binary})

    @classmethod
    def _refuse_model(cls, model: models.ResolvedModel) -> None:
        if not model.is_gguf:
            raise UnsupportedFeature(f"{model.kind} model {model.spec!r}", cls.engine,
                                     "llama-server runs GGUF files; use a .gguf path or a synthetic spec")

    def _server_options(self) -> dict[str, Any]:
        # the server's --slot-save-path (kv_memory reads the slot files there): beside its log, so that even a
        # driver killed outright leaves it where the logs are; close() removes it (RequestCell._tmp)
        if self._tmp is None:
            logs = Path(self.opts.log_dir or default_log_dir())
            logs.mkdir(parents=True, exist_ok=True)
            self._tmp = tempfile.mkdtemp(prefix="llama-slots-", dir=logs)
        return {"no_repack": self._no_repack, "slot_save_path": self._tmp, "gpu_layers": self.opts.gpu_layers}

    def _start(self) -> None:
        """Start (or attach); a server whose build has AMX on an AMX CPU is restarted with ``--no-repack``,
        the AMX workaround (:mod:`workbench.cpu`), decided from the system info the server logs. The layers it put
        on a GPU are read from its log too (llama.cpp's "offloaded N/M layers to GPU"); a server attached to is
        not read, so it is not counted as on a GPU."""
        from .. import cpu
        from .llamacpp._internals import offloaded_layers

        o = self.opts
        budget = o.kv_budget_tokens
        if o.kv_budget_bytes is not None:  # llama-server takes -c in tokens: the bytes in the GGUF's KV per token
            budget = o.kv_budget_bytes // models.gguf_geometry(self.model.path)[0].bytes_per_token
        if budget is not None and o.context_tokens is None:
            self.context_tokens = max(budget // o.slots, 1)
        self._no_repack, self._offloaded = False, None
        super()._start()
        if self.server is not None:
            info = next((x for x in tail(self.server.log_path, 10_000) if "system_info" in x), "")
            self.extra_buffers = cpu.extra_buffers(cpu.flags(), info)
            if not self.extra_buffers.use:
                self._stop()
                self._no_repack = True
                super()._start()
            self._offloaded = offloaded_layers(tail(self.server.log_path, 10_000))

    def _read_server(self) -> None:
        self.props = self._identify()
        self._vocab_size = self.props.n_vocab or None
        self.version = self.props.build_info
        self.slot_ctx = self.props.slot_ctx
        self.context_tokens = self.slot_ctx
        self.eog = self._end_tokens()
        total = self.props.total_slots
        if total < len(self._slots):
            raise WorkbenchError(f"the server at {self.url} has {total} slot(s), the cell asked for {len(self._slots)}; "
                                 "start it with -np N")

    def _tokenize_remote(self, text: str, special: bool) -> list[int]:
        return [int(t) for t in self._post("/tokenize", {"content": text, "add_special": special,
                                                         "parse_special": True})["tokens"]]

    END_PIECES = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>", "<end_of_turn>")

    def _end_tokens(self) -> frozenset[int]:
        """Token ids that end generation: the model's EOS (``/props`` ``eos_token``) and the usual end-of-turn
        pieces where the vocabulary has them as one token. llama-server streams the end token it stopped
        at; the contract's tokens (like the in-process cell's) leave it out."""
        out = set()
        for piece in {self.props.eos_token, *self.END_PIECES} - {""}:
            toks = self._tokenize_remote(piece, False)
            if len(toks) == 1:
                out.add(toks[0])
        return frozenset(out)

    def _chat_tokens(self, messages: list, *, continuation: bool) -> list[int]:
        text = self._post("/apply-template", {"messages": messages, "add_generation_prompt": not continuation})["prompt"]
        return self._tokenize_remote(text, not continuation)

    @property
    def _granularity(self) -> int:
        return 1

    def _capacity_tokens(self) -> int:
        return self.slot_ctx

    def _body(self, tokens: list[int], slot: int, n_predict: int, cache: bool = True) -> dict[str, Any]:
        return {"prompt": list(tokens), "n_predict": n_predict, "cache_prompt": cache, "id_slot": slot,
                "return_tokens": True, "temperature": 0.0}

    def _warm(self, tokens: list[int], key: str, retention: Retention | None, *, slot: int = 0) -> Warm:
        """``n_predict: 0`` into the cell's slot; ``timings.cache_n`` is the prompt tokens the slot reused.

        llama-server has no salt, so manifest-keyed validity is the cell's: when the slot's key changes, the
        warm-up goes with ``cache_prompt: false`` and the server recomputes the whole prompt."""
        t0 = time.perf_counter()
        doc = self._post("/completion", self._body(tokens, slot, 0, cache=self._slots[slot].key == key))
        counters = self._counters(doc, len(tokens))
        return Warm(int(counters["cache_n"]), "timings.cache_n", counters, time.perf_counter() - t0)

    def _stream(self, prompt: list[int], st: Slot, sampling: dict[str, Any]) -> Iterator[Step]:
        kw = self._sampling_keywords(**sampling)
        body = self._body(prompt, self._slot_index(st), int(kw.pop("max_tokens")))
        body.update({k: v for k, v in kw.items() if k in ("seed", "temperature", "top_p", "top_k", "stop")})
        if sampling.get("json_schema") is not None:
            body["json_schema"] = dict(sampling["json_schema"])
        text, seen, streamed, ends, held = "", 0, 0, 0, False
        for chunk in self._sse("/completion", body):
            piece = chunk.get("content") or ""
            text += piece
            done = bool(chunk.get("stop"))
            raw = [int(t) for t in chunk.get("tokens") or []]
            tokens = [t for t in raw if t not in self.eog]
            # tokens_predicted counts every token; a token that ends inside a UTF-8 character is not streamed
            # (its id never comes: tools/server/server-context.cpp, process_token), so count what arrived
            total = int(chunk.get("tokens_predicted", seen + len(raw)))
            arrived = max(total - seen - (len(raw) - len(tokens)), len(tokens))
            seen, streamed, held = total, streamed + len(tokens), held or arrived > len(tokens)
            ends += len(raw) - len(tokens)
            if not (tokens or arrived or done):
                continue
            if not done:
                yield Step(tokens, piece, text, None, {}, arrived=arrived)
                continue
            finish = "length" if chunk.get("stop_type") == "limit" else "stop"
            complete = None
            if held:  # the same greedy (or seeded) request, not streamed, returns every id; the times stay the stream's
                again = self._post("/completion", dict(body, stream=False))
                complete = [int(t) for t in again.get("tokens") or [] if int(t) not in self.eog]
            counters = self._counters(chunk, len(prompt)) | {"stream_held_tokens": seen - streamed - ends}
            yield Step(tokens, piece, text, finish, counters, arrived=arrived, complete=complete)

    @staticmethod
    def _counters(doc: Mapping[str, Any], prompt: int) -> dict:
        t = doc.get("timings") or {}
        out = {"cache_n": int(t.get("cache_n", 0)), "prompt_n": int(t.get("prompt_n", 0)),
               "predicted_n": int(t.get("predicted_n", 0)), "prompt_tokens": prompt,
               "prompt_ms": t.get("prompt_ms"), "predicted_ms": t.get("predicted_ms")}
        for k in ("draft_n", "draft_n_accepted"):
            if k in t:
                out[k] = int(t[k])
        for k in ("tokens_cached", "tokens_evaluated"):
            if k in doc:
                out[k] = int(doc[k])
        return out

    def _context_notes(self, st: Slot) -> list[str]:
        notes = ["reuse is llama-server's per-slot longest common token prefix (id_slot pins the slot); "
                 "the last prompt token is always evaluated again",
                 "no cache salt in the server: the cell sends cache_prompt false when a slot's key changes"]
        if st.counters:
            notes.append(f"last request: timings.cache_n {st.counters.get('cache_n')} of {st.counters.get('prompt_tokens')}")
        return notes

    def measure_capacity(self, *, step: int | None = None, slot: int = 0) -> int:
        """Prompt tokens slot ``slot`` really takes (``capacity`` observer), filled over HTTP until the server refuses.

        A prompt of seeded token ids is sent with ``n_predict: 0``, doubled from ``step`` (default 256) until the
        server refuses it (400 ``exceed_context_size_error``: a prompt of the slot's n_ctx tokens or more,
        tools/server/server-context.cpp), then halved back to the longest it takes; each prompt extends the one
        before, so the slot evaluates only the new tokens. The count is the server's ``tokens_cached``; the slot
        is erased after (``POST /slots/{id}?action=erase``), where the server has a --slot-save-path."""
        self._check_open()
        if self._slots[slot].tokens:
            raise WorkbenchError(f"measure_capacity needs slot {slot} empty")
        if not self._vocab_size:
            raise UnsupportedFeature("capacity measurement", self.engine, "/v1/models states no n_vocab to draw ids from")
        rng = random.Random(12345)
        fresh = (t for t in iter(lambda: rng.randrange(self._vocab_size), None) if t not in self.eog)
        ids: list[int] = []

        def taken(n: int) -> int | None:
            ids.extend(itertools.islice(fresh, max(n - len(ids), 0)))
            return self._taken(ids[:n], slot)

        lo, hi, held = 0, max(step or 256, 1), 0
        while (got := taken(hi)) is not None:
            if hi > 1 << 24:
                raise WorkbenchError(f"{self.url} took {hi:,} prompt tokens into one slot and never refused")
            lo, hi, held = hi, 2 * hi, got
        while hi - lo > 1:
            mid = (lo + hi) // 2
            got = taken(mid)
            lo, hi, held = (mid, hi, got) if got is not None else (lo, mid, held)
        if self._slot_folder() is not None:
            self._post(f"/slots/{slot}?action=erase", {})
        return held

    def _taken(self, prompt: list[int], slot: int) -> int | None:
        """The server's ``tokens_cached`` after it evaluated ``prompt`` into ``slot``; None: it refused the prompt."""
        try:
            return int(self._post("/completion", self._body(prompt, slot, 0))["tokens_cached"])
        except ContextOverflow:
            return None

    def _slot_folder(self) -> Path | None:
        """Where the server writes saved slots: the last --slot-save-path it was started with (the cell's own, or
        one in ``server_args``); None for a server the cell attached to, whose disk is not this cell's."""
        args = list(self.server.argv) if self.server is not None else []
        at = [i for i, a in enumerate(args[:-1]) if a == "--slot-save-path"]
        return Path(args[at[-1] + 1]) if at else None

    def kv_memory(self) -> KvMemory:
        """The engine's own K and V row sizes (``capacity`` observer): the server saves slot 0
        (``POST /slots/0?action=save``, ``llama_state_seq_save_file`` into its --slot-save-path) and the one state
        reader walks that file (:func:`.llamacpp.state.parse_seq_file`); an empty slot first takes one token and is
        erased again. No pool bytes: llama-server states none (its log's "KV buffer size" is rounded to 0.01 MiB)."""
        from .llamacpp.state import parse_seq_file

        self._check_open()
        folder = self._slot_folder()
        if folder is None:
            raise UnsupportedFeature("KV bytes", self.engine, "llama-server states them only in a saved slot file, "
                                     "written to its own --slot-save-path; an attached server's disk is not readable "
                                     "here (open the cell without endpoint=)")
        scratch = not self._slots[0].tokens
        if scratch:
            self._post("/completion", self._body([next(t for t in range(self._vocab_size or 2) if t not in self.eog)],
                                                 0, 0, cache=False))
        name = f"workbench-kv-{os.getpid()}-{time.time_ns()}.bin"
        try:
            self._post("/slots/0?action=save", {"filename": name})
            state = parse_seq_file((folder / name).read_bytes())
        finally:
            (folder / name).unlink(missing_ok=True)
            if scratch:
                self._post("/slots/0?action=erase", {})
        if state.row_bytes is None:
            raise WorkbenchError(f"the slot file {self.url} saved for slot 0 holds no K/V rows; cannot read their sizes")
        return KvMemory(bytes_per_token=state.row_bytes, pool_bytes=None,
                        how="the K and V row sizes (every layer) in the sequence state file llama-server wrote for "
                            "slot 0 (POST /slots/0?action=save, llama_state_seq_save_file)")

    def slots(self) -> list[dict]:
        """The server's own view of its slots (``GET /slots``)."""
        self._check_open()
        return list(self._get("/slots"))

    def describe(self) -> Description:
        self._check_open()
        path = Path(self.props.model_path or self.model.path)
        geometry, _, _ = models.gguf_geometry(path if path.is_file() else self.model.path)
        total = self.props.total_slots
        return Description(
            engine=self.engine, engine_version=self.version, model=self.model.name,
            manifest_digest=self.manifest.digest, geometry=geometry, context_tokens=self.slot_ctx,
            kv_capacity_tokens=self.slot_ctx * total, kv_capacity_bytes=self.slot_ctx * total * geometry.bytes_per_token,
            block_tokens=1, slots=len(self._slots), observers=("request_counters", "capacity"), absent=LLAMA_ABSENT,
            extra=self._served_extra() | {
                "server_version": f"llama-server {self.version}", "build_info": self.version, "total_slots": total,
                "slot_n_ctx": self.slot_ctx, "model_path": self.props.model_path,
                "n_ctx_train": self.props.n_ctx_train,
                "reuse_counters": "timings.cache_n per request (prompt tokens served from the slot's cache)",
                "kv_readback": "none: llama-server's HTTP API does not read KV back",
                "speculation": _spec_args(self.server.argv if self.server else ()),
                "extra_buffers": None if self.server is None else self.extra_buffers.use,
                "extra_buffers_reason": None if self.server is None else self.extra_buffers.reason,
                "offloaded_layers": list(self._offloaded) if self._offloaded else None,  # its log's N/M
            })


def _spec_args(argv: Sequence[str]) -> dict[str, str]:
    """The speculation flags a llama-server was started with."""
    out, args = {}, list(argv)
    for i, a in enumerate(args):
        if a.startswith("--spec-") or a in ("-md", "--draft-max", "--draft-min"):
            out[a] = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("-") else "on"
    return out


# --------------------------------------------------------------------------- vLLM


class VllmServerCell(EventCapacity, ServedCell):
    """``vllm serve`` (the CPU build here): the engine-global block pool keyed by ``cache_salt``, as the
    in-process vLLM cell maps it; KV events arrive on a loopback ZMQ socket the cell binds."""

    engine = "vllm-server"
    label = "vllm serve"
    identity = VllmId
    server_engine = "vllm"
    prefill_now = True

    def __init__(self, model: models.ResolvedModel, opts: ServedOptions) -> None:
        self._events: Any = None
        self._dir: Path | None = None
        super().__init__(model, opts)

    @classmethod
    def availability(cls) -> Availability:
        from .vllm import VllmCell

        a = VllmCell.availability()
        return Availability(cls.engine, a.available, a.version, a.reason, dict(a.details))

    @classmethod
    def _refuse_model(cls, model: models.ResolvedModel) -> None:
        if model.kind not in ("hf", "synthetic"):
            raise UnsupportedFeature(f"{model.kind} model {model.spec!r}", cls.engine,
                                     "vllm serve runs Hugging Face directories; use a 'synthetic:…' spec or a directory")

    def _prepare_model(self) -> None:
        from .vllm import _check_cpu_head_size

        self._dir = models.hf_directory(self.model)
        _check_cpu_head_size(models.hf_config(self._dir))

    def _model_path(self) -> Path:
        return self._dir or models.hf_directory(self.model)

    def _server_options(self) -> dict[str, Any]:
        o = self.opts
        config = models.hf_config(self._model_path())
        # the dtype config.json declares (vLLM's CPU "auto" would turn float32 into bfloat16), as in-process
        out: dict[str, Any] = {"block_size": o.block_size, "dtype": models.hf_dtype(config) or "bfloat16"}
        geometry, ceiling = models.hf_geometry(config)
        budget = o.kv_budget_bytes // geometry.bytes_per_token if o.kv_budget_bytes is not None else o.kv_budget_tokens
        # vLLM refuses to start when one max_model_len sequence would not fit the pool: a budget caps the context
        fit = None if budget is None else max((budget // o.block_size - 1) * o.block_size, o.block_size)
        self.context_tokens = o.context_tokens or min(ceiling or DEFAULT_CONTEXT_TOKENS, DEFAULT_CONTEXT_TOKENS,
                                                      fit or DEFAULT_CONTEXT_TOKENS)
        if o.kv_budget_bytes is not None:  # a byte budget is the engine's to divide into blocks
            out["kv_cache_memory_bytes"] = int(o.kv_budget_bytes)
        else:
            blocks = (o.kv_budget_tokens // o.block_size if o.kv_budget_tokens
                      else -(-self.context_tokens * o.slots // o.block_size) + 1)
            out["num_gpu_blocks"] = max(blocks, 2)
            out["kv_cache_memory_bytes"] = out["num_gpu_blocks"] * o.block_size * geometry.bytes_per_token
        if o.speculative_config:
            out["speculative_config"] = dict(o.speculative_config)
        if o.kv_events:
            from ..observe import vllm_events

            extra = dict(o.kv_events_config or {})
            self._events = vllm_events.Subscriber(connect=extra.get("endpoint"), replay=extra.get("replay_endpoint"))
            out["kv_events_endpoint"] = self._events.endpoint
            out["kv_events_config"] = extra
        if o.hash_seed is not None:
            out["hash_seed"] = o.hash_seed
        return out

    def _stop(self) -> None:
        super()._stop()
        if self._events is not None:
            self._events.close()
            self._events = None

    def _read_server(self) -> None:
        said = self._identify()
        self.version, self.served_model, self.cache_info = said.version, said.served_model, said.cache_info
        self.context_tokens = said.max_model_len or self.context_tokens
        config = models.hf_config(Path(said.root or self._model_path()))
        self._vocab_size = int(config["vocab_size"])
        self._geometry, _ = models.hf_geometry(config)

    def _tokenize_remote(self, text: str, special: bool) -> list[int]:
        doc = self._post("/tokenize", {"model": self.served_model, "prompt": text, "add_special_tokens": special})
        return [int(t) for t in doc["tokens"]]

    def _chat_tokens(self, messages: list, *, continuation: bool) -> list[int]:
        doc = self._post("/tokenize", {"model": self.served_model, "messages": messages,
                                       "add_generation_prompt": not continuation, "add_special_tokens": False})
        return [int(t) for t in doc["tokens"]]

    @property
    def _granularity(self) -> int:
        return int(self.cache_info.get("block_size") or self.opts.block_size)

    def _capacity_tokens(self) -> int:
        return self._usable_blocks() * self._granularity

    def _usable_blocks(self) -> int:
        return max(int(self.cache_info.get("num_gpu_blocks") or 0) - 1, 0)

    def reset_prefix_cache(self) -> bool:
        """Whether the pool holds no cached block now: ``POST /reset_prefix_cache`` where the server has it (a dev
        route, VLLM_SERVER_DEV_MODE=1: vllm/entrypoints/serve/dev/cache/api_router.py); otherwise only a server
        that never looked a prompt up (``vllm:prefix_cache_queries_total`` 0 in ``/metrics``) is known empty."""
        self._check_open()
        try:
            self._post("/reset_prefix_cache", {})
            return True
        except WorkbenchError as e:
            if "answered 404" not in str(e):
                raise
        return prometheus_sum(self._get("/metrics"), "vllm:prefix_cache_queries_total") == 0

    def kv_memory(self) -> KvMemory:
        """Not over HTTP (``capacity`` observer): vllm serve states no KV bytes of its own there."""
        raise UnsupportedFeature("KV bytes", self.engine, "vllm serve states none over HTTP: /metrics "
                                 "vllm:cache_config_info gives num_gpu_blocks and block_size and echoes "
                                 "--kv-cache-memory-bytes (the budget the cell sent), never a block's bytes; the worker's "
                                 "KV tensors are read only in-process (open the vllm cell)")

    def _body(self, tokens: list[int], key: str | None, max_tokens: int) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.served_model, "prompt": list(tokens), "max_tokens": max_tokens,
                                "temperature": 0.0, "return_token_ids": True}
        if key is not None:
            body["cache_salt"] = key
        return body

    def _warm(self, tokens: list[int], key: str, retention: Retention | None, *, slot: int = 0) -> Warm:
        """``max_tokens: 1`` under the salt; ``usage.prompt_tokens_details.cached_tokens`` is the reuse."""
        t0 = time.perf_counter()
        doc = self._post("/v1/completions", self._body(tokens, key, 1))
        counters = self._counters(doc.get("usage"), len(tokens))
        return Warm(int(counters["cached_tokens"] or 0), "usage.prompt_tokens_details.cached_tokens", counters,
                    time.perf_counter() - t0)

    def _stream(self, prompt: list[int], st: Slot, sampling: dict[str, Any]) -> Iterator[Step]:
        kw = self._sampling_keywords(**sampling)
        body = self._body(prompt, st.key, int(kw.pop("max_tokens")))
        body.update(kw)
        body["stream_options"] = {"include_usage": True}
        if sampling.get("json_schema") is not None:
            body["structured_outputs"] = {"json": dict(sampling["json_schema"])}
        text, finish = "", None
        for chunk in self._sse("/v1/completions", body):
            usage = chunk.get("usage")
            for choice in chunk.get("choices") or []:
                piece = choice.get("text") or ""
                text += piece
                finish = choice.get("finish_reason") or finish
                yield Step([int(t) for t in choice.get("token_ids") or []], piece, text, finish, {})
            if usage:  # the last chunk: no choices, the request's usage
                yield Step([], "", text, finish or "length", self._counters(usage, len(prompt)))

    @staticmethod
    def _counters(usage: Mapping[str, Any] | None, prompt: int) -> dict:
        usage = usage or {}
        details = usage.get("prompt_tokens_details") or {}
        return {"cached_tokens": details.get("cached_tokens"), "prompt_tokens": usage.get("prompt_tokens", prompt),
                "completion_tokens": usage.get("completion_tokens")}

    def _context_notes(self, st: Slot) -> list[str]:
        notes = ["reuse is engine-global hash-chained block matching keyed by cache_salt; a slot is the cell's bookkeeping",
                 f"cached_tokens counts whole blocks of {self._granularity} and never the last prompt token"]
        if st.counters:
            notes.append(f"last request: cached_tokens {st.counters.get('cached_tokens')} of {st.counters.get('prompt_tokens')}")
        return notes

    def describe(self) -> Description:
        self._check_open()
        from .vllm import ABSENT

        B, capacity = self._granularity, self._capacity_tokens()
        observers = ["request_counters"] + (["kv_events", "capacity"] if self._events is not None else [])
        return Description(
            engine=self.engine, engine_version=self.version, model=self.model.name,
            manifest_digest=self.manifest.digest, geometry=self._geometry, context_tokens=self.context_tokens,
            kv_capacity_tokens=capacity, kv_capacity_bytes=capacity * self._geometry.bytes_per_token, block_tokens=B,
            slots=len(self._slots), observers=tuple(observers), absent=ABSENT,
            extra=self._served_extra() | {
                "server_version": f"vllm {self.version}", "served_model": self.served_model,
                "num_gpu_blocks": self.cache_info.get("num_gpu_blocks"),
                "kv_capacity_source": "/metrics vllm:cache_config_info num_gpu_blocks − 1 (the null block) × block_size",
                "prefix_caching_hash_algo": self.cache_info.get("prefix_caching_hash_algo"),
                "kv_events_endpoint": self._events.endpoint if self._events is not None else None,
                "kv_events_replay_endpoint": self._events.replay_endpoint if self._events is not None else None,
                "kv_hash_seed": self.opts.hash_seed,
                "reuse_counters": "usage.prompt_tokens_details.cached_tokens (--enable-prompt-tokens-details)",
            })

    def drain_kv_events(self, timeout_s: float = 2.0) -> list[KvEvent]:
        """Every KV event the server published since the last drain (``kv_events`` observer)."""
        self._check_open()
        if self._events is None:
            raise UnsupportedFeature("KV events", self.engine, "open the cell with kv_events=True (and not attached)")
        return self._events.drain(timeout_s=timeout_s)


# --------------------------------------------------------------------------- TensorRT-LLM


class TrtllmServeCell(ServedCell):
    """``trtllm-serve`` 1.2 (PyTorch backend), written against the 1.2-era ``tensorrt_llm/serve/openai_server.py``:
    completions with token-id prompts and ``cache_salt``; reuse from ``GET /perf_metrics`` (destructive, one
    entry per finished request: ``kv_cache_metrics.num_reused_blocks`` × tokens per block). Not run here:
    tensorrt_llm needs an NVIDIA GPU."""

    engine = "trtllm-serve"
    label = "trtllm-serve"
    identity = TrtllmServeId
    server_engine = "trtllm"
    prefill_now = True
    TOKENS_PER_BLOCK = 32  # 1.2's KvCacheConfig default; /server_info does not say it before 1.3

    @classmethod
    def availability(cls) -> Availability:
        from .trtllm import TrtLlmCell

        a = TrtLlmCell.availability()
        reason = a.reason and f"trtllm-serve needs tensorrt_llm: {a.reason}"
        return Availability(cls.engine, a.available, a.version, reason, dict(a.details))

    @classmethod
    def _refuse_model(cls, model: models.ResolvedModel) -> None:
        if model.kind not in ("hf", "synthetic"):
            raise UnsupportedFeature(f"{model.kind} model {model.spec!r}", cls.engine,
                                     "trtllm-serve runs Hugging Face directories")

    def _model_path(self) -> Path:
        return models.hf_directory(self.model)

    def _server_options(self) -> dict[str, Any]:
        return {"tokens_per_block": self.TOKENS_PER_BLOCK}

    def _read_server(self) -> None:
        said = self._identify()
        self.version, self.served_model, self.server_info = said.version, said.served_model, said.server_info
        config = models.hf_config(self._model_path())
        self._vocab_size = int(config["vocab_size"])
        self._geometry, ceiling = models.hf_geometry(config)
        self.context_tokens = self.opts.context_tokens or min(ceiling or DEFAULT_CONTEXT_TOKENS, DEFAULT_CONTEXT_TOKENS)

    def _tokenize_remote(self, text: str, special: bool) -> list[int]:
        raise UnsupportedFeature("text prompts", self.engine, "trtllm-serve 1.2 has no /tokenize; send token ids")

    @property
    def _granularity(self) -> int:
        return int(self.server_info.get("tokens_per_block") or self.TOKENS_PER_BLOCK)

    def _capacity_tokens(self) -> int:
        return self.context_tokens * len(self._slots)

    def _body(self, tokens: list[int], key: str | None, max_tokens: int) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.served_model, "prompt": list(tokens), "max_tokens": max_tokens,
                                "temperature": 0.0}
        if key is not None:
            body["cache_salt"] = key
        return body

    def _reused(self, request_id: str | None) -> tuple[int, dict]:
        """The finished request's ``kv_cache_metrics`` from ``/perf_metrics`` (1.2: drained on read)."""
        entries = self._get("/perf_metrics") or []
        mine = [e for e in entries if request_id is None or str(e.get("request_id")) == str(request_id)] or entries[-1:]
        kv = (mine[-1].get("perf_metrics") or {}).get("kv_cache_metrics", {}) if mine else {}
        return int(kv.get("num_reused_blocks", 0)) * self._granularity, dict(kv)

    def _warm(self, tokens: list[int], key: str, retention: Retention | None, *, slot: int = 0) -> Warm:
        t0 = time.perf_counter()
        doc = self._post("/v1/completions", self._body(tokens, key, 1))
        reused, kv = self._reused(None)
        return Warm(reused, "perf_metrics.kv_cache_metrics", {"kv_cache_metrics": kv, "id": doc.get("id"),
                                                              "prompt_tokens": len(tokens)}, time.perf_counter() - t0)

    def _stream(self, prompt: list[int], st: Slot, sampling: dict[str, Any]) -> Iterator[Step]:
        kw = self._sampling_keywords(**sampling)
        body = self._body(prompt, st.key, int(kw.pop("max_tokens")))
        body.update(kw)
        text, finish = "", None
        for chunk in self._sse("/v1/completions", body):
            for choice in chunk.get("choices") or []:
                piece = choice.get("text") or ""
                text += piece
                finish = choice.get("finish_reason") or finish
                yield Step([int(t) for t in choice.get("token_ids") or []], piece, text, finish, {})
        reused, kv = self._reused(None)
        yield Step([], "", text, finish or "length", {"kv_cache_metrics": kv, "reused_tokens": reused})

    def _context_notes(self, st: Slot) -> list[str]:
        return ["reuse is engine-global block matching keyed by cache_salt, read from /perf_metrics"]

    def describe(self) -> Description:
        self._check_open()
        cap = self._capacity_tokens()
        return Description(
            engine=self.engine, engine_version=self.version, model=self.model.name,
            manifest_digest=self.manifest.digest, geometry=self._geometry, context_tokens=self.context_tokens,
            kv_capacity_tokens=cap, kv_capacity_bytes=cap * self._geometry.bytes_per_token,
            block_tokens=self._granularity, slots=len(self._slots), observers=("request_counters", "kv_events"),
            extra=self._served_extra() | {"server_version": f"tensorrt_llm {self.version}",
                                          "server_info": self.server_info,
                                          # 1.2's one event hash; 1.3+ names it in /server_info
                                          "kv_cache_hash_algo": self.server_info.get("kv_cache_hash_algo")
                                          or "v1_block_key"})

    def drain_kv_events(self, timeout_s: float = 30.0) -> list[KvEvent]:
        """``POST /kv_cache_events`` (``kv_events`` observer): destructive, one shared queue (see
        :mod:`workbench.events.sources`); needs ``event_buffer_max_size > 0`` in the server's options."""
        from ..events.sources import TrtllmHttpSource

        self._check_open()
        return TrtllmHttpSource(self.url, client=self._http).poll(timeout_s)


__all__ = ["LlamaServerCell", "ServedCell", "ServedOptions", "TrtllmServeCell", "VllmServerCell"]
