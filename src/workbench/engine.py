"""The engine layer: the mechanisms each engine offers, as the probes see them.

This is not modeld's transport contract (that is :mod:`workbench.transport`, the Go interface
``runtime/transport/session.go`` as code). It is the layer under it: the right-hand column of the blueprint's
contract-mapping table, the engine mechanisms a contract operation maps onto. Every engine is wrapped in a
*cell* that implements :class:`Cell`; probes talk only to this protocol (plus the optional observers a cell
announces), so one probe runs unchanged on llama.cpp, vLLM and TensorRT-LLM. Operation names follow the
blueprint's rows (EnsurePrefix, PrefillSuffix, Decode, ExplainContext, Snapshot/Restore, Describe, Embed), but
the arguments are the engine's: token ids, a slot, a salt, a retention; the session adapters of
:mod:`workbench.transport` render modeld's text-plus-manifest input down to them.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence, Union, runtime_checkable

class _Words(str, Enum):
    """A closed vocabulary of plain strings: members equal, hash and print as their values, so a member and
    the string it stands for are interchangeable in comparisons, dict keys, JSON and f-strings."""

    def __str__(self) -> str:
        return str(self.value)

    def __hash__(self) -> int:
        return hash(self.value)

    @classmethod
    def check(cls, value: str, what: str) -> str:
        """``value`` as the plain string of one member; a ValueError naming the members where it is none."""
        try:
            return cls(value).value
        except ValueError:
            raise ValueError(f"{what} must be one of {', '.join(m.value for m in cls)}, got {value!r}") from None


class Verdict(_Words):
    """What a finding (and each claim row) can say; the finding schema's enum is read from here."""

    CONFIRMED = "confirmed"
    REFUTED = "refuted"
    PARTIAL = "partial"
    INCONCLUSIVE = "inconclusive"
    NOT_APPLICABLE = "not-applicable"
    NOT_RUN = "not-run"


class EventKind(_Words):
    """A normalised KV event's kind: TensorRT-LLM's created/stored/removed/updated, and vLLM's cleared
    (``AllBlocksCleared``, src/workbench/cells/vllm/events.py)."""

    CREATED = "created"
    STORED = "stored"
    REMOVED = "removed"
    UPDATED = "updated"
    CLEARED = "cleared"


Message = Mapping[str, Any]
"""One chat message (``{"role": ..., "content": ...}``), rendered through the model's template."""

Prompt = Union[Sequence[int], Sequence[Message], str]
"""Token ids (token space), chat messages (rendered by the cell), or raw text (tokenized as is)."""


def split_prompt(prompt: Prompt, vocab_size: int | None) -> tuple[str, Any]:
    """Which kind of prompt this is: ("text", str), ("tokens", ids checked against the vocabulary)
    or ("messages", list of dicts). Every cell dispatches on this one reading."""
    if isinstance(prompt, str):
        return "text", prompt
    items = list(prompt)
    if all(isinstance(t, int) for t in items):
        bad = [t for t in items if t < 0 or (vocab_size is not None and t >= vocab_size)]
        if bad:
            raise ValueError(f"token ids out of range [0, {vocab_size}): {bad[:5]}")
        return "tokens", items
    if all(isinstance(m, Mapping) for m in items):
        return "messages", items
    raise TypeError("a prompt is token ids, chat messages (dicts with role/content) or a string")


# --------------------------------------------------------------------------- errors


def _rebuilt(cls: type, args: tuple, state: dict) -> "WorkbenchError":
    e = cls.__new__(cls)
    e.args = args
    e.__dict__.update(state)
    return e


class WorkbenchError(Exception):
    """Base of every error the workbench raises on purpose."""

    def __reduce__(self):
        """Rebuilt without calling ``__init__``: most subclasses take other arguments than their message, and an
        error from an isolated child (workbench.isolate) must come back as itself, not as a traceback."""
        return _rebuilt, (type(self), self.args, self.__dict__)


class ContextOverflow(WorkbenchError):
    """The request does not fit; raised from token counts *before* anything is dispatched."""

    def __init__(self, requested: int, limit: int, what: str = "context") -> None:
        self.requested, self.limit, self.what = requested, limit, what
        super().__init__(f"{what} overflow: {requested} tokens requested, limit is {limit}")


class UnsupportedFeature(WorkbenchError):
    """The engine cannot do this operation (e.g. ``embed`` on TensorRT-LLM)."""

    def __init__(self, feature: str, engine: str, why: str = "") -> None:
        self.feature, self.engine = feature, engine
        super().__init__(f"{engine} does not support {feature}" + (f": {why}" if why else ""))


