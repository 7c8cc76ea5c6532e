"""The TensorRT-LLM version guard: the one import of ``tensorrt_llm``, the releases the workbench knows, and the one
table of what is used on them.

The cell, ``workbench doctor`` and the ``surface.contract_mapping`` probe all read the installed
release through this module: :func:`import_trtllm` is the only place ``tensorrt_llm`` is imported
(tests replace it to hand in a double), :data:`RELEASES` holds one :class:`Release` profile per
release line the cell is written against (1.2 and 1.4; what each does differently, with the source
it was read from), :data:`GUARD` lists every symbol and every parameter, field and attribute the
cell uses, and :func:`load` checks an install against its profile and the table. A version of no
known line (1.3.0rcN, never finalised; anything newer than the newest profile) is refused by name,
with what to do.

Differences of 1.4 the table detects (each a field of the 1.4 profile too):

* ``KvCacheConfig.use_kv_cache_manager_v2`` defaults to V2 there (``False`` in 1.2), and the V2 KV
  manager ignores ``KvCacheRetentionConfig`` (TensorRT-LLM issue #16251; ``test_connector_priorities``
  in ``tests/integration/defs/llmapi/test_llm_api_connector.py`` calls it a known gap). The row notes
  the changed default; the cell pins V1 unless asked for the release's default (``kv_manager``).
* The KV connector base classes moved from ``_torch.pyexecutor.kv_cache_connector`` to
  ``_torch.pyexecutor.connectors.kv_cache_connector``: ``ok`` on a 1.4 profile, ``moved`` on 1.2.
* ``KvCacheConfig.kv_events_config`` (the ZMQ push path, ``KVEventsConfig``) and the request result's
  exact ``cached_tokens`` exist; ``POST /kv_cache_events`` goes through ``KvEventFanout``.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Iterable

from ...engine import EngineUnavailable
from .connector import BASE_MODULE as CONNECTOR_MODULE
from .connector import LATER_BASE_MODULE as LATER_CONNECTOR_MODULE

ENGINE = "trtllm"
_CUDA_STEPS = ("on Linux x86_64/aarch64 with an NVIDIA GPU as NVIDIA's TensorRT-LLM installation guide says: CUDA 13 "
               "toolkit, torch from PyTorch's cu130 wheel index, libopenmpi-dev, then ")


@dataclass(frozen=True)
class Release:
    """What the cell knows of one TensorRT-LLM release line: how to install it, and each behaviour the workbench
    depends on that differs between lines, with the source it was read from (``sources``). Exposed as data
    (:data:`RELEASES`) so that whatever checks that "a version belongs to its engine" reads the same profiles
    the cell opens with."""

    series: tuple[int, int]
    written_against: str  # the versions whose sources the profile was read from
    install: str  # the pip line (PyPI holds redirect stubs to NVIDIA's wheels)
    kv_manager_default: str  # "V1" | "V2": what KvCacheConfig() gives when the cell does not pin it
    connector_module: str  # where the KV connector base classes live (under tensorrt_llm.)
    http_events: str  # what POST /kv_cache_events drains
    push_events: str  # the ZMQ push path, or "none"
    hash_algo: str  # how the event hash algorithm is stated
    request_reuse: str  # the per-request reuse channels
    retention_default: str  # what KvCacheRetentionConfig does under the default manager
    sources: tuple[str, ...] = ()
    # (field, what of it the reference does not say or marks UNVERIFIED): check these on the installed wheel
    unverified: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        return f"{self.series[0]}.{self.series[1]}"

    @property
    def install_hint(self) -> str:
        return (f"install the 'trtllm' extra (tensorrt_llm {self.name}.x) {_CUDA_STEPS}'{self.install}' (the PyPI "
                f"entry is a stub that redirects to NVIDIA's wheels), or run inside NVIDIA's NGC TensorRT-LLM "
                f"{self.name} release container")

    def as_dict(self) -> dict:
        return dataclasses.asdict(self) | {"name": self.name}


PROFILE_FIELDS = ("kv_manager_default", "connector_module", "http_events", "push_events", "hash_algo",
                  "request_reuse", "retention_default")
"""The fields of a :class:`Release` that say how the engine behaves (what ``workbench doctor`` compares)."""

RELEASES: tuple[Release, ...] = (
    Release((1, 2), "1.2.0 and 1.2.1", "pip install tensorrt_llm==1.2.*", "V1",
            "_torch.pyexecutor.kv_cache_connector",
            "every event of the in-process queue (created, stored, removed, updated), drained by each POST",
            "none", "v1_block_key, the one block key (GET /server_info names none)",
            "request_perf_metrics.kv_cache_metrics blocks x tokens_per_block (block-granular estimates)",
            "honoured by V1: priority and duration_ms per token range",
            ("tensorrt_llm/llmapi/llm_args.py (KvCacheConfig.use_kv_cache_manager_v2 = False)",
             "tensorrt_llm/_torch/pyexecutor/kv_cache_connector.py",
             "tensorrt_llm/serve/openai_server.py (get_kv_cache_events drains LLM.get_kv_cache_events_async)",
             "cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp (BlockKeyHasher)")),
    Release((1, 4), "1.4.0rc1 (docs to 1.4.0rc4)", 'pip install --pre "tensorrt_llm>=1.4.0rc1,<1.5"', "V2",
            "_torch.pyexecutor.connectors.kv_cache_connector",
            "KvEventFanout.drain_http_buffer: stored and removed of the largest window only (created swallowed at "
            "start, updated dropped; a bounded deque), an event_id gap becoming all_cleared for subscribers only",
            "KvCacheConfig.kv_events_config = KVEventsConfig(publisher='zmq', endpoint=…): vLLM's wire format",
            "stated on V2's events (hash_algo, with layer_group_id: PR #13589) and in GET /server_info "
            "(kv_cache_hash_algo: v1_block_key, v2_sha256 or v2_sha256_64); on V1's events UNVERIFIED",
            "cached_tokens on the request result (exact), beside the perf metrics' blocks",
            "ignored by the default V2 manager (no per-request retention); honoured only with V1 pinned",
            ("release page v1.4.0rc1: 'Default to KV cache manager V2 ... (BREAKING) #17495'",
             "tensorrt_llm/_torch/pyexecutor/connectors/kv_cache_connector.py",
             "tensorrt_llm/serve/kv_event_fanout.py (KvEventFanout._is_routable_event, _publish)",
             "PR #13589 (V2 events: hash_algo, layer_group_id)", "issue #16251 (V2: no per-request retention)",
             "ai-dynamo/dynamo#13567 (cached_tokens on the result, 1.3.0rc23)"),
            (("kv_manager_default", "V2 is release v1.4.0rc1's word (#17495, 'auto' → True); which default 1.4.0rc4 "
                                    "ships is UNVERIFIED (tensorrt-llm-after-1.2.md §1b): read "
                                    "KvCacheConfig().use_kv_cache_manager_v2 on the wheel"),
             ("hash_algo", "the reference has hash_algo on V2's events only (PR #13589); whether 1.4's V1 events "
                           "state v1_block_key is not said (UNVERIFIED), and which of v2_sha256 (32-byte hex) and "
                           "v2_sha256_64 (its first 8 bytes, an integer) V2's events name is not said either "
                           "(event-plane.md §A3)"))),
)
"""The release lines the cell is written against, oldest first: one profile each."""

UNKNOWN_LINES = {
    (1, 3): "the 1.3 line was never finalised (1.3.0rc0 to rc29 only, no release notes): its candidates sit between "
            "the two profiles and match neither",
}
"""Lines the workbench knows it does not support, with why."""


def known_versions() -> str:
    """The release lines the cell takes, as a reader names them: ``1.2.x, 1.4.x``."""
    return ", ".join(f"{r.name}.x" for r in RELEASES)


def release_of(version: str) -> Release | None:
    """The profile of ``version``'s release line; None for a version of no known line."""
    m = re.match(r"(\d+)\.(\d+)", version)
    series = (int(m[1]), int(m[2])) if m else None
    return next((r for r in RELEASES if r.series == series), None)


