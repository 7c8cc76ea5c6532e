"""TensorRT-LLM's server (``trtllm-serve`` 1.2 and 1.4) as a served cell: its launch line, its identity and the cell.

1.4 (the guard's 1.4 profile): the V1 KV manager is pinned in the options YAML unless ``kv_manager="default"``
(``use_kv_cache_manager_v2`` exists on 1.2 too, defaulting to False there); a completion's
``usage.prompt_tokens_details.cached_tokens`` (exact) is read before ``/perf_metrics``' blocks, both kept;
``POST /kv_cache_events`` goes through ``KvEventFanout`` (``tensorrt_llm/serve/kv_event_fanout.py``): only
``stored`` and ``removed`` of the largest window, ``created`` swallowed at start and ``updated`` dropped, so the
pool's geometry comes from ``/server_info`` and the configured budget, priority changes only from the in-process API
(the ``trtllm`` cell) or the ZMQ push socket, and the drained event ids skip the filtered events' numbers.
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, Iterator, Mapping

from ... import models
from ...engine import Description, KvEvent, Retention, UnsupportedFeature
from ...serve import Launch, ServerRequest
from .. import Availability
from ..request import DEFAULT_CONTEXT_TOKENS, Slot, Step, Warm
from ..served import ServedCell, ServedOptions
from ..served_id import Answer, Mismatch, ServerId, pick
from . import guard as trtllm_guard


@dataclass(frozen=True)
class TrtllmServeId(ServerId):
    """trtllm-serve 1.2's ``/version`` (``{"version": …}``), ``/v1/models`` (``ModelCard``, owned_by
    ``tensorrt_llm``) and ``/server_info`` (1.2: ``{"disaggregated_params": …}``; 1.3+ adds the KV fields), as
    1.2-era ``tensorrt_llm/serve/openai_server.py`` registers them."""

    label: ClassVar[str] = "trtllm-serve"
    paths: ClassVar[tuple[str, ...]] = ("/version", "/v1/models", "/server_info")
    owner: ClassVar[str] = "tensorrt_llm"

    version: str
    served_model: str
    server_info: Mapping[str, Any]

    @classmethod
    def read(cls, answers: Mapping[str, Answer]) -> "TrtllmServeId":
        version = pick(answers["/version"], "version", str)
        served = pick(answers["/v1/models"], "data.0.id", str)
        cls.check_owner(answers)
        info = answers["/server_info"].doc()
        if not isinstance(info, dict):
            raise Mismatch(answers["/server_info"], "a JSON object")
        return cls(version=version, served_model=served, server_info=info)


BACKENDS = ("pytorch", "tensorrt", "_autodeploy")
"""``trtllm-serve --backend``'s choices (``tensorrt_llm/commands/serve.py``, ``ChoiceWithAlias``; ``trt`` is an alias)."""