class EngineUnavailable(WorkbenchError):
    """The engine cannot run on this machine; ``reason`` says what a user can do about it."""

    def __init__(self, engine: str, reason: str, missing: tuple[str, ...] = ()) -> None:
        self.engine, self.reason = engine, reason
        self.missing = missing  # the symbols the installed release lacks, where that is why (the engine's own word)
        super().__init__(f"engine {engine!r} is unavailable: {reason}")


class ManifestMismatch(WorkbenchError):
    """KV state built under one manifest may never be used under another."""

    def __init__(self, expected: str, got: str) -> None:
        self.expected, self.got = expected, got
        super().__init__(f"manifest mismatch: state belongs to {got[:16]}…, cell is {expected[:16]}…")


# --------------------------------------------------------------------------- identity
#
# What a cell's KV is valid for (the model's digest and its adapters in order, with scale) is modeld's cache identity,
# defined once with the contract: workbench.transport.manifest.Variant, whose digest is the cache_salt the mapping row
# derives (manifest digest ⊕ adapter digests, in order, with scale). A cell's ``manifest`` is one.


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common token prefix: what a cache may reuse between two prompts."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Retention:
    """A retention request for a prefix range (TensorRT-LLM ``TokenRangeRetentionConfig``)."""

    priority: int = 100
    duration_ms: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.priority <= 100:
            raise ValueError(f"retention priority must be in [0, 100], got {self.priority}")
        if self.duration_ms is not None and self.duration_ms <= 0:
            raise ValueError(f"retention duration_ms must be positive, got {self.duration_ms}")


CELL_SOURCES = frozenset({"cell", "bookkeeping", "restore", "none"})  # PrefixStatus.source values that are not the engine's


@dataclass(frozen=True)
class PrefixStatus:
    """What EnsurePrefix did. Counts are exact unless ``exact`` is False (block-granular estimates).

    ``source`` names where ``reused_tokens`` came from: the engine's own per-request field (e.g. vLLM's
    ``num_cached_tokens``, TensorRT-LLM's ``perf_metrics``) or one of :data:`CELL_SOURCES` (the cell's
    bookkeeping). Probes read :attr:`engine_reused_tokens`, never the field by name.
    """

    slot: int
    prompt_tokens: int
    reused_tokens: int
    computed_tokens: int
    dropped_tokens: int = 0
    deferred_tokens: int = 0
    exact: bool = True
    granularity_tokens: int = 1
    source: str = "cell"
    elapsed_s: float = 0.0
    engine_counters: Mapping[str, Any] = field(default_factory=dict)

    @property
    def engine_reused_tokens(self) -> int | None:
        """Reused tokens as the engine itself counted them for this request; None when the engine has no such
        counter and the number is the cell's (llama.cpp: the cell's common-prefix arithmetic)."""
        return None if self.source in CELL_SOURCES else self.reused_tokens


@dataclass(frozen=True)
class DecodeResult:
    """Collected result of one Decode; ``token_times_s`` are seconds since dispatch, one per token."""

    slot: int
    tokens: list[int]
    text: str
    finish_reason: str
    ttft_s: float
    token_times_s: list[float]
    prompt_tokens: int = 0
    deferred_prefill_tokens: int = 0
    engine_counters: Mapping[str, Any] = field(default_factory=dict)

    @property
    def inter_token_s(self) -> list[float]:
        t = self.token_times_s
        return [b - a for a, b in zip(t, t[1:])]


@dataclass(frozen=True)
class Capabilities:
    """The context operations an engine really implements (ExplainContext's flags)."""

    remove_tail: bool
    remove_middle: bool
    position_shift: bool
    recompute_range: bool


@dataclass(frozen=True)
class ContextExplanation:
    slot: int
    tokens: int
    cache_key: str
    capabilities: Capabilities
    pending_tokens: int = 0
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Snapshot:
    """A restorable slot state. ``kind`` is ``"kv"`` (engine state bytes) or ``"text"`` (re-render)."""

    manifest_digest: str
    cache_key: str
    tokens: tuple[int, ...]
    kind: str
    payload: bytes = b""
    engine: str = ""


@dataclass(frozen=True)
class KvGeometry:
    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: float

    @property
    def bytes_per_token(self) -> int:
        """K and V for every layer: 2 · layers · kv_heads · head_dim · dtype size."""
        return int(round(2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes))


MECHANISMS = {
    "eviction": "the engine frees KV of idle sequences under pressure instead of refusing new work",
    "retention_priority": "per-request retention priorities steer which KV the engine evicts",
    "engine_salt": "the engine itself keys prefix reuse on a per-request salt (cache_salt)",
    "partial_warmup": "a warm-up request (max_tokens=1) can finish before every prefix block is stored",
    "reuse_counter": "the engine itself reports, per request, how many prompt tokens it served from cache",
    "kv_events": "the engine publishes KV-cache events (blocks stored, removed, cleared) a gateway can consume",
}
"""Engine mechanisms that claims are about. A cell lists the ones its engine lacks in
``Description.absent`` (mechanism -> the evidence, with the engine source it rests on), so a verdict
rule can answer ``not-applicable`` without asking for an engine by name."""


