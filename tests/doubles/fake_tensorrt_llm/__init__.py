"""A double of tensorrt_llm 1.2 or 1.4 (PyTorch backend LLM API), for tests only. Loaded as ``tensorrt_llm``."""

from . import _profile
from . import lora_helper, sampling_params
from . import llmapi
from .llmapi import LLM, SamplingParams

__version__ = _profile.RELEASE
# What the workbench reads to know a finding was made here (workbench.cells.trtllm.guard.Install.double):
# a double stands for the engine in tests and never answers for it.
__test_double__ = f"tests/doubles/fake_tensorrt_llm as tensorrt_llm {_profile.RELEASE}"

__all__ = ["LLM", "SamplingParams", "llmapi", "lora_helper", "sampling_params", "__version__"]