def newest() -> Release:
    return RELEASES[-1]


def differences(old: Release, new: Release) -> list[tuple[str, str, str]]:
    """``(field, old value, new value)`` for each behaviour that differs between two profiles."""
    return [(f, getattr(old, f), getattr(new, f)) for f in PROFILE_FIELDS if getattr(old, f) != getattr(new, f)]


SUPPORTED_SERIES = tuple(r.series for r in RELEASES)
WRITTEN_AGAINST = "; ".join(f"{r.name}: {r.written_against}" for r in RELEASES)
INSTALL_HINT = (f"install the 'trtllm' extra (tensorrt_llm {known_versions()}) {_CUDA_STEPS}"
                + " or ".join(f"'{r.install}'" for r in RELEASES)
                + " (the PyPI entry is a stub that redirects to NVIDIA's wheels), or run inside NVIDIA's NGC "
                "TensorRT-LLM release container")
FEATURES = ("core", "guided", "lora", "connector", "push")


def import_trtllm() -> ModuleType:
    """The only place the workbench imports tensorrt_llm (tests replace it to hand in a double)."""
    return importlib.import_module("tensorrt_llm")


@dataclass(frozen=True)
class GuardSpec:
    """One dependency: a symbol under ``tensorrt_llm`` and the parameters/fields/attributes used on it."""

    symbol: str
    requires: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()  # used only where present
    feature: str = "core"  # "core", or the option that needs it: "guided", "lora", "connector"
    why: str = ""
    defaults: tuple[tuple[str, Any], ...] = ()  # (field, 1.2 default): a later default is noted, not failed
    moved_to: str | None = None  # where a later release keeps the symbol
    since: tuple[int, int] | None = None  # the release line that added the symbol: absent before it is no fault