@dataclass(frozen=True)
class Description:
    engine: str
    engine_version: str
    model: str
    manifest_digest: str
    geometry: KvGeometry
    context_tokens: int
    kv_capacity_tokens: int
    kv_capacity_bytes: int
    block_tokens: int
    slots: int
    observers: tuple[str, ...] = ()  # the observers that are on in this cell: each one a probe may call
    extra: Mapping[str, Any] = field(default_factory=dict)
    absent: Mapping[str, str] = field(default_factory=dict)  # MECHANISMS key -> evidence of absence
    switchable: Mapping[str, str] = field(default_factory=dict)  # an observer off here -> the cell option that turns it on

    def __post_init__(self) -> None:
        unknown = set(self.absent) - set(MECHANISMS)
        if unknown:
            raise ValueError(f"unknown mechanism(s) {sorted(unknown)}; declared: {', '.join(MECHANISMS)}")
        both = set(self.switchable) & set(self.observers)
        if both:
            raise ValueError(f"observer(s) {sorted(both)} announced as on and as switchable: a cell says one")

    def offers(self, observer: str) -> bool:
        """Whether ``observer`` is on here or a cell of this engine can be opened with it on (``switchable``)."""
        return observer in self.observers or observer in self.switchable


@dataclass(frozen=True)
class KvEvent:
    """One engine KV-cache event, normalised (:class:`EventKind`)."""

    kind: str  # an EventKind value
    event_id: int = 0
    block_hashes: tuple[int, ...] = ()
    parent_hash: int | None = None
    block_tokens: tuple[tuple[int, ...], ...] = ()  # stored: token ids per block
    priority: int | None = None  # stored: per event if uniform; updated: new value
    cache_level: int | None = None
    num_blocks: tuple[int, ...] = ()  # created: blocks per cache level
    window_size: int | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", EventKind.check(self.kind, "a KV event's kind"))


TokenCallback = Callable[[int, str, float], None]
"""Streaming callback: (token id, text piece, seconds since dispatch)."""


# --------------------------------------------------------------------------- the protocol


@runtime_checkable
class RequestCounters(Protocol):
    """``PrefixStatus``/``DecodeResult.engine_counters`` carry the engine's own per-request reuse counters.

    A data channel: it adds no method, so any cell satisfies the Protocol; announcing it is the promise."""


@runtime_checkable
class KvEvents(Protocol):
    """The engine's KV-cache event stream (stored/removed/created blocks); one consumer drains it."""

    def drain_kv_events(self, timeout_s: float = 0.5) -> list[KvEvent]: ...


@runtime_checkable
class IterationStats(Protocol):
    """The engine's per-iteration statistics, drained."""

    def drain_iteration_stats(self, timeout_s: float = 0.5) -> list[dict]: ...


@runtime_checkable
class ConnectorLog(Protocol):
    """Every call a recording KV connector saw, with its arguments."""

    def connector_log(self) -> list[dict]: ...


@runtime_checkable
class StateExport(Protocol):
    """Per-sequence KV bytes out of and into the engine; ``tokens`` are the ids the blob holds KV for."""

    def export_state(self, *, slot: int = 0) -> bytes: ...

    def import_state(self, blob: bytes, tokens: Sequence[int], *, slot: int = 0, position_shift: int = 0) -> None: ...


@dataclass(frozen=True)
class KvMemory:
    """The engine's own statement of its KV memory, never the model config's geometry.

    ``bytes_per_token``: bytes one token's K and V take in the engine's cache, all layers, as the engine states
    them. ``pool_bytes``: the bytes the engine allocated for its KV pool, where it exposes them (None where only
    the cells it accepts can be counted). ``how``: where each figure was read, in the engine's terms."""

    bytes_per_token: float
    pool_bytes: int | None = None
    how: str = ""


@runtime_checkable
class Capacity(Protocol):
    """The KV capacity found by filling the cache until the engine refuses (not the configured number), and the
    engine's own KV bytes (:class:`KvMemory`), so a byte budget can be graded against bytes the engine reports."""

    def measure_capacity(self, *, step: int | None = None, slot: int = 0) -> int: ...

    def kv_memory(self) -> KvMemory: ...


@dataclass(frozen=True)
class AdapterReply:
    """What the engine answered to one request sent with the cell's LoRA adapter or without it."""

    adapter: bool
    reused_tokens: int | None  # prompt tokens the engine's own counter served from cache; None: it gave no count
    tokens: tuple[int, ...]  # the greedy tokens it decoded


