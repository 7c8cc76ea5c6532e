from ..bindings import KvCacheRetentionConfig
from ..executor import CompletionOutput, GenerationResult, LoRARequest
from ..sampling_params import GuidedDecodingParams, SamplingParams
from . import llm_args
from .llm import LLM
from .llm_args import KvCacheConfig, TorchLlmArgs

__all__ = ["LLM", "CompletionOutput", "GenerationResult", "GuidedDecodingParams", "SamplingParams", "KvCacheConfig",
           "KvCacheRetentionConfig", "LoRARequest", "TorchLlmArgs", "llm_args"]