@dataclass(frozen=True)
class TrtllmServeOptions(ServedOptions):
    """``open_cell("trtllm-serve", model, **options)``: the served keywords and ``trtllm-serve``'s own, as the
    1.2-era ``tensorrt_llm/commands/serve.py`` (its ``serve`` click command) and ``llmapi/llm_args.py``
    (``KvCacheConfig``, written to ``--extra_llm_api_options``) name them. ``kv_budget_tokens`` is
    ``kv_cache_config.max_tokens``; a budget in bytes has no 1.2 knob and is refused."""

    backend: str = "pytorch"  # --backend; the cell reads reuse from /perf_metrics, which the PyTorch backend fills
    max_num_tokens: int | None = None  # --max_num_tokens (None: BuildConfig's default)
    tensor_parallel_size: int = 1  # --tp_size
    free_gpu_memory_fraction: float | None = None  # --kv_cache_free_gpu_memory_fraction (None: serve.py's 0.9)
    trust_remote_code: bool = False  # --trust_remote_code
    enable_chunked_prefill: bool = False  # --enable_chunked_prefill
    tokens_per_block: int = 32  # kv_cache_config.tokens_per_block (1.2's default; /server_info says it from 1.3)
    event_buffer_max_size: int = 1024  # kv_cache_config.event_buffer_max_size (0 turns KV events off)
    perf_metrics_max_requests: int = 1000  # perf_metrics_max_requests (/perf_metrics keeps this many)
    kv_manager: str = "v1"  # "v1": kv_cache_config.use_kv_cache_manager_v2 false; "default": the release's own (V2 on 1.4)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.backend not in BACKENDS:
            raise ValueError(f"backend {self.backend!r}: trtllm-serve 1.2 takes {', '.join(BACKENDS)}")
        if self.kv_budget_bytes is not None:
            raise ValueError("trtllm-serve 1.2 takes a KV budget in tokens (kv_budget_tokens, its "
                             "kv_cache_config.max_tokens), not bytes")
        counts = {"tensor_parallel_size": self.tensor_parallel_size, "tokens_per_block": self.tokens_per_block,
                  "perf_metrics_max_requests": self.perf_metrics_max_requests, "max_num_tokens": self.max_num_tokens or 1}
        if bad := [f"{k} {v}" for k, v in counts.items() if v < 1] + (
                [f"event_buffer_max_size {self.event_buffer_max_size}"] if self.event_buffer_max_size < 0 else []):
            raise ValueError(f"trtllm-serve: {', '.join(bad)}: give whole numbers of at least 1 (events: 0 or more)")
        if self.kv_manager not in ("v1", "default"):
            raise ValueError(f"kv_manager {self.kv_manager!r}: give 'v1' (pinned) or 'default' (the release's own)")
        if self.free_gpu_memory_fraction is not None and not 0 < self.free_gpu_memory_fraction <= 1:
            raise ValueError(f"free_gpu_memory_fraction {self.free_gpu_memory_fraction}: give a fraction in (0, 1]")

    def server_options(self) -> dict[str, Any]:
        """What :func:`launch` reads (``ServerRequest.options``): trtllm-serve's own fields, the budget as
        ``max_tokens``."""
        own = {f.name for f in fields(self)} - {f.name for f in fields(ServedOptions)}
        return {name: getattr(self, name) for name in sorted(own)} | {"max_tokens": self.kv_budget_tokens}


TRTLLM_OPTIONS = "trtllm-options.yaml"


def launch(req: ServerRequest, port: int, folder: Path) -> Launch:
    """``trtllm-serve`` 1.2, written against the 1.2-era ``tensorrt_llm/commands/serve.py`` (its click options) and
    ``llmapi/llm_args.py`` (the YAML of ``--extra_llm_api_options``): block reuse and KV events on, per-request perf
    metrics for ``/perf_metrics`` (its ``kv_cache_metrics`` give each request's reused blocks). ``req.options``:
    :class:`TrtllmServeOptions`' server fields, as the cell's ``_server_options`` hands them over. Not run on this
    machine (no NVIDIA GPU)."""
    binary = shutil.which("trtllm-serve") or str(Path(sys.executable).parent / "trtllm-serve")
    o = req.options
    kv = {"tokens_per_block": o.get("tokens_per_block"), "max_tokens": o.get("max_tokens"),
          "free_gpu_memory_fraction": o.get("free_gpu_memory_fraction")}
    pinned = ["  use_kv_cache_manager_v2: false"] if o.get("kv_manager", "v1") == "v1" else []
    options = "\n".join([
        "kv_cache_config:",
        "  enable_block_reuse: true",
        f"  event_buffer_max_size: {int(o.get('event_buffer_max_size', 1024))}",
        *pinned,
        *(f"  {k}: {v}" for k, v in kv.items() if v is not None),
        "return_perf_metrics: true",
        f"perf_metrics_max_requests: {int(o.get('perf_metrics_max_requests', 1000))}",
        "",
    ])
    argv = [binary, req.model_path, "--host", req.host, "--port", str(port), "--backend", o.get("backend", "pytorch"),
            "--max_seq_len", str(req.context_tokens), "--max_batch_size", str(max(req.slots, 1)),
            "--tp_size", str(o.get("tensor_parallel_size", 1)), "--extra_llm_api_options", str(folder / TRTLLM_OPTIONS)]
    argv += ["--max_num_tokens", str(o["max_num_tokens"])] if o.get("max_num_tokens") else []
    argv += [flag for flag in ("--trust_remote_code", "--enable_chunked_prefill") if o.get(flag[2:])]
    return Launch(tuple(argv + list(req.extra_args)), {}, {TRTLLM_OPTIONS: options}, refused_args=REFUSED_ARGS)