@dataclass(frozen=True)
class GuardRow:
    """The installed release against one :class:`GuardSpec`."""

    symbol: str
    feature: str
    ok: bool
    status: str  # "ok" | "missing" | "changed" | "moved" | "not yet" (a symbol of a later line, absent as expected)
    missing: tuple[str, ...] = ()
    detail: str = ""
    why: str = ""

    @property
    def name(self) -> str:
        """The symbol without the package prefix (``llmapi.KvCacheConfig``)."""
        return self.symbol.split(".", 1)[1] if "." in self.symbol else self.symbol

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


GUARD: tuple[GuardSpec, ...] = (
    GuardSpec("__version__", why="version pin (1.2.x) and every finding's fingerprint"),
    GuardSpec("LLM", ("generate_async", "get_kv_cache_events", "get_stats", "shutdown", "tokenizer"),
              why="the LLM API entry point"),
    GuardSpec("LLM.generate_async",
              ("inputs", "sampling_params", "lora_request", "streaming", "kv_cache_retention_config", "cache_salt"),
              why="warm-up, streaming decode, retention, manifest salt, LoRA"),
    GuardSpec("LLM.get_kv_cache_events", ("timeout",), why="kv_events observer"),
    GuardSpec("LLM.get_stats", ("timeout",), why="iteration_stats observer"),
    GuardSpec("llmapi.llm_args.TorchLlmArgs",
              ("model", "skip_tokenizer_init", "kv_cache_config", "max_seq_len", "max_num_tokens",
               "return_perf_metrics", "enable_iter_perf_stats", "load_format"),
              why="LLM(**kwargs) keywords (unknown keywords are rejected)"),
    GuardSpec("llmapi.llm_args.TorchLlmArgs", ("guided_decoding_backend",), feature="guided",
              why="structured output backend"),
    GuardSpec("llmapi.llm_args.TorchLlmArgs", ("lora_config",), feature="lora", why="LoRA adapters"),
    GuardSpec("llmapi.llm_args.TorchLlmArgs", ("kv_connector_config",), feature="connector",
              why="recording KV connector"),
    GuardSpec("llmapi.KvCacheConfig",
              ("max_tokens", "tokens_per_block", "enable_block_reuse", "enable_partial_reuse",
               "event_buffer_max_size", "host_cache_size"),
              optional=("use_kv_cache_manager_v2", "kv_events_config"), defaults=(("use_kv_cache_manager_v2", False),),
              why="KV budget in tokens, block size, reuse, events, host offload; V2 manager ignores retention; "
                  "kv_events_config: the push path (1.4)"),
    GuardSpec("llmapi.KVEventsConfig", ("enable_kv_cache_events", "publisher", "endpoint"), feature="push",
              since=(1, 4), why="KV events pushed over ZMQ in vLLM's wire format (1.4; created and updated too)"),
    GuardSpec("executor.result.GenerationResult", ("outputs",), optional=("cached_tokens",),
              why="a request's result: its outputs; cached_tokens, exact per-request reuse (1.3+)"),
    GuardSpec("llmapi.KvCacheRetentionConfig",
              ("token_range_retention_configs", "decode_retention_priority", "decode_duration_ms",
               "TokenRangeRetentionConfig"),
              why="EnsurePrefix retention"),
    GuardSpec("llmapi.KvCacheRetentionConfig.TokenRangeRetentionConfig",
              ("token_start", "token_end", "priority", "duration_ms"), why="EnsurePrefix retention range"),
    GuardSpec("llmapi.SamplingParams",
              ("max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "end_id", "detokenize",
               "guided_decoding", "return_perf_metrics"),
              why="decode and warm-up sampling"),
    GuardSpec("llmapi.GuidedDecodingParams", ("json",), feature="guided", why="json_schema decode"),
    GuardSpec("llmapi.LoRARequest", ("lora_name", "lora_int_id", "lora_path"), feature="lora",
              why="per-request adapter"),
    GuardSpec("lora_helper.LoraConfig", ("lora_dir", "max_lora_rank", "max_loras", "max_cpu_loras"),
              feature="lora", why="adapters loaded on the LLM"),
    GuardSpec("llmapi.llm_args.KvCacheConnectorConfig",
              ("connector_module", "connector_scheduler_class", "connector_worker_class"), feature="connector",
              why="recording KV connector config"),
    GuardSpec(f"{CONNECTOR_MODULE}.KvCacheConnectorScheduler",
              ("build_connector_meta", "get_num_new_matched_tokens", "request_finished", "update_state_after_alloc"),
              feature="connector", why="recording connector scheduler base",
              moved_to=f"{LATER_CONNECTOR_MODULE}.KvCacheConnectorScheduler"),
    GuardSpec(f"{CONNECTOR_MODULE}.KvCacheConnectorWorker",
              ("register_kv_caches", "start_load_kv", "wait_for_layer_load", "save_kv_layer", "wait_for_save",
               "get_finished"),
              feature="connector", why="recording connector worker base",
              moved_to=f"{LATER_CONNECTOR_MODULE}.KvCacheConnectorWorker"),
)
"""Every tensorrt_llm symbol and signature the cell depends on (1.2 line). ``workbench doctor`` prints it."""


