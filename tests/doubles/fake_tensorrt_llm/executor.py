"""``tensorrt_llm.executor`` request and result types (1.2 line), reduced to what the cell reads."""

import os
from dataclasses import dataclass, field
from typing import List, Optional


@dataclass(slots=True)
class LoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str = ""
    lora_ckpt_source: str = "hf"

    def __post_init__(self):
        if self.lora_path is not None and not os.path.exists(self.lora_path):
            raise ValueError(f"lora_path ({self.lora_path}) does not exist.")

    @property
    def adapter_id(self):
        return self.lora_int_id


@dataclass
class CompletionOutput:
    index: int
    text: str = ""
    token_ids: List[int] = field(default_factory=list)
    finish_reason: Optional[str] = None
    request_perf_metrics: object = None
    _last_text_len: int = 0
    _last_token_ids_len: int = 0

    @property
    def text_diff(self) -> str:
        return self.text[self._last_text_len:]

    @property
    def token_ids_diff(self) -> List[int]:
        return self.token_ids[self._last_token_ids_len:]


class RequestOutput:
    """Like ``GenerationResult``: iterate for streaming steps, ``result()`` to wait for the end."""

    def __init__(self, request_id: int, prompt_token_ids: List[int], steps: List[CompletionOutput]):
        self.request_id = request_id
        self.prompt_token_ids = prompt_token_ids
        self._steps = steps
        self._at = -1

    @property
    def finished(self) -> bool:
        return self._at == len(self._steps) - 1

    @property
    def outputs(self) -> List[CompletionOutput]:
        return [self._steps[self._at]]

    def result(self, timeout=None) -> "RequestOutput":
        self._at = len(self._steps) - 1
        return self

    def __iter__(self):
        return self

    def __next__(self) -> "RequestOutput":
        if self.finished:
            raise StopIteration
        self._at += 1
        return self