#: click's words (trtllm-serve's command line, tensorrt_llm/commands/serve.py) for arguments it refuses, then exit 2
REFUSED_ARGS = r"Error: (No such option|Invalid value|Got unexpected extra argument)[^\n]*"


USAGE_CACHED = "usage.prompt_tokens_details.cached_tokens"


def usage_cached_tokens(doc: Any) -> int | None:
    """A completion's exact cached prompt tokens (1.3+: ``usage.prompt_tokens_details.cached_tokens``); None where
    the server reports none (1.2)."""
    usage = doc.get("usage") if isinstance(doc, dict) else None
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    value = details.get("cached_tokens") if isinstance(details, dict) else None
    return None if value is None else int(value)


class TrtllmServeCell(ServedCell):
    """``trtllm-serve`` 1.2 (PyTorch backend), written against the 1.2-era ``tensorrt_llm/serve/openai_server.py``:
    completions with token-id prompts and ``cache_salt``; reuse from ``GET /perf_metrics`` (destructive, one
    entry per finished request: ``kv_cache_metrics.num_reused_blocks`` × tokens per block). Not run here:
    tensorrt_llm needs an NVIDIA GPU."""

    engine = "trtllm-serve"
    model_hint = "trtllm-serve runs Hugging Face directories"
    label = "trtllm-serve"
    identity = TrtllmServeId
    launch = staticmethod(launch)
    server_engine = "trtllm"
    prefill_now = True
    exact_sources = (USAGE_CACHED,)

    @classmethod
    def availability(cls) -> Availability:
        from .cell import TrtLlmCell

        a = TrtLlmCell.availability()
        reason = a.reason and f"trtllm-serve needs tensorrt_llm: {a.reason}"
        return Availability(cls.engine, a.available, a.version, reason, dict(a.details))

    def _model_path(self) -> Path:
        return models.hf_directory(self.model)

    def _server_options(self) -> dict[str, Any]:
        return self.opts.server_options()

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
        return int(self.server_info.get("tokens_per_block") or self.opts.tokens_per_block)

    def _capacity_tokens(self) -> int:
        return self.opts.kv_budget_tokens or self.context_tokens * len(self._slots)

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
        counters = {"kv_cache_metrics": kv, "id": doc.get("id"), "prompt_tokens": len(tokens)}
        cached = usage_cached_tokens(doc)
        if cached is None:
            return Warm(reused, "perf_metrics.kv_cache_metrics", counters, time.perf_counter() - t0)
        # 1.4: the exact count answers; /perf_metrics' blocks stay as the second channel, a difference kept
        counters |= {"cached_tokens": cached, "block_reused_tokens": reused, "reuse_channels_differ": cached != reused}
        return Warm(cached, USAGE_CACHED, counters, time.perf_counter() - t0)

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
                                          or "v1_block_key",
                                          "kv_cache_hash_algo_source": "GET /server_info"
                                          if self.server_info.get("kv_cache_hash_algo") else
                                          "1.2's one block key (/server_info names none)",
                                          "kv_manager": self.opts.kv_manager} | self._release_extra())

    def _release_extra(self) -> dict[str, Any]:
        """What the server's release line changes for a consumer of its events (the guard's profile)."""
        release = trtllm_guard.release_of(self.version)
        if release is None:
            return {"release": None}
        return {"release": release.name, "kv_events_http": release.http_events, "kv_events_push": release.push_events}

    def drain_kv_events(self, timeout_s: float = 30.0) -> list[KvEvent]:
        """``POST /kv_cache_events`` (``kv_events`` observer): destructive, one shared queue (see
        :mod:`workbench.events.sources`); needs ``event_buffer_max_size > 0`` in the server's options."""
        from .sources import TrtllmHttpSource

        self._check_open()
        return TrtllmHttpSource(self.url, client=self._http).poll(timeout_s)