def resolve(module: ModuleType, dotted: str) -> Any | None:
    """``module.<dotted>``, importing submodules that are not attributes yet; None when absent."""
    obj: Any = module
    prefix = module.__name__
    for part in dotted.split("."):
        prefix = f"{prefix}.{part}"
        try:
            obj = getattr(obj, part)
            continue
        except AttributeError:
            if not isinstance(obj, ModuleType):
                return None
        try:
            obj = importlib.import_module(prefix)
        except Exception:  # noqa: BLE001 - a broken submodule is as absent as a missing one
            return None
    return obj


def members(obj: Any) -> set[str]:
    """Names usable on ``obj``: pydantic/dataclass fields, call parameters, attributes."""
    names = set(getattr(obj, "model_fields", None) or ())
    if isinstance(obj, type) and dataclasses.is_dataclass(obj):
        names |= {f.name for f in dataclasses.fields(obj)}
    if callable(obj):
        try:
            names |= set(inspect.signature(obj).parameters)
        except (TypeError, ValueError):  # C++ bindings often have no introspectable signature
            pass
    return names | {n for n in dir(obj) if not n.startswith("__")}


_NO_DEFAULT = object()


def field_default(obj: Any, name: str) -> Any:
    """The declared default of field ``name`` on a pydantic model or dataclass (sentinel when unknown)."""
    info = (getattr(obj, "model_fields", None) or {}).get(name)
    if info is not None:
        return getattr(info, "default", _NO_DEFAULT)
    if isinstance(obj, type) and dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            if f.name == name:
                return f.default
    return _NO_DEFAULT


def _check(module: ModuleType, spec: GuardSpec, release: Release | None) -> GuardRow:
    name = f"{module.__name__}.{spec.symbol}"
    obj = resolve(module, spec.symbol)
    line = release.name if release else "this release"
    if obj is None and spec.moved_to and (moved := resolve(module, spec.moved_to)) is not None:
        where = f"{module.__name__}.{spec.moved_to}"
        if release is None or not spec.moved_to.startswith(release.connector_module):
            return GuardRow(name, spec.feature, False, "moved", spec.requires,
                            f"moved to {where} (the 1.4 layout), which the {line} profile does not expect", spec.why)
        obj, spec = moved, dataclasses.replace(spec, symbol=spec.moved_to)
        found_at = f"at {where} (the {line} layout)"
    elif obj is None:
        if spec.since and release and release.series < spec.since:
            return GuardRow(name, spec.feature, True, "not yet", (),
                            f"absent, as in every {line} release (added in {spec.since[0]}.{spec.since[1]})", spec.why)
        return GuardRow(name, spec.feature, False, "missing", spec.requires, "not found", spec.why)
    else:
        found_at = ""
    have = members(obj)
    missing = tuple(r for r in spec.requires if r not in have)
    if missing:
        return GuardRow(name, spec.feature, False, "changed", missing, f"changed: lacks {', '.join(missing)}",
                        spec.why)
    notes = [found_at] if found_at else []
    notes += [f"optional {o} absent (not used)" for o in spec.optional if o not in have]
    for fname, expected in spec.defaults:
        found = field_default(obj, fname) if fname in have else _NO_DEFAULT
        if found is not _NO_DEFAULT and found != expected:
            notes.append(f"{fname} defaults to {found!r} here ({expected!r} in 1.2); the cell sets {expected!r} "
                         "unless opened with kv_manager='default'")
    return GuardRow(name, spec.feature, True, "ok", (), "; ".join(notes), spec.why)


