"""``tensorrt_llm.llmapi.llm_args`` (1.2 and 1.4 lines): the LLM keywords and configs the cell passes.

The real classes are pydantic models with ``extra="forbid"``; dataclasses reject unknown keywords
the same way. 1.4 (``_profile.V14``): ``KvCacheConfig.use_kv_cache_manager_v2`` defaults to V2 (release
v1.4.0rc1, "Default to KV cache manager V2 ... (BREAKING) #17495"), and ``KvCacheConfig.kv_events_config`` takes
a ``KVEventsConfig`` (docs ``llm-api/reference/KVEventsConfig.html``; PR #17023).
"""

from dataclasses import dataclass
from typing import Any, List, Optional

from .. import _profile
from ..lora_helper import LoraConfig


@dataclass(kw_only=True)
class KVEventsConfig:
    """1.4: the ZMQ push path of KV events ("each attention-DP rank binds base_port+rank")."""

    enable_kv_cache_events: bool = False
    publisher: str = "zmq"
    endpoint: str = "tcp://*:5557"
    replay_endpoint: Optional[str] = None
    buffer_steps: int = 10000
    hwm: int = 100000
    max_queue_size: int = 100000
    topic: str = ""


@dataclass(kw_only=True)
class KvCacheConfig:
    enable_block_reuse: bool = True
    max_tokens: Optional[int] = None
    max_attention_window: Optional[List[int]] = None
    free_gpu_memory_fraction: Optional[float] = 0.9
    host_cache_size: Optional[int] = None
    onboard_blocks: bool = True
    secondary_offload_min_priority: Optional[int] = None
    event_buffer_max_size: int = 0
    enable_partial_reuse: bool = True
    copy_on_partial_reuse: bool = True
    dtype: str = "auto"
    tokens_per_block: int = 32
    use_kv_cache_manager_v2: bool = False


@dataclass(kw_only=True)
class KvCacheConfig14(KvCacheConfig):
    use_kv_cache_manager_v2: bool = True
    kv_events_config: Optional[KVEventsConfig] = None


if _profile.V14:
    KvCacheConfig14.__name__ = KvCacheConfig14.__qualname__ = "KvCacheConfig"
    KvCacheConfig = KvCacheConfig14  # noqa: F811 - the release's one class of that name


@dataclass(kw_only=True)
class KvCacheConnectorConfig:
    connector_module: str
    connector_scheduler_class: str
    connector_worker_class: str


@dataclass(kw_only=True)
class TorchLlmArgs:
    model: str
    tokenizer: Any = None
    tokenizer_mode: str = "auto"
    skip_tokenizer_init: bool = False
    trust_remote_code: bool = False
    tensor_parallel_size: int = 1
    dtype: str = "auto"
    revision: Optional[str] = None
    tokenizer_revision: Optional[str] = None
    load_format: str = "auto"
    enable_lora: bool = False
    lora_config: Optional[LoraConfig] = None
    kv_cache_config: KvCacheConfig = None
    enable_chunked_prefill: bool = False
    guided_decoding_backend: Optional[str] = None
    max_batch_size: int = 2048
    max_seq_len: Optional[int] = None
    max_num_tokens: int = 8192
    return_perf_metrics: bool = False
    enable_iter_perf_stats: bool = False
    kv_connector_config: Optional[KvCacheConnectorConfig] = None

    def __post_init__(self):
        if self.kv_cache_config is None:
            self.kv_cache_config = KvCacheConfig()
        if self.load_format.upper() not in ("AUTO", "DUMMY"):
            raise ValueError(f"Invalid LoadFormat: {self.load_format}")
