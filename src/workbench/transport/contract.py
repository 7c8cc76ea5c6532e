"""modeld's session contract as code: the types of ``runtime/transport/session.go`` (contenox/runtime 7d0a257f).

Field names are the Go names in snake_case (``ReusedTokens`` → ``reused_tokens``); each field declares the JSON key
Go writes for it (:func:`workbench.transport.gojson.go`): the Go field name where the struct is untagged
(``PrefixStatus``, ``SuffixStatus``, ``Config``, ``DecodeConfig``, the head of ``ContextReport``), the tag where it
has one (``ModelInfo``, ``AdapterSpec``, ``ContextReport``'s tail, ``SessionSnapshot``). The interfaces are
:class:`Service`, :class:`ModelController` and :class:`Session`, as Protocols; the errors are
:mod:`workbench.transport.errors`; the manifest is :mod:`workbench.transport.manifest`.

Nothing here names an engine or imports one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Protocol, runtime_checkable

from .gojson import go
from .manifest import AdapterSpec, ContextManifest

PROTOCOL_VERSION = 1  # runtime/transport/protocol.go ProtocolVersion
MIN_PROTOCOL = 1  # runtime/transport/protocol.go MinProtocol

MEDIA_MARKER = "<__media__>"  # session.go MediaMarker


@dataclass
class Fence:
    """The owner identity a client expects to be serving it, supplied once at OpenSession."""

    owner_instance_id: str = go("OwnerInstanceID", "")


@dataclass
class Config:
    """The explicit hardware/runtime configuration of a session (untagged: keys are the Go names)."""

    num_ctx: int = go("NumCtx", 0)
    hot_context_tokens: int = go("HotContextTokens", 0)
    planner_effective_context: int = go("PlannerEffectiveContext", 0)
    num_batch: int = go("NumBatch", 0)
    num_threads: int = go("NumThreads", 0)
    num_gpu_layers: int = go("NumGpuLayers", 0)
    tensor_split: list[float] | None = go("TensorSplit", None, kind="float32")
    flash_attn: bool = go("FlashAttn", False)
    kv_cache_type: str = go("KVCacheType", "")
    prompt_format: str = go("PromptFormat", "")
    prompt_template_digest: str = go("PromptTemplateDigest", "")
    disable_bos: bool = go("DisableBOS", False)
    reasoning_format: str = go("ReasoningFormat", "")


@dataclass
class DeviceInfo:
    index: int = go("index", 0)
    name: str = go("name", "", omitempty=True)
    description: str = go("description", "", omitempty=True)
    type: str = go("type", "", omitempty=True)
    memory_free: int = go("memory_free", 0, omitempty=True)
    memory_total: int = go("memory_total", 0, omitempty=True)
    memory_free_known: bool = go("memory_free_known", False, omitempty=True)
    memory_total_known: bool = go("memory_total_known", False, omitempty=True)


@dataclass
class ModelInfo:
    """What the daemon reports about a model (``Describe``); the wire's ``describeResp`` has these keys in this order."""

    model_max_context: int = go("model_max_context", 0)
    effective_context: int = go("effective_context", 0)
    memory_context_tokens: int = go("memory_context_tokens", 0, omitempty=True)
    hot_context_tokens: int = go("hot_context_tokens", 0, omitempty=True)
    planner_effective_context: int = go("planner_effective_context", 0, omitempty=True)
    kv_bytes_per_token: int = go("kv_bytes_per_token", 0, omitempty=True)
    free_bytes: int = go("free_bytes", 0, omitempty=True)
    weights_bytes: int = go("weights_bytes", 0, omitempty=True)
    overhead_bytes: int = go("overhead_bytes", 0, omitempty=True)
    reserved_bytes: int = go("reserved_bytes", 0, omitempty=True)
    user_limit_bytes: int = go("user_limit_bytes", 0, omitempty=True)
    min_free_bytes: int = go("min_free_bytes", 0, omitempty=True)
    host_cold_budget_bytes: int = go("host_cold_budget_bytes", 0, omitempty=True)
    usable_bytes: int = go("usable_bytes", 0, omitempty=True)
    required_bytes: int = go("required_bytes", 0, omitempty=True)
    clamped: bool = go("clamped", False, omitempty=True)
    reason: str = go("reason", "", omitempty=True)
    device_kind: str = go("device_kind", "", omitempty=True)
    device_id: str = go("device_id", "", omitempty=True)
    device_total_bytes: int = go("device_total_bytes", 0, omitempty=True)
    shared_with_display: bool = go("shared_with_display", False, omitempty=True)
    requested_gpu_layers: int = go("requested_gpu_layers", 0, omitempty=True)
    resolved_gpu_layers: int = go("resolved_gpu_layers", 0, omitempty=True)
    sparse_attention: bool = go("sparse_attention", False, omitempty=True)
    sliding_window_attention_tokens: int = go("sliding_window_attention_tokens", 0, omitempty=True)
    supports_vision: bool = go("supports_vision", False, omitempty=True)
    vision_tokens_per_image: int = go("vision_tokens_per_image", 0, omitempty=True)
    chat_template_format: str = go("chat_template_format", "", omitempty=True)
    chat_template_thinking_start_tag: str = go("chat_template_thinking_start_tag", "", omitempty=True)
    chat_template_reasoning_format: str = go("chat_template_reasoning_format", "", omitempty=True)
    chat_template_supports_tool_calls: bool = go("chat_template_supports_tool_calls", False, omitempty=True)
    chat_template_supports_thinking: bool = go("chat_template_supports_thinking", False, omitempty=True)
    chat_template_supports_reasoning_effort: bool = go("chat_template_supports_reasoning_effort", False, omitempty=True)
    runtime_name: str = go("runtime_name", "", omitempty=True)
    runtime_digest: str = go("runtime_digest", "", omitempty=True)
    runtime_system_info: str = go("runtime_system_info", "", omitempty=True)
    supports_gpu_offload: bool = go("supports_gpu_offload", False, omitempty=True)
    devices: list[DeviceInfo] | None = go("devices", None, omitempty=True)