def check_guard(module: ModuleType) -> list[GuardRow]:
    """Check every :data:`GUARD` row against an imported tensorrt_llm (or anything shaped like it), by the profile
    of its release line (none for an unknown line: every later layout is then a move it does not expect)."""
    release = release_of(str(getattr(module, "__version__", "")))
    return [_check(module, spec, release) for spec in GUARD]


def version_supported(version: str) -> bool:
    return release_of(version) is not None


def guard_failure(version: str, rows: Iterable[GuardRow]) -> str:
    """One reason naming each missing, changed or moved symbol."""
    parts = "; ".join(f"{r.symbol} {r.detail}" for r in rows)
    release = release_of(version)
    line = f"the {release.name} profile ({release.written_against})" if release else known_versions()
    return (f"tensorrt_llm {version} does not match the cell's version guard ({parts}); "
            f"the cell is written against tensorrt_llm {line}")


def version_reason(version: str) -> str:
    """Why ``version`` is refused, by name, and what to do: a line known to be unsupported says why; anything else
    is a release the workbench does not know yet."""
    m = re.match(r"(\d+)\.(\d+)", version)
    series = (int(m[1]), int(m[2])) if m else None
    why = UNKNOWN_LINES.get(series) if series else None
    if why is None:
        newer = series is not None and series > newest().series
        why = ("a release the workbench does not know yet" if newer else
               "not a tensorrt_llm release version" if series is None else "older than every profile")
    return (f"tensorrt_llm {version} is installed: {why}. The cell knows {known_versions()} "
            f"({WRITTEN_AGAINST}); a version bump re-runs certification, so {version} is refused, not guessed at: "
            f"install a known release ({INSTALL_HINT}), or read the new release's changes and add its profile to "
            "workbench.cells.trtllm.guard.RELEASES")


def import_failure(e: BaseException) -> str:
    """Why tensorrt_llm did not import: not installed, or installed and broken (CUDA, MPI, torch)."""
    if isinstance(e, ModuleNotFoundError) and (e.name or "").split(".")[0] == "tensorrt_llm":
        return f"tensorrt_llm is not installed: {INSTALL_HINT}"
    return (f"tensorrt_llm is installed but failed to import ({type(e).__name__}: {e}); "
            f"a CUDA, MPI or torch mismatch is the usual cause: {INSTALL_HINT}")


@dataclass(frozen=True)
class Install:
    """An imported tensorrt_llm, its version and its guard rows."""

    module: ModuleType
    version: str
    rows: tuple[GuardRow, ...]

    @property
    def release(self) -> Release | None:
        """The profile of the installed release line (None: a line the workbench does not know)."""
        return release_of(self.version)

    @property
    def double(self) -> str | None:
        """What the install says of itself where it is a test double standing for tensorrt_llm (its
        ``__test_double__``); None for tensorrt_llm itself. A finding made on one never settles a claim."""
        said = getattr(self.module, "__test_double__", None)
        return str(said) if said else None

    def failing(self, features: Iterable[str] = ("core",)) -> list[GuardRow]:
        wanted = set(features)
        return [r for r in self.rows if not r.ok and r.feature in wanted]

    def refusal(self, features: Iterable[str] = ("core",)) -> str | None:
        """Why the cell cannot use this install for ``features`` (version pin, then guard), or None."""
        if not version_supported(self.version):
            return version_reason(self.version)
        failing = self.failing(features)
        return guard_failure(self.version, failing) if failing else None


def load() -> Install:
    """Import tensorrt_llm and check it; :class:`EngineUnavailable` with the reason when it does not import."""
    try:
        module = import_trtllm()
    except Exception as e:  # noqa: BLE001 - a broken CUDA/MPI/torch install raises anything at import
        raise EngineUnavailable(ENGINE, import_failure(e)) from e
    return Install(module, str(getattr(module, "__version__", "unknown")), tuple(check_guard(module)))


