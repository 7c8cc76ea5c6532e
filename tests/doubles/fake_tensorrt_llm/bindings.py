"""``tensorrt_llm.bindings.executor`` types the cell touches, as plain Python (the real ones are C++).

Constructor arguments and attribute names follow ``cpp/tensorrt_llm/nanobind/executor/request.cpp``.
"""

from dataclasses import dataclass, field
from datetime import timedelta
from typing import List, Optional


class KvCacheRetentionConfig:
    class TokenRangeRetentionConfig:
        def __init__(self, token_start: int, token_end: Optional[int], priority: int,
                     duration_ms: Optional[timedelta] = None):
            if not 0 <= priority <= 100:
                raise ValueError("priority must be in [0, 100]")
            if duration_ms is not None and not isinstance(duration_ms, timedelta):
                raise TypeError("duration_ms must be a datetime.timedelta")
            if token_end is not None and token_start >= token_end:
                raise ValueError("token_start must be < token_end")
            self.token_start, self.token_end, self.priority, self.duration_ms = (
                token_start, token_end, priority, duration_ms)

    def __init__(self, token_range_retention_configs: List["KvCacheRetentionConfig.TokenRangeRetentionConfig"],
                 decode_retention_priority: int = 35, decode_duration_ms: Optional[timedelta] = None,
                 transfer_mode: str = "DRAM", directory: Optional[str] = None):
        self._ranges = list(token_range_retention_configs)
        self._decode = (decode_retention_priority, decode_duration_ms)
        self._transfer_mode, self._directory = transfer_mode, directory

    @property
    def token_range_retention_configs(self):
        return self._ranges

    @property
    def decode_retention_priority(self) -> int:
        return self._decode[0]

    @property
    def decode_duration_ms(self):
        return self._decode[1]

    @property
    def transfer_mode(self):
        return self._transfer_mode

    @property
    def directory(self):
        return self._directory


@dataclass
class TimingMetrics:
    arrival_time: timedelta = timedelta(0)
    first_scheduled_time: timedelta = timedelta(0)
    first_token_time: timedelta = timedelta(0)
    last_token_time: timedelta = timedelta(0)
    kv_cache_transfer_start: timedelta = timedelta(0)
    kv_cache_transfer_end: timedelta = timedelta(0)


@dataclass
class KvCacheMetrics:
    num_total_allocated_blocks: int = 0
    num_new_allocated_blocks: int = 0
    num_reused_blocks: int = 0
    num_missed_blocks: int = 0
    kv_cache_hit_rate: float = 0.0


@dataclass
class RequestPerfMetrics:
    timing_metrics: TimingMetrics = field(default_factory=TimingMetrics)
    kv_cache_metrics: KvCacheMetrics = field(default_factory=KvCacheMetrics)
    first_iter: Optional[int] = None
    last_iter: Optional[int] = None
    iter: Optional[int] = None
