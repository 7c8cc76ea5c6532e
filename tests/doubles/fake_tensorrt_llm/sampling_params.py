"""``tensorrt_llm.sampling_params`` (1.2 line): the fields the cell uses, same names and defaults."""

from dataclasses import dataclass, fields
from typing import List, Optional, Union


@dataclass(slots=True, kw_only=True)
class GuidedDecodingParams:
    json: Optional[Union[str, dict]] = None
    regex: Optional[str] = None
    grammar: Optional[str] = None
    json_object: bool = False
    structural_tag: Optional[str] = None

    def __post_init__(self):
        if sum(bool(getattr(self, f.name)) for f in fields(self)) > 1:
            raise ValueError("Only one guide can be used for a request")


@dataclass(slots=True, kw_only=True)
class SamplingParams:
    end_id: Optional[int] = None
    pad_id: Optional[int] = None
    max_tokens: int = 32
    stop: Optional[Union[str, List[str]]] = None
    stop_token_ids: Optional[List[int]] = None
    n: int = 1
    top_k: Optional[int] = None
    top_p: Optional[float] = None
    seed: Optional[int] = None
    temperature: Optional[float] = None
    min_tokens: Optional[int] = None
    return_perf_metrics: bool = False
    guided_decoding: Optional[GuidedDecodingParams] = None
    ignore_eos: bool = False
    detokenize: bool = True
    add_special_tokens: bool = True
