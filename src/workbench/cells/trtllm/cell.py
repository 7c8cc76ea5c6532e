"""The TensorRT-LLM cell: the blueprint's Contract Mapping Reference on the tensorrt_llm LLM API (1.2 and 1.4).

PyTorch backend, driven through ``tensorrt_llm.LLM``. The release line's profile
(:data:`workbench.cells.trtllm.guard.RELEASES`) says what differs; the cell records it in ``describe().extra``:
the KV manager it ran (``kv_manager``: V1 pinned by default, because the blueprint's retention mechanism is V1's;
``kv_manager="default"`` leaves the release's own, V2 on 1.4), the hash algorithm the events state (read before
any hash is recomputed), and the reuse channels (1.4's exact ``cached_tokens`` first, the perf metrics' blocks
second, any difference between them kept). The mapping, row by row:

* **Manifest-keyed reuse validity** — every request carries ``cache_salt=manifest.cache_key(salt)``:
  the caller's derived salt (the contract adapter's ``cache_salt``: manifest digest ⊕ adapter digests, in order,
  with scale; :mod:`workbench.transport.manifest`), else the cell's own variant digest. The engine salts the first
  block's hash, so KV never crosses manifests.
* **EnsurePrefix** — render (``tokenizer.apply_chat_template``), tokenize, then a warm-up
  ``generate_async(max_tokens=1)`` whose ``KvCacheRetentionConfig`` holds one
  ``TokenRangeRetentionConfig`` over the prefix. Reuse counters come from the request's
  ``request_perf_metrics.kv_cache_metrics`` (``LLM(return_perf_metrics=True)``), in blocks,
  converted with ``tokens_per_block``: block-granular estimates (``exact=False``). A divergent tail
  is bookkeeping only; stale blocks age out of the engine's radix tree.
* **PrefillSuffix** — deferred: bookkeeping that rides the next decode's prefill.
* **Decode** — ``generate_async(streaming=True)`` with ``SamplingParams``; ``GuidedDecodingParams``
  for JSON schemas. TTFT/inter-token times measured client-side, engine timings in the counters.
* **ExplainContext** — remove_tail/remove_middle/position_shift false, recompute_range true.
* **Snapshot/Restore** — text-level: the slot's tokens; restore warms them again.
* **Describe** — KV geometry from ``config.json``, memory from NVML; the KV budget is
  ``KvCacheConfig(max_tokens=…)`` from a byte or token budget, with ``max_seq_len`` — never the
  default memory fraction alone. The pool's real size is read back from the ``created`` KV event
  or the iteration stats. The engine reports neither before its first request (1.2 starts its
  event and stats dispatch on the first submit), so :meth:`TrtLlmCell.open` sends one 1-token
  *open request* under a salt of its own and reads them; ``created`` goes on to the first drain,
  the request's own events and stats stay out of the drains (``describe().extra["open_request"]``).
* **Embed** — :class:`UnsupportedFeature`. **LoRA** — ``LoraConfig`` plus a per-request
  ``LoRARequest``. **Slot switch** — :meth:`TrtLlmCell.switch` tears down and recreates the
  ``LLM``. **ContextOverflow** — from token counts, before dispatch.

Nothing imports tensorrt_llm at module import: :mod:`workbench.cells.trtllm.guard` holds the one
import and the one table of tensorrt_llm symbols the cell depends on, checked at open.

What the cell relies on in tensorrt_llm 1.2 (each row is modelled by the test double and listed
in ``tests/cells/test_trtllm_double.py``):

* ``LLM.get_kv_cache_events`` asserts before the first ``generate_async``: the iteration results
  are created by ``GenerationExecutor._maybe_initialize_iteration_results`` on submit
  (``tensorrt_llm/executor/executor.py``), and the dispatch threads that move events and stats
  out of the engine start on the first submit (``_start_dispatch_threads`` in
  ``tensorrt_llm/executor/proxy.py``; ``submit`` → ``start`` in ``tensorrt_llm/executor/worker.py``).
* ``LLM.get_stats`` returns ``[]`` before the first submit, and a list of dicts after
  (``IterationResult.get_results`` ``json.loads`` each entry, ``tensorrt_llm/executor/result.py``).
* ``IterationResult.get_results`` reads until one ``queue.get(timeout)`` runs dry, then returns
  ``[]`` until the next submit (``mark_undone``), so a drain waits at least
  :data:`MIN_DRAIN_TIMEOUT_S` — five times the 0.2 s the dispatch threads sleep between pulls
  (``_iteration_result_task`` in ``executor/proxy.py`` and ``executor/worker.py``). Events of a
  request that arrive later still show up, in a later drain; probes read windows, not timings.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, fields
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable, Iterator, Mapping, Sequence

from ... import environment, models
from ..options import CellOptions
from ...engine import ContextOverflow, Description, EngineUnavailable, KvEvent, Retention, UnsupportedFeature
from . import connector as trtllm_connector, events as trtllm_events, guard as trtllm_guard, metrics as trtllm_metrics
from .. import Availability
from ..request import DEFAULT_CONTEXT_TOKENS, RequestCell, Slot, Step, Warm
from .guard import ENGINE, GuardRow, guard_failure, members, resolve

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
MIN_DRAIN_TIMEOUT_S = 1.0  # 5 x the dispatch threads' 0.2 s sleep (executor/proxy.py, executor/worker.py)
OPEN_SALT = "workbench-open-request"  # + a fresh id per open: the open request's blocks match nothing else
KV_MANAGERS = ("v1", "default")
V1_HASH = "v1_block_key"  # the 1.2 line's one event hash: BlockKeyHasher (kvCacheManager.cpp)
V2_HASH = "v2_sha256"  # the V2 manager's (PR #13589)
CACHED_TOKENS = "cached_tokens"  # the Warm source of 1.4's exact per-request reuse
PERF_BLOCKS = "perf_metrics"  # the Warm source of the perf metrics' block counts


# --------------------------------------------------------------------------- options and model facts


@dataclass(frozen=True)
class TrtLlmOptions(CellOptions):
    """``open_cell("trtllm", model, **options)`` keywords."""

    tokens_per_block: int = 32
    kv_budget_bytes: int | None = None
    kv_budget_tokens: int | None = None  # default: context_tokens × slots
    context_tokens: int | None = None  # max_seq_len; default min(model ceiling, 4096)
    enable_block_reuse: bool = True
    enable_partial_reuse: bool = True
    event_buffer_max_size: int = 1024
    host_cache_size: int | None = None
    dummy_weights: bool = False
    adapters: tuple[str, ...] = ()
    retention_priority: int = 100
    retention_duration_ms: int | None = None
    guided_decoding_backend: str | None = "xgrammar"
    connector: bool | str = False  # True or "record": the recording KV connector (the only kind there is)
    # "v1": pin KvCacheConfig(use_kv_cache_manager_v2=False) where the field exists (the blueprint's retention is V1's
    # mechanism); "default": leave the release's own (V2 on 1.4: per-request retention is not honoured there)
    kv_manager: str = "v1"
    slots: int = 1
    tokenizer: bool | None = None  # None: load it where the model directory ships tokenizer files

    def __post_init__(self) -> None:
        tpb = self.tokens_per_block
        if tpb < 1 or tpb & (tpb - 1):
            raise ValueError(f"tokens_per_block must be a power of two, got {tpb}")
        if self.kv_budget_bytes is not None and self.kv_budget_tokens is not None:
            raise ValueError("give kv_budget_bytes or kv_budget_tokens, not both")
        for name in ("kv_budget_bytes", "kv_budget_tokens", "context_tokens", "host_cache_size"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if self.event_buffer_max_size < 0:
            raise ValueError(f"event_buffer_max_size must be >= 0, got {self.event_buffer_max_size}")
        if self.slots < 1:
            raise ValueError(f"slots must be at least 1, got {self.slots}")
        if len(self.adapters) > 1:
            raise UnsupportedFeature("stacked LoRA adapters", ENGINE, "a request carries one LoRARequest")
        if self.connector and not self.enable_block_reuse:
            raise ValueError("the KV connector needs enable_block_reuse=True (TensorRT-LLM ignores it otherwise)")
        self._check_choices()
        Retention(self.retention_priority, self.retention_duration_ms)  # validates both

    def _check_choices(self) -> None:
        """The options that name one of a few choices."""
        if self.kv_manager not in KV_MANAGERS:
            raise ValueError(f"kv_manager must be one of {', '.join(KV_MANAGERS)}, got {self.kv_manager!r}")
        if self.guided_decoding_backend not in (None, "xgrammar", "llguidance"):
            raise ValueError(f"guided_decoding_backend must be 'xgrammar', 'llguidance' or None, "
                             f"got {self.guided_decoding_backend!r}")

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> "TrtLlmOptions":
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(options) - set(names))
        if unknown:
            raise TypeError(f"unknown trtllm option(s): {', '.join(unknown)}; valid: {', '.join(names)}")
        opts = dict(options)
        if "adapters" in opts:
            adapters = opts["adapters"]
            if isinstance(adapters, (str, os.PathLike)):
                adapters = [adapters]
            opts["adapters"] = tuple(os.fspath(a) for a in adapters)
        return cls(**opts)

    @property
    def features(self) -> frozenset[str]:
        """The guard features these options use."""
        on = {"core"}
        if self.guided_decoding_backend:
            on.add("guided")
        if self.adapters:
            on.add("lora")
        if self.connector:
            on.add("connector")
        return frozenset(on)

    @property
    def retention(self) -> Retention:
        return Retention(self.retention_priority, self.retention_duration_ms)


def _adapter_rank(path: str) -> int:
    try:
        return int(json.loads((Path(path) / "adapter_config.json").read_text())["r"])
    except (OSError, ValueError, KeyError, TypeError):
        return 64  # LoraConfig's own default


def _first_int(value: Any) -> int | None:
    if isinstance(value, list):
        value = value[0] if value else None
    return None if value is None else int(value)


# --------------------------------------------------------------------------- the cell


class TrtLlmCell(RequestCell):
    """A TensorRT-LLM cell. Open with :func:`workbench.cells.open_cell` ("trtllm", hf_dir, …)."""

    engine = ENGINE
    label = "TensorRT-LLM"
    package = "tensorrt_llm"
    c_functions: tuple[str, ...] = ()  # its C++ Executor is surveyed from headers and symbols instead
    surface_table = "version guard (workbench.cells.trtllm.guard.GUARD)"
    exact_sources = (CACHED_TOKENS,)
    prefill_now = False  # TensorRT-LLM has no prefill-only request: a suffix rides the next decode's prefill

    @classmethod
    def availability(cls) -> Availability:
        """Whether tensorrt_llm 1.2.x imports, matches the guard and has a GPU; never raises."""
        gpu = environment.gpus()
        details: dict[str, Any] = {"gpu": {k: gpu.get(k) for k in ("available", "devices", "driver", "reason")}}
        try:
            install = trtllm_guard.load()
        except EngineUnavailable as e:
            return Availability(ENGINE, False, None, e.reason, details)
        details["guard"] = [r.as_dict() for r in install.rows]
        release = install.release
        if release is not None:
            details["release"] = release.as_dict()
            older = [r for r in trtllm_guard.RELEASES if r.series < release.series]
            details["release_differences"] = {
                r.name: [{"field": f, "was": a, "now": b} for f, a, b in trtllm_guard.differences(r, release)]
                for r in older}
        if install.double:
            details["test_double"] = install.double
        problems = [] if release is not None else [trtllm_guard.version_reason(install.version)]
        if not gpu["available"]:
            problems.append(gpu["reason"] or "no NVIDIA GPU")
        if install.failing():
            problems.append(guard_failure(install.version, install.failing()))
        return Availability(ENGINE, not problems, install.version, "; ".join(problems) or None, details)

    @classmethod
    def surface_rows(cls) -> list[dict]:
        """The contract rows on the installed release, for ``surface.contract_mapping``."""
        return trtllm_guard.surface_rows()

    @classmethod
    def open(cls, model: str, **options: Any) -> "TrtLlmCell":
        """Open on a Hugging Face model directory; options are :class:`TrtLlmOptions` fields."""
        opts = TrtLlmOptions.from_options(options)
        install = trtllm_guard.load()
        refusal = install.refusal(opts.features)
        if refusal:  # the symbols the release lacks, where that is why: the engine's own word
            raise EngineUnavailable(ENGINE, refusal, tuple(r.symbol for r in install.failing(opts.features)))
        resolved = models.resolve(model)
        if resolved.kind != "hf":
            raise models.ModelSpecError(
                f"TensorRT-LLM runs Hugging Face model directories (config.json + weights, or dummy_weights=True); "
                f"{resolved.spec!r} is a {resolved.kind} model")
        cell = cls(install.module, resolved, models.hf_config(resolved.path), opts, install.rows)
        cell._double = install.double
        return cell

    def __init__(self, trt: ModuleType, model: models.ResolvedModel, config: Mapping[str, Any],
                 opts: TrtLlmOptions, guard: Sequence[GuardRow]) -> None:
        self._trt = trt
        self._guard = list(guard)
        self.model = model
        self.opts = opts
        self.version = str(trt.__version__)
        self.release = trtllm_guard.release_of(self.version)
        self._double: str | None = None
        self._kv_manager: dict[str, Any] = {}
        self._hash_algo: tuple[str, str] | None = None  # (algorithm, where it was read)
        self.geometry, self.context_ceiling = models.hf_geometry(config)  # KV dtype: the model's
        self._vocab_size = config.get("vocab_size")
        self._eos = _first_int(config.get("eos_token_id"))
        ceiling = self.context_ceiling or DEFAULT_CONTEXT_TOKENS
        self.context_tokens = opts.context_tokens or min(ceiling, DEFAULT_CONTEXT_TOKENS)
        if self.context_tokens > ceiling:
            raise ContextOverflow(self.context_tokens, ceiling, "model context")
        tpb = opts.tokens_per_block
        if opts.kv_budget_bytes is not None:
            budget = opts.kv_budget_bytes // self.geometry.bytes_per_token
        else:
            budget = opts.kv_budget_tokens or self.context_tokens * opts.slots
        self.kv_budget_tokens = budget // tpb * tpb
        if self.kv_budget_tokens < tpb:
            raise ValueError(f"the KV budget gives {budget} tokens, less than one block of {tpb}; raise it")
        self._use_tokenizer = (opts.tokenizer if opts.tokenizer is not None
                               else any((model.path / f).is_file() for f in TOKENIZER_FILES))
        self._events_on = opts.enable_block_reuse and opts.event_buffer_max_size > 0
        self._events: list[KvEvent] = []
        self._pool: tuple[int, str] | None = None  # (tokens, source) the engine reported for its pool
        self._submitted = False  # whether the current LLM has had a request (1.2 reports nothing before)
        self._open: dict[str, Any] = {}  # what the open request saw (kept out of the drains)
        self._stats_lock = threading.RLock()  # one drain of LLM.get_stats feeds the observer and the work count
        self._stats_pending: list[dict] = []  # drained for the work count, not yet handed to the observer
        self._work = trtllm_metrics.new_work()  # cumulative over every LLM this cell ran (slot switches included)
        self._kv_seen: dict[str, int] = {}  # the current LLM's kvCacheStats block counters as last read
        self._kv_stated: set[str] = set()  # the block counters any of this cell's LLMs ever stated
        self._open_log_spans: list[tuple[int, int]] = []  # connector-log entries of open requests
        self._begin(opts.slots)

    # ------------------------------------------------------------------ engine lifecycle

    def _start(self) -> None:
        """Create the LLM: KV budget in tokens, max_seq_len, perf metrics and stats, a retention-honouring manager."""
        trt, o = self._trt, self.opts
        kv_cls = trt.llmapi.KvCacheConfig
        kv: dict[str, Any] = dict(max_tokens=self.kv_budget_tokens, tokens_per_block=o.tokens_per_block,
                                  enable_block_reuse=o.enable_block_reuse, enable_partial_reuse=o.enable_partial_reuse,
                                  event_buffer_max_size=o.event_buffer_max_size, host_cache_size=o.host_cache_size)
        self._kv_manager = self._pick_kv_manager(kv_cls, kv)
        args: dict[str, Any] = dict(
            model=str(self.model.path), kv_cache_config=kv_cls(**kv), max_seq_len=self.context_tokens,
            # chunked prefill is off, so a whole prompt must fit one forward pass
            max_num_tokens=self.context_tokens, return_perf_metrics=True, enable_iter_perf_stats=True,
            skip_tokenizer_init=not self._use_tokenizer)
        if self._use_tokenizer and o.guided_decoding_backend:
            args["guided_decoding_backend"] = o.guided_decoding_backend
        if o.dummy_weights:
            args["load_format"] = "dummy"
        self._lora_request = None
        if o.adapters:
            path = o.adapters[0]
            args["lora_config"] = resolve(trt, "lora_helper.LoraConfig")(
                lora_dir=[path], max_lora_rank=_adapter_rank(path), max_loras=1, max_cpu_loras=1)
            self._lora_request = trt.llmapi.LoRARequest(lora_name=Path(path).name, lora_int_id=1, lora_path=path)
        if o.connector:
            self._tmp = self._tmp or tempfile.mkdtemp(prefix="workbench-trtllm-")
            self._connector = trtllm_connector.build_recording_connector(trt, Path(self._tmp) / "connector.jsonl")
            args["kv_connector_config"] = self._connector.config
        self._pool, self._submitted, self._kv_seen = None, False, {}
        self._llm = trt.LLM(**args)
        self._tokenizer = self._llm.tokenizer if self._use_tokenizer else None
        self._open_request()

    def _pick_kv_manager(self, kv_cls: Any, kv: dict[str, Any]) -> dict[str, Any]:
        """Pin V1 (``kv_manager="v1"``) where the release has the field, or leave the release's default; what was
        used, and how, for ``describe().extra["kv_cache_manager"]``."""
        release_default = self.release.kv_manager_default if self.release else "V1"
        if "use_kv_cache_manager_v2" not in members(kv_cls):
            return {"used": "V1", "how": "the release has one KV manager (no use_kv_cache_manager_v2 field)",
                    "release_default": release_default}
        declared = trtllm_guard.field_default(kv_cls, "use_kv_cache_manager_v2")
        if self.opts.kv_manager == "v1":
            kv["use_kv_cache_manager_v2"] = False  # the V2 manager ignores KvCacheRetentionConfig
            return {"used": "V1", "how": "pinned: KvCacheConfig(use_kv_cache_manager_v2=False)",
                    "release_default": release_default, "declared_default": repr(declared)}
        used = {True: "V2", False: "V1"}.get(declared, f"{declared!r}, resolved by the engine per model")
        return {"used": used, "how": "the release's default (kv_manager='default'; use_kv_cache_manager_v2 not set)",
                "release_default": release_default, "declared_default": repr(declared)}

    def _open_request(self) -> None:
        """One 1-token request under a salt of its own, then read what the engine reports.

        tensorrt_llm 1.2 has no event or stats to read before its first request (module docstring),
        and the ``created`` event or ``kvCacheStats`` carry the pool's real size. ``created``
        describes the pool, so it goes on to the first drain; the request's own events and stats
        (a partly filled block under the open salt) are the cell's, not a probe's: they stay out
        of the drains and are counted in ``describe().extra["open_request"]``.
        """
        token = self._eos if self._eos is not None else 0
        salt = f"{OPEN_SALT}/{uuid.uuid4().hex}"
        log_start = len(self._connector.read()) if self._connector else 0
        self._submit([token], self._sampling(1), streaming=False, key=salt, retain=(0, self.opts.retention)).result()
        events = self._engine_events(MIN_DRAIN_TIMEOUT_S)
        self._events.extend(e for e in events if e.kind == "created")
        stats = self._engine_stats(MIN_DRAIN_TIMEOUT_S, observed=False)
        self._open = {"salt": salt, "prompt_tokens": [token],
                      "created_events": sum(e.kind == "created" for e in events),
                      "kv_events_kept_out": [e.kind for e in events if e.kind != "created"],
                      # their event ids: a consumer must not read the cell's own drain as events the engine lost
                      "kv_event_ids_kept_out": [e.event_id for e in events if e.kind != "created"],
                      "iteration_stats_kept_out": len(stats)}
        if self._connector:
            span = (log_start, len(self._connector.read()))
            self._open_log_spans.append(span)
            self._open["connector_calls_kept_out"] = span[1] - span[0]

    def _stop(self) -> None:
        if self._llm is not None:
            llm, self._llm = self._llm, None
            llm.shutdown()

    def _prepare_switch(self, opts: TrtLlmOptions) -> None:
        """Refuse adapters the guard fails; keep the old engine's last events for the next drain."""
        failing = [r for r in self._guard if not r.ok and r.feature in opts.features]
        if failing:
            raise EngineUnavailable(ENGINE, guard_failure(self.version, failing), tuple(r.symbol for r in failing))
        self._events.extend(self._engine_events(MIN_DRAIN_TIMEOUT_S))

    def close(self) -> None:
        super().close()
        if self._connector is not None and os.environ.get(trtllm_connector.LOG_ENV) == str(self._connector.log_path):
            del os.environ[trtllm_connector.LOG_ENV]

    # ------------------------------------------------------------------ request plumbing

    def _chat_tokens(self, messages: list, *, continuation: bool) -> list[int]:
        tok = self._need_tokenizer("chat messages")
        ids = list(self._apply_template(messages, tokenize=True, add_generation_prompt=not continuation))
        bos = getattr(getattr(tok, "tokenizer", tok), "bos_token_id", None)
        return ids[1:] if continuation and ids and ids[0] == bos else ids

    @property
    def _granularity(self) -> int:
        return self.opts.tokens_per_block

    def _capacity_tokens(self) -> int:
        return self._pool[0] if self._pool else self.kv_budget_tokens

    def _slot_retention(self, requested: Retention | None) -> Retention:
        return requested or self.opts.retention

    def _retention(self, n_tokens: int, retention: Retention) -> Any:
        """One token range over the first ``n_tokens`` (end exclusive) at the retention's priority."""
        cfg = self._trt.llmapi.KvCacheRetentionConfig
        duration = None if retention.duration_ms is None else timedelta(milliseconds=retention.duration_ms)
        rng = cfg.TokenRangeRetentionConfig(token_start=0, token_end=n_tokens, priority=retention.priority,
                                            duration_ms=duration)
        return cfg(token_range_retention_configs=[rng])

    def _sampling(self, max_tokens: int, *, temperature: float = 0.0, top_p: float = 1.0, top_k: int = 0,
                  seed: int = 0, stop: Sequence[str] = (), json_schema: Mapping[str, Any] | None = None) -> Any:
        kw = self._sampling_keywords(max_tokens, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed,
                                     stop=stop, json_schema=json_schema)
        if json_schema is not None:
            if not self.opts.guided_decoding_backend:
                raise UnsupportedFeature("structured output", ENGINE, "open the cell with guided_decoding_backend set")
            kw["guided_decoding"] = self._trt.llmapi.GuidedDecodingParams(json=dict(json_schema))
        if self._tokenizer is None:  # without a tokenizer the LLM cannot find the end id itself
            kw["end_id"] = self._eos if self._eos is not None else -1
            kw["detokenize"] = False
        return self._trt.llmapi.SamplingParams(**kw)

    def _submit(self, tokens: list[int], sampling: Any, *, streaming: bool, key: str | None,
                retain: tuple[int, Retention]) -> Any:
        """One request: the slot's LoRA, the manifest-keyed salt, retention over the first ``retain[0]`` tokens."""
        self._submitted = True
        return self._llm.generate_async(
            tokens, sampling_params=sampling, lora_request=self._lora_request, streaming=streaming,
            kv_cache_retention_config=self._retention(*retain) if retain[0] else None, cache_salt=key)

    def _warm(self, tokens: list[int], key: str, retention: Retention | None, *, slot: int = 0) -> Warm:
        """A ``max_tokens=1`` request holding ``retention`` over ``tokens``; reuse from its perf metrics' blocks."""
        t0 = time.perf_counter()
        out = self._submit(tokens, self._sampling(1), streaming=False, key=key,
                           retain=(len(tokens), self._slot_retention(retention))).result()
        elapsed = time.perf_counter() - t0
        counters = trtllm_metrics.request_counters(out.outputs[0].request_perf_metrics, self.opts.tokens_per_block)
        blocks = trtllm_metrics.reused_tokens(counters, len(tokens))
        cached = _cached_tokens(out)
        if cached is None:
            return Warm.read(blocks, PERF_BLOCKS, counters, elapsed)
        # 1.4: the exact count answers; the blocks stay beside it as the second channel, a difference kept
        counters |= {"cached_tokens": cached, "block_reused_tokens": blocks,
                     "reuse_channels_differ": None if blocks is None else cached != blocks}
        return Warm.read(cached, CACHED_TOKENS, counters, elapsed)

    def _stream(self, prompt: list[int], st: Slot, sampling: dict[str, Any]) -> Iterator[Step]:
        """``generate_async(streaming=True)``: each output carries the whole sequence so far."""
        retain = (len(st.tokens), self._slot_retention(st.retention))
        result = self._submit(prompt, self._sampling(**sampling), streaming=True, key=st.key, retain=retain)
        n = 0
        for step in result:
            out = step.outputs[0]
            new, n = list(out.token_ids[n:]), len(out.token_ids)
            text = self._tokenizer is not None
            counters = trtllm_metrics.request_counters(out.request_perf_metrics, self.opts.tokens_per_block)
            cached = _cached_tokens(step)
            if cached is not None:
                counters["cached_tokens"] = cached
            yield Step(new, out.text_diff if text else "", out.text if text else "", out.finish_reason, counters)

    def _context_notes(self, st: Slot) -> list[str]:
        notes = [
            "reuse is engine-global radix-tree matching keyed by cache_salt; a slot is the cell's bookkeeping",
            "a dropped or divergent tail is bookkeeping only: stale blocks age out of the radix tree",
            "reuse counts are the request's exact cached_tokens, the perf-metrics blocks beside them"
            if st.counters.get("cached_tokens") is not None else
            f"reuse counts are perf-metrics blocks x {self.opts.tokens_per_block} tokens (estimates)",
        ]
        if st.counters.get("num_reused_blocks") is not None:
            notes.append(f"last request: reused {st.counters['num_reused_blocks']} blocks, "
                         f"missed {st.counters.get('num_missed_blocks')}")
        return notes

    # ------------------------------------------------------------------ the contract

    def describe(self) -> Description:
        self._check_open()
        g, o = self.geometry, self.opts
        capacity = self._capacity_tokens()
        gpu = environment.gpus()
        observers = ["request_counters", "iteration_stats"]
        if self._events_on:
            observers.insert(1, "kv_events")
        switchable = {}
        if self._connector is not None:
            observers.append("connector")
        elif all(r.ok for r in self._guard if r.feature == "connector") and o.enable_block_reuse:
            switchable["connector"] = "connector=True (the recording KV connector)"
        if self._lora_request is not None:
            observers.append("adapter_requests")
        return Description(
            engine=ENGINE, engine_version=self.version, model=self.model.name, manifest_digest=self.manifest.digest,
            geometry=g, context_tokens=self.context_tokens, kv_capacity_tokens=capacity,
            kv_capacity_bytes=capacity * g.bytes_per_token, block_tokens=o.tokens_per_block, slots=len(self._slots),
            observers=tuple(observers), switchable=switchable,
            extra={
                "vocab_size": self._vocab_size,
                "kv_budget_tokens": self.kv_budget_tokens,
                "kv_dtype": "the model's dtype (KvCacheConfig.dtype='auto'); geometry from config.json",
                "kv_capacity_source": self._pool[1] if self._pool else (
                    "configured KvCacheConfig.max_tokens: the engine reported neither a created KV event nor "
                    "kvCacheStats after the open request"),
                "open_request": dict(self._open),
                "context_ceiling": self.context_ceiling,
                "gpu_devices": gpu.get("devices", []),
                "tokenizer": self._tokenizer is not None,
                "dummy_weights": o.dummy_weights,
                "adapters": list(o.adapters),
                "enable_block_reuse": o.enable_block_reuse,
                "enable_partial_reuse": o.enable_partial_reuse,
                "event_buffer_max_size": o.event_buffer_max_size,
                "release": self.release.name if self.release else None,
                "kv_cache_manager": dict(self._kv_manager),
                # read from the events where they state it (1.4); else the release's one block key (1.2)
                "kv_cache_hash_algo": self._algo()[0],
                "kv_cache_hash_algo_source": self._algo()[1],
                "host_cache_size": o.host_cache_size,
                "retention": {"priority": o.retention_priority, "duration_ms": o.retention_duration_ms},
                "prefill": "deferred: prefill_suffix is bookkeeping that rides the next decode's prefill",
                "reuse_counters": (self.release.request_reuse if self.release else
                                   "request_perf_metrics.kv_cache_metrics blocks x tokens_per_block (estimates)"),
                "connector": "recording" if self._connector is not None else "off: open with connector=True to record",
            } | ({"test_double": self._double} if self._double else {}),
        )

    def _algo(self) -> tuple[str, str]:
        """The event hash algorithm and where it was read: the engine's events where they stated one; else what
        the manager in use makes (V1's block key on 1.2, which names none)."""
        if self._hash_algo:
            return self._hash_algo
        if self._kv_manager.get("used") == "V2":
            return V2_HASH, "the V2 manager (PR #13589); no event has stated it yet"
        return V1_HASH, "the V1 manager's one block key (BlockKeyHasher); no event stated one"

    def embed(self, texts: Iterable[str]) -> list[list[float]]:
        raise UnsupportedFeature("embed", ENGINE, "the LLM API generates text; it exposes no embeddings")

    # ------------------------------------------------------------------ observers

    def _engine_events(self, timeout_s: float) -> list[KvEvent]:
        """Read (and so drain) the engine's KV events; nothing before the first request, where 1.2 asserts."""
        if not self._events_on or self._llm is None or not self._submitted:
            return []
        raw = self._llm.get_kv_cache_events(timeout=max(timeout_s, MIN_DRAIN_TIMEOUT_S))
        events = trtllm_events.parse_events(raw)
        said = trtllm_events.hash_algo(events)
        if said:
            self._hash_algo = (said, "the engine's KV events (hash_algo)")
        for blocks in trtllm_events.capacity_blocks(events).values():
            self._pool = (blocks * self.opts.tokens_per_block, "created KV event")
        return events

    def _engine_stats(self, timeout_s: float, *, observed: bool = True) -> list[dict]:
        """Read (and so drain) the engine's iteration stats; ``LLM.get_stats`` gives ``[]`` before the first request.
        Every entry is folded into the cell's work count (:meth:`engine_work`); those ``observed`` wait for the
        ``iteration_stats`` observer's next drain, so the two readers share the one destructive read."""
        with self._stats_lock:
            if self._llm is None or not self._submitted:
                return []
            raw = self._llm.get_stats(timeout=max(timeout_s, MIN_DRAIN_TIMEOUT_S))
            stats = trtllm_metrics.parse_iteration_stats(raw)
            trtllm_metrics.fold_work(self._work, self._kv_seen, stats)
            self._kv_stated |= set(self._kv_seen)
            for s in stats:
                cap = trtllm_metrics.kv_stats_capacity(s)
                if cap and not self._pool:
                    self._pool = (cap[0] * cap[1], "iteration stats kvCacheStats")
            if observed:
                self._stats_pending.extend(stats)
            return stats

    def engine_work(self) -> dict[str, int] | None:
        """What the engine itself counted of its work, cumulative over this cell's life, from its iteration stats
        (:func:`.metrics.fold_work`: iterations, context tokens computed, requests completed, ``kvCacheStats``' block
        counters); ``reused_blocks`` only where the stats carry ``reusedBlocks``. A request refused before dispatch
        moves none of it. None when the engine cannot be read (shut down)."""
        with self._stats_lock:
            try:
                self._engine_stats(MIN_DRAIN_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - an engine that cannot report (shut down, broken) is no reading
                return None
            work = dict(self._work)
            if "reusedBlocks" not in self._kv_stated:
                work.pop("reused_blocks")
            return work

    def drain_kv_events(self, timeout_s: float = 0.0) -> list[KvEvent]:
        """Every KV event since the last drain, oldest first (``kv_events`` observer).

        The engine's read waits at least :data:`MIN_DRAIN_TIMEOUT_S`; an event that reaches the
        engine's queue after a drain appears in the drain after the next request.
        """
        self._check_open()
        events, self._events = self._events + self._engine_events(timeout_s), []
        return events

    def drain_iteration_stats(self, timeout_s: float = 0.0) -> list[dict]:
        """Iteration stats since the last drain (``iteration_stats`` observer; ``LLM.get_stats`` drains)."""
        self._check_open()
        with self._stats_lock:
            self._engine_stats(timeout_s)
            stats, self._stats_pending = self._stats_pending, []
        return stats

    def connector_log(self) -> list[dict]:
        """Every call the recording KV connector saw (``connector`` observer; needs connector=True at open).

        The calls of the cell's open requests are left out, as their KV events are.
        """
        return [e for i, e in enumerate(super().connector_log())
                if not any(a <= i < b for a, b in self._open_log_spans)]




def _cached_tokens(result: Any) -> int | None:
    """1.3+: the request's exact cached prompt tokens (``cached_tokens`` on its result, or on its output); None
    where the release has no such field (1.2)."""
    for holder in (result, *(getattr(result, "outputs", None) or ())[:1]):
        value = getattr(holder, "cached_tokens", None)
        if value is not None:
            return int(value)
    return None


__all__ = [
    "KV_MANAGERS",
    "MIN_DRAIN_TIMEOUT_S",
    "TrtLlmCell",
    "TrtLlmOptions",
]
