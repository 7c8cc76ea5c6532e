"""The connector interface of ``tensorrt_llm._torch.pyexecutor.kv_cache_connector`` (1.2 line), which 1.4 keeps
unchanged at ``tensorrt_llm._torch.pyexecutor.connectors.kv_cache_connector``: one body, imported by each location."""

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import List, Tuple


@dataclass
class RequestData:
    request_id: int
    new_tokens: List[int]
    new_block_ids: List[int]
    computed_position: int
    num_scheduled_tokens: int


@dataclass
class SchedulerOutput:
    new_requests: List[RequestData] = field(default_factory=list)
    cached_requests: List[RequestData] = field(default_factory=list)


class KvCacheConnectorWorker(ABC):
    def __init__(self, llm_args):
        self._llm_args = llm_args
        self._metadata = None
        super().__init__()

    def bind_connector_meta(self, metadata: object):
        self._metadata = metadata

    @abstractmethod
    def register_kv_caches(self, kv_cache_tensor): ...

    @abstractmethod
    def start_load_kv(self, stream): ...

    @abstractmethod
    def wait_for_layer_load(self, layer_idx: int, stream): ...

    @abstractmethod
    def save_kv_layer(self, layer_idx: int, stream): ...

    @abstractmethod
    def wait_for_save(self, stream): ...

    @abstractmethod
    def get_finished(self, finished_gen_req_ids: List[int],
                     started_loading_req_ids: List[int]) -> Tuple[List[int], List[int]]: ...


class KvCacheConnectorScheduler(ABC):
    def __init__(self, llm_args):
        self._llm_args = llm_args
        super().__init__()

    @abstractmethod
    def build_connector_meta(self, scheduler_output: SchedulerOutput): ...

    @abstractmethod
    def get_num_new_matched_tokens(self, request, num_computed_tokens: int) -> Tuple[int, bool]: ...

    @abstractmethod
    def request_finished(self, request, cache_block_ids: List[int]) -> bool: ...

    @abstractmethod
    def update_state_after_alloc(self, request, block_ids: List[int]): ...
