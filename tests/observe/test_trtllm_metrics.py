"""TensorRT-LLM per-request perf metrics and iteration stats (``workbench.cells.trtllm.metrics``)."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

from workbench.cells.trtllm import metrics as trtllm_metrics


def test_metrics_parser_on_bindings_and_serve_shapes():
    perf = SimpleNamespace(
        timing_metrics=SimpleNamespace(arrival_time=timedelta(seconds=100),
                                       first_scheduled_time=timedelta(seconds=100.5),
                                       first_token_time=timedelta(seconds=101), last_token_time=timedelta(seconds=103),
                                       kv_cache_transfer_start=timedelta(0), kv_cache_transfer_end=timedelta(0)),
        kv_cache_metrics=SimpleNamespace(num_total_allocated_blocks=4, num_new_allocated_blocks=1, num_reused_blocks=3,
                                         num_missed_blocks=1, kv_cache_hit_rate=0.75),
        first_iter=5, last_iter=9, iter=9)
    c = trtllm_metrics.request_counters(perf, 32)
    assert c["num_reused_blocks"] == 3 and c["reused_tokens_est"] == 96 and c["kv_cache_hit_rate"] == 0.75
    assert c["engine_ttft_s"] == 1.0 and c["engine_queue_s"] == 0.5 and c["engine_decode_s"] == 2.0
    assert c["engine_e2e_s"] == 3.0 and "engine_kv_transfer_s" not in c and c["first_iter"] == 5
    assert trtllm_metrics.reused_tokens(c, 200) == 96
    assert trtllm_metrics.reused_tokens(c, 90) == 89  # capped: the last prompt token is never reused
    assert trtllm_metrics.reused_tokens({}, 90) is None
    assert trtllm_metrics.request_counters(None, 32) == {}
    serve = {"first_iter": 1, "last_iter": 3, "timing_metrics": {"arrival_time": 1.0, "first_token_time": 1.25},
             "kv_cache_metrics": {"num_total_allocated_blocks": 2, "num_new_allocated_blocks": 2,
                                  "num_reused_blocks": 0, "num_missed_blocks": 2}}
    s = trtllm_metrics.request_counters(serve, 16)
    assert s["engine_ttft_s"] == 0.25 and s["missed_tokens_est"] == 32 and "kv_cache_hit_rate" not in s
    stats = trtllm_metrics.parse_iteration_stats(['{"iter": 1, "kvCacheStats": {"maxNumBlocks": 10, '
                                                  '"tokensPerBlock": 32}}', {"iter": 2}])
    assert [s["iter"] for s in stats] == [1, 2]
    assert trtllm_metrics.kv_stats_capacity(stats[0]) == (10, 32) and trtllm_metrics.kv_stats_capacity(stats[1]) is None