# --------------------------------------------------------------------------- surface (static)

# The guard rows each contract row (``surface.contract_mapping``) relies on:
# ``symbol`` means every guard row of that symbol, ``symbol:feature`` only the row for that feature
# (``llmapi.llm_args.TorchLlmArgs`` has one row per feature).
SURFACE: dict[str, tuple[str, ...]] = {
    "contract.manifest": ("LLM.generate_async",),
    "contract.ensure_prefix": ("LLM.generate_async", "llmapi.KvCacheRetentionConfig",
                               "llmapi.KvCacheRetentionConfig.TokenRangeRetentionConfig"),
    "contract.prefill_suffix": ("LLM.generate_async",),
    "contract.decode": ("LLM.generate_async", "llmapi.SamplingParams", "llmapi.GuidedDecodingParams",
                        "llmapi.llm_args.TorchLlmArgs:guided"),
    "contract.explain_context": ("LLM.get_kv_cache_events",),
    "contract.snapshot": ("llmapi.llm_args.KvCacheConnectorConfig", "llmapi.llm_args.TorchLlmArgs:connector",
                          "_torch.pyexecutor.kv_cache_connector.KvCacheConnectorWorker"),
    "contract.describe": ("llmapi.KvCacheConfig", "llmapi.llm_args.TorchLlmArgs:core"),
    "contract.embed": (),  # mapped to ErrUnsupportedFeature: nothing to find
    "contract.lora": ("llmapi.LoRARequest", "lora_helper.LoraConfig", "llmapi.llm_args.TorchLlmArgs:lora"),
    "contract.slot_switch": ("LLM",),
    "contract.overflow": ("llmapi.llm_args.TorchLlmArgs:core",),
}


NOT_DECLARED = "(not declared)"  # a pinned field without a declared default: recorded, so its disappearance is churn


def surface_rows() -> list[dict]:
    """One row per contract claim (:data:`SURFACE`), then one per guard row (every row, none folded into another);
    :class:`EngineUnavailable` with the reason when tensorrt_llm does not import."""
    install = load()
    rows = []
    for claim, refs in SURFACE.items():
        missing = []
        for ref in refs:
            symbol, _, feature = ref.partition(":")
            matched = [r for r in install.rows if r.name == symbol and feature in ("", r.feature)]
            missing += [f"{ref} ({r.detail})" for r in matched if not r.ok] if matched else [f"{ref} (not in the guard)"]
        rows.append({"claim": claim, "mechanism": ", ".join(refs) or "ErrUnsupportedFeature",
                     "mechanism_count": len(refs), "ok": not missing,
                     "missing": missing, "version": install.version})
    rows += [{"guard": r.name, "feature": r.feature, "ok": r.ok, "status": r.status, "missing": list(r.missing),
              "detail": r.detail, "version": install.version, "signature": signature(install.module, spec)}
             for spec, r in zip(GUARD, install.rows, strict=True)]
    return rows


def signature(module: ModuleType, spec: GuardSpec) -> dict:
    """What the guard read on one entry point, as a comparable record: where the symbol was found, which of
    the names the cell uses it has, and the declared defaults of the fields the cell pins."""
    at, obj = spec.symbol, resolve(module, spec.symbol)
    if obj is None and spec.moved_to:
        at, obj = spec.moved_to, resolve(module, spec.moved_to)
    if obj is None:
        return {"at": None, "names": {}, "defaults": {}}
    have = members(obj)
    defaults = {f: field_default(obj, f) if f in have else NOT_DECLARED for f, _ in spec.defaults}
    return {"at": at, "names": {n: n in have for n in (*spec.requires, *spec.optional)},
            "defaults": {f: NOT_DECLARED if d is NOT_DECLARED or type(d) is object else repr(d)  # object(): not declared
                         for f, d in defaults.items()}}


__all__ = [
    "ENGINE",
    "FEATURES",
    "GUARD",
    "GuardRow",
    "GuardSpec",
    "INSTALL_HINT",
    "Install",
    "PROFILE_FIELDS",
    "RELEASES",
    "Release",
    "UNKNOWN_LINES",
    "differences",
    "known_versions",
    "newest",
    "release_of",
    "NOT_DECLARED",
    "SURFACE",
    "SUPPORTED_SERIES",
    "WRITTEN_AGAINST",
    "check_guard",
    "guard_failure",
    "import_failure",
    "import_trtllm",
    "load",
    "members",
    "resolve",
    "signature",
    "surface_rows",
    "version_reason",
    "version_supported",
]
