"""``tensorrt_llm.executor`` (1.2 line): requests, results and the executor's reporting queues."""

from .executor import GenerationExecutor
from .request import LoRARequest
from .result import CompletionOutput, GenerationResult, IterationResult

__all__ = ["CompletionOutput", "GenerationExecutor", "GenerationResult", "IterationResult", "LoRARequest"]