@runtime_checkable
class AdapterRequests(Protocol):
    """Requests to an engine that has the cell's LoRA adapter loaded, each carrying the adapter or not, under a
    key the caller names (the cell's manifest salt bypassed): the engine's own handling of an adapter, i.e.
    whether the adapter changes its output and whether it keeps the adapter's KV apart from the base model's."""

    def adapter_request(self, tokens: Sequence[int], *, key: str, adapter: bool,
                        max_tokens: int = 4) -> AdapterReply: ...


@runtime_checkable
class KvReadback(Protocol):
    """What the engine itself holds, read back from it rather than from the cell's token list: the run of
    consecutive positions from the slot's first one (a hole ends it), and the logits after the last token."""

    def resident_tokens(self, *, slot: int = 0) -> int: ...

    def last_logits(self, *, slot: int = 0) -> list[float]: ...


@runtime_checkable
class CachedBlocks(Protocol):
    """How many blocks the engine's own prefix-cache index holds now, copies of one hash apart: what its stored and
    removed events must add up to (read from the engine, where it can say; the pool's size only bounds it)."""

    def cached_blocks(self) -> int: ...


OBSERVERS: dict[str, type] = {
    "request_counters": RequestCounters,
    "kv_events": KvEvents,
    "iteration_stats": IterationStats,
    "connector": ConnectorLog,
    "state_export": StateExport,
    "capacity": Capacity,
    "kv_readback": KvReadback,
    "adapter_requests": AdapterRequests,
    "cached_blocks": CachedBlocks,
}
"""Optional evidence channels, each declared as a Protocol. A cell lists the ones it really has in
``Description.observers``; probes ask for channels, never for an engine name."""


def observer_mismatches(cell: Any, announced: Iterable[str]) -> list[str]:
    """Where a cell's announced observers differ from their Protocols: an unknown name, a missing method, or
    parameters other than the spec's (as pluggy rejects hook implementations with arguments not in the spec)."""
    problems = []
    for name in announced:
        spec = OBSERVERS.get(name)
        if spec is None:
            problems.append(f"{name}: not a declared observer ({', '.join(OBSERVERS)})")
            continue
        for meth, want in _protocol_methods(spec).items():
            impl = getattr(cell, meth, None)
            if not callable(impl):
                problems.append(f"{name}: {meth}() is missing")
                continue
            got = inspect.signature(impl)
            if _shape(got) != _shape(want):
                problems.append(f"{name}: {meth}{_plain(got)} differs from the spec {meth}{_plain(want)}")
    return problems


def _protocol_methods(spec: type) -> dict[str, inspect.Signature]:
    """Each method of an observer Protocol, as bound on an instance (without ``self``)."""
    out = {}
    for n, f in vars(spec).items():
        if inspect.isfunction(f) and not n.startswith("_"):
            sig = inspect.signature(f)
            out[n] = sig.replace(parameters=list(sig.parameters.values())[1:])
    return out


def _shape(sig: inspect.Signature) -> list[tuple[str, Any]]:
    return [(p.name, p.kind) for p in sig.parameters.values()]


def _plain(sig: inspect.Signature) -> str:
    return str(sig.replace(parameters=[p.replace(annotation=p.empty) for p in sig.parameters.values()],
                           return_annotation=sig.empty))


@runtime_checkable
class Cell(Protocol):
    """The transport contract. A cell is a context manager; ``close`` frees the engine."""

    engine: str
    manifest: Any  # a workbench.transport.manifest.Variant: the model digest and adapters the cell's KV is valid for

    def ensure_prefix(
        self,
        prompt: Prompt,
        *,
        slot: int = 0,
        salt: str | None = None,  # the request's cache key, derived by the caller (transport.manifest.cache_salt);
        retention: Retention | None = None,  # None: the cell's own (manifest.digest)
    ) -> PrefixStatus: ...

    def prefill_suffix(self, suffix: Prompt, *, slot: int = 0, defer: bool = False) -> PrefixStatus: ...

    def decode(
        self,
        *,
        slot: int = 0,
        max_tokens: int = 16,
        temperature: float = 0.0,
        top_p: float = 1.0,
        top_k: int = 0,
        seed: int = 0,
        stop: Sequence[str] = (),
        json_schema: Mapping[str, Any] | None = None,
        on_token: TokenCallback | None = None,
    ) -> DecodeResult: ...

    def explain_context(self, *, slot: int = 0) -> ContextExplanation: ...

    def snapshot(self, *, slot: int = 0) -> Snapshot: ...

    def restore(self, snap: Snapshot, *, slot: int = 0) -> PrefixStatus: ...

    def describe(self) -> Description: ...

    def embed(self, texts: Iterable[str]) -> list[list[float]]: ...

    def tokenize(self, text: str, *, special: bool = True) -> list[int]: ...

    def close(self) -> None: ...

    def __enter__(self) -> "Cell": ...

    def __exit__(self, *exc: object) -> None: ...