def resolve_planner_effective_context(requested: int, num_ctx: int, info: ModelInfo) -> int:
    """``ResolvePlannerEffectiveContext``: never below NumCtx, clamped to the trained ceiling when known."""
    planner = requested if requested > 0 else info.planner_effective_context
    if planner <= 0:
        planner = num_ctx
    if info.model_max_context > 0 and planner > info.model_max_context:
        planner = info.model_max_context
    return max(planner, num_ctx)


@dataclass
class OpenSessionRequest:
    """Open a session for a model (the Go struct; on the wire it travels as ``openSessionReq``, :mod:`.wire`)."""

    owner_instance_id: str = ""
    model_name: str = ""
    type: str = ""
    digest: str = ""
    path: str = ""
    config: Config = None  # type: ignore[assignment]
    adapters: list[AdapterSpec] | None = None
    reclaimable_bytes: int = 0

    def __post_init__(self) -> None:
        if self.config is None:
            self.config = Config()


@dataclass
class EmbedRequest:
    owner_instance_id: str = ""
    model_name: str = ""
    type: str = ""
    digest: str = ""
    path: str = ""
    config: Config = None  # type: ignore[assignment]
    text: str = ""

    def __post_init__(self) -> None:
        if self.config is None:
            self.config = Config()


@dataclass
class EmbedResult:
    vector: list[float] | None = go("vector", None, omitempty=True, kind="float32")


SLOT_STATES = ("Empty", "Loading", "Ready", "Busy", "Switching", "Unloading", "Failed", "ShuttingDown", "LostOwner",
               "Idle")
"""``SlotState`` values: the lifecycle of modeld's single active model slot."""


@dataclass
class ActiveModel:
    model_name: str = go("model_name", "", omitempty=True)
    type: str = go("type", "", omitempty=True)
    digest: str = go("digest", "", omitempty=True)
    path: str = go("path", "", omitempty=True)
    config: Config = go("config", factory=Config)
    adapters: list[AdapterSpec] | None = go("adapters", None, omitempty=True)
    generation: int = go("generation", 0)


