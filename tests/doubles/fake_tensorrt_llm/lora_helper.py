"""``tensorrt_llm.lora_helper.LoraConfig`` (1.2 line): the adapters loaded on the LLM."""

from dataclasses import dataclass, field
from typing import Dict, List, Optional


@dataclass
class LoraConfig:
    lora_dir: List[str] = field(default_factory=list)
    lora_ckpt_source: str = "hf"
    max_lora_rank: int = 64
    lora_target_modules: List[str] = field(default_factory=list)
    trtllm_modules_to_hf_modules: Dict[str, str] = field(default_factory=dict)
    max_loras: Optional[int] = None
    max_cpu_loras: Optional[int] = None
