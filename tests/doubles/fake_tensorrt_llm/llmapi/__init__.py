from ..bindings import KvCacheRetentionConfig
from ..executor import CompletionOutput, GenerationResult, LoRARequest
from ..sampling_params import GuidedDecodingParams, SamplingParams
from . import llm_args
from .llm import LLM
from .llm_args import KvCacheConfig, TorchLlmArgs
from .. import _profile

if _profile.V14:
    from .llm_args import KVEventsConfig  # noqa: F401 - exported from tensorrt_llm.llmapi in 1.4

__all__ = ["LLM", "CompletionOutput", "GenerationResult", "GuidedDecodingParams", "SamplingParams", "KvCacheConfig",
           "KvCacheRetentionConfig", "LoRARequest", "TorchLlmArgs", "llm_args"]