@dataclass
class DaemonStatus:
    owner_instance_id: str = go("owner_instance_id", "", omitempty=True)
    backend: str = go("backend", "", omitempty=True)
    state: str = go("state", "", omitempty=True)
    active: ActiveModel | None = go("active", None, omitempty=True)
    busy_operation: str = go("busy_operation", "", omitempty=True)
    last_error: str = go("last_error", "", omitempty=True)


@dataclass
class LoadModelRequest:
    owner_instance_id: str = ""
    model_name: str = ""
    type: str = ""
    digest: str = ""
    path: str = ""
    config: Config = None  # type: ignore[assignment]
    adapters: list[AdapterSpec] | None = None
    expected_generation: int = 0

    def __post_init__(self) -> None:
        if self.config is None:
            self.config = Config()


@dataclass
class UnloadModelRequest:
    owner_instance_id: str = ""
    expected_generation: int = 0


@dataclass
class ImagePart:
    data: bytes | None = go("data", None, omitempty=True, kind="bytes")
    mime_type: str = go("mime_type", "", omitempty=True)


@dataclass
class PrefixInput:
    """The stable prefix text plus the manifest that makes reuse valid."""

    text: str = go("Text", "")
    manifest: ContextManifest = go("Manifest", factory=ContextManifest)
    tools: str = go("Tools", "", omitempty=True)
    images: list[ImagePart] | None = go("images", None, omitempty=True)


@dataclass
class SuffixInput:
    """The volatile text appended after the stable prefix, with the same manifest."""

    text: str = go("Text", "")
    manifest: ContextManifest = go("Manifest", factory=ContextManifest)
    enable_thinking: bool | None = go("EnableThinking", None, omitempty=True, kind="ptr")
    reasoning_effort: str = go("ReasoningEffort", "", omitempty=True)
    images: list[ImagePart] | None = go("images", None, omitempty=True)


@dataclass
class PrefixStatus:
    """What EnsurePrefix reused versus had to (re)compute. ReusedTokens > 0 is a warm hit."""

    reused_tokens: int = go("ReusedTokens", 0)
    prefilled_tokens: int = go("PrefilledTokens", 0)
    dropped_tokens: int = go("DroppedTokens", 0)
    prefix_tokens: int = go("PrefixTokens", 0)
    resident_tokens: int = go("ResidentTokens", 0)
    available_tokens: int = go("AvailableTokens", 0)
    stable_byte_hash: str = go("StableByteHash", "")
    stable_token_hash: str = go("StableTokenHash", "")
    manifest_digest: str = go("ManifestDigest", "")


@dataclass
class SuffixStatus:
    """The volatile suffix added after the stable prefix."""

    suffix_tokens: int = go("SuffixTokens", 0)
    prefix_tokens: int = go("PrefixTokens", 0)
    resident_tokens: int = go("ResidentTokens", 0)
    available_tokens: int = go("AvailableTokens", 0)
    manifest_digest: str = go("ManifestDigest", "")


@dataclass
class StructuredOutputConfig:
    protocol: str = go("Protocol", "")
    payload: str = go("Payload", "")
    tool_name: str = go("ToolName", "")


@dataclass
class DecodeConfig:
    """One decode pass. Pointers (Temperature, TopP, Seed) marshal ``null`` when unset: the backend's default."""

    max_tokens: int = go("MaxTokens", 0)
    temperature: float | None = go("Temperature", None, kind="ptr")
    top_p: float | None = go("TopP", None, kind="ptr")
    top_k: int = go("TopK", 0)
    seed: int | None = go("Seed", None, kind="ptr")
    parser_protocols: list[str] | None = go("ParserProtocols", None)
    reasoning_format: str = go("ReasoningFormat", "")
    structured_output: StructuredOutputConfig = go("StructuredOutput", factory=StructuredOutputConfig)


@dataclass
class ToolCallFunction:
    name: str = go("name", "")
    arguments: str = go("arguments", "")


