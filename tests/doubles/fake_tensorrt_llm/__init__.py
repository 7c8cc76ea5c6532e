"""A double of tensorrt_llm 1.2 (PyTorch backend LLM API), for tests only. Loaded as ``tensorrt_llm``."""

from . import lora_helper, sampling_params
from . import llmapi
from .llmapi import LLM, SamplingParams

__version__ = "1.2.1"

__all__ = ["LLM", "SamplingParams", "llmapi", "lora_helper", "sampling_params", "__version__"]