@dataclass
class ToolCall:
    id: str = go("id", "", omitempty=True)
    type: str = go("type", "")
    function: ToolCallFunction = go("function", factory=ToolCallFunction)


@dataclass
class StreamChunk:
    """A decoded text delta, parsed model output, or a terminal error (an exception; on the wire a ``wireChunk``)."""

    text: str = ""
    thinking: str = ""
    tool_calls: list[ToolCall] | None = None
    error: BaseException | None = None


@dataclass
class ResidencyCapabilities:
    """What a backend can physically execute against resident KV: the seven capabilities."""

    remove_tail: bool = go("remove_tail", False, omitempty=True)
    remove_middle: bool = go("remove_middle", False, omitempty=True)
    position_shift: bool = go("position_shift", False, omitempty=True)
    sparse_attention: bool = go("sparse_attention", False, omitempty=True)
    sliding_window_attention_tokens: int = go("sliding_window_attention_tokens", 0, omitempty=True)
    cold_store: bool = go("cold_store", False, omitempty=True)
    recompute_range: bool = go("recompute_range", False, omitempty=True)


CAPABILITIES = ("remove_tail", "remove_middle", "position_shift", "sparse_attention", "sliding_window_attention_tokens",
                "cold_store", "recompute_range")


@dataclass
class ResidencyReport:
    budget_tokens: int = go("budget_tokens", 0, omitempty=True)
    total_tokens: int = go("total_tokens", 0, omitempty=True)
    hot_tokens: int = go("hot_tokens", 0, omitempty=True)
    cold_tokens: int = go("cold_tokens", 0, omitempty=True)
    protected_tokens: int = go("protected_tokens", 0, omitempty=True)
    hot_blocks: int = go("hot_blocks", 0, omitempty=True)
    cold_blocks: int = go("cold_blocks", 0, omitempty=True)
    over_budget: bool = go("over_budget", False, omitempty=True)
    capabilities: ResidencyCapabilities = go("capabilities", factory=ResidencyCapabilities)
    diagnostics: list[str] | None = go("diagnostics", None, omitempty=True)
    error: str = go("error", "", omitempty=True)


@dataclass
class ContextReport:
    """The session's resident context (explain-context), with its cumulative physical-work counters."""

    resident_tokens: int = go("ResidentTokens", 0)
    prefix_tokens: int = go("PrefixTokens", 0)
    num_ctx: int = go("NumCtx", 0)
    hot_context_tokens: int = go("HotContextTokens", 0)
    planner_effective_context: int = go("PlannerEffectiveContext", 0)
    available_tokens: int = go("AvailableTokens", 0)
    stable_byte_hash: str = go("StableByteHash", "")
    stable_token_hash: str = go("StableTokenHash", "")
    manifest_digest: str = go("ManifestDigest", "")
    manifest: ContextManifest = go("Manifest", factory=ContextManifest)
    closed: bool = go("Closed", False)
    fatal_error: str = go("fatal_error", "", omitempty=True)
    physical_prefill_calls: int = go("physical_prefill_calls", 0, omitempty=True)
    physical_prefill_tokens: int = go("physical_prefill_tokens", 0, omitempty=True)
    deferred_prefill_calls: int = go("deferred_prefill_calls", 0, omitempty=True)
    deferred_prefill_tokens: int = go("deferred_prefill_tokens", 0, omitempty=True)
    decode_calls: int = go("decode_calls", 0, omitempty=True)
    decode_prompt_tokens: int = go("decode_prompt_tokens", 0, omitempty=True)
    residency: ResidencyReport | None = go("residency", None, omitempty=True)


@dataclass
class ColdKVBlock:
    start: int = go("start", 0, omitempty=True)
    end: int = go("end", 0, omitempty=True)
    tokens: list[int] | None = go("tokens", None, omitempty=True)
    prefix_tokens: list[int] | None = go("prefix_tokens", None, omitempty=True)
    token_hash: str = go("token_hash", "", omitempty=True)
    kv: bytes | None = go("kv", None, omitempty=True, kind="bytes")
    cache_class: str = go("cache_class", "", omitempty=True)
    last_used: int = go("last_used", 0, omitempty=True)


@dataclass
class SessionSnapshot:
    """Backend state for durability/branching. ``state`` (``json:"-"``) never crosses the wire: the daemon keeps
    the engine blob under ``state_id``."""

    state_id: str = go("state_id", "", omitempty=True)
    state: bytes | None = go("-", None)
    resident_tokens: int = go("resident_tokens", 0, omitempty=True)
    prefix_tokens: int = go("prefix_tokens", 0, omitempty=True)
    num_ctx: int = go("num_ctx", 0, omitempty=True)
    resident_token_ids: list[int] | None = go("resident_token_ids", None, omitempty=True)
    cold_kv_blocks: list[ColdKVBlock] | None = go("cold_kv_blocks", None, omitempty=True)
    stable_text: str = go("stable_text", "", omitempty=True)
    prefix_text: str = go("prefix_text", "", omitempty=True)
    tools: str = go("tools", "", omitempty=True)
    manifest: ContextManifest = go("manifest", factory=ContextManifest)


@dataclass
class ContextOverflowDetail:
    """The structured token counts of a context-window overflow."""

    stage: str = go("stage", "", omitempty=True)
    resident_tokens: int = go("resident_tokens", 0, omitempty=True)
    additional_tokens: int = go("additional_tokens", 0, omitempty=True)
    num_ctx: int = go("num_ctx", 0, omitempty=True)


@dataclass
class NodeModel:
    """One model on a node (``runtime/transport/nodeadmin.go``): what ``ListModels`` answers."""

    name: str = go("name", "")
    type: str = go("type", "")
    digest: str = go("digest", "", omitempty=True)
    size_bytes: int = go("size_bytes", 0, omitempty=True)
    context_length: int = go("context_length", 0, omitempty=True)


# --------------------------------------------------------------------------- the interfaces


@runtime_checkable
class Session(Protocol):
    """A persistent, workspace-scoped inference session: EnsurePrefix → PrefillSuffix → Decode."""

    def ensure_prefix(self, prefix: PrefixInput) -> PrefixStatus: ...

    def prefill_suffix(self, suffix: SuffixInput) -> SuffixStatus: ...

    def decode(self, cfg: DecodeConfig) -> Iterator[StreamChunk]: ...

    def explain_context(self) -> ContextReport: ...

    def snapshot(self) -> SessionSnapshot: ...

    def restore(self, snap: SessionSnapshot) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class Service(Protocol):
    """What modeld serves: sessions on the owned hardware, and what it reads of a model."""

    def open_session(self, req: OpenSessionRequest) -> Session: ...

    def describe(self, req: OpenSessionRequest) -> ModelInfo: ...

    def embed(self, req: EmbedRequest) -> EmbedResult: ...


@runtime_checkable
class ModelController(Protocol):
    """The single-slot control extension of a Service."""

    def status(self) -> DaemonStatus: ...

    def load_model(self, req: LoadModelRequest) -> ActiveModel: ...

    def unload_model(self, req: UnloadModelRequest) -> None: ...


__all__ = ["ActiveModel", "AdapterSpec", "CAPABILITIES", "ColdKVBlock", "Config", "ContextManifest",
           "ContextOverflowDetail", "ContextReport", "DaemonStatus", "DecodeConfig", "DeviceInfo", "EmbedRequest",
           "EmbedResult", "Fence", "ImagePart", "LoadModelRequest", "MEDIA_MARKER", "MIN_PROTOCOL", "ModelController",
           "ModelInfo", "NodeModel", "OpenSessionRequest", "PROTOCOL_VERSION", "PrefixInput", "PrefixStatus",
           "ResidencyCapabilities", "ResidencyReport", "SLOT_STATES", "Service", "Session", "SessionSnapshot",
           "StreamChunk", "StructuredOutputConfig", "SuffixInput", "SuffixStatus", "ToolCall", "ToolCallFunction",
           "UnloadModelRequest", "resolve_planner_effective_context"]
