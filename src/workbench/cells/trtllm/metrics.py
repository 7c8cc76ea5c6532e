"""TensorRT-LLM per-request perf metrics and iteration stats → plain dicts.

Per request (``LLM(return_perf_metrics=True)``), ``RequestOutput.outputs[i].request_perf_metrics``
is a ``tensorrt_llm.bindings.executor.RequestPerfMetrics`` with

* ``kv_cache_metrics``: ``num_total_allocated_blocks``, ``num_new_allocated_blocks``,
  ``num_reused_blocks``, ``num_missed_blocks``, ``kv_cache_hit_rate`` — **blocks**, measured once
  when the request's first context chunk is admitted; decode blocks are not counted;
* ``timing_metrics``: ``arrival_time``, ``first_scheduled_time``, ``first_token_time``,
  ``last_token_time``, ``kv_cache_transfer_start``, ``kv_cache_transfer_end`` (``timedelta`` on the
  engine's steady clock; trtllm-serve's ``/perf_metrics`` gives seconds);
* ``first_iter``, ``last_iter``, ``iter``.

The same names are accepted as attributes or as dict keys, so a ``/perf_metrics`` payload parses
too. Iteration stats (``LLM(enable_iter_perf_stats=True)``): ``LLM.get_stats`` returns a list of dicts
(``IterationResult.get_results`` ``json.loads`` each entry, ``tensorrt_llm/executor/result.py``) and
``[]`` before the first request; trtllm-serve's ``/metrics`` JSON strings are accepted too.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any, Iterable, Mapping

KV_FIELDS = (
    "num_total_allocated_blocks",
    "num_new_allocated_blocks",
    "num_reused_blocks",
    "num_missed_blocks",
    "kv_cache_hit_rate",
)
TIMING_FIELDS = (
    "arrival_time",
    "first_scheduled_time",
    "first_token_time",
    "last_token_time",
    "kv_cache_transfer_start",
    "kv_cache_transfer_end",
)
_BLOCK_COUNTS = {"num_total_allocated_blocks": "total_allocated", "num_new_allocated_blocks": "new_allocated",
                 "num_reused_blocks": "reused", "num_missed_blocks": "missed"}


def _get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def seconds(value: Any) -> float | None:
    """A timing value in seconds: ``timedelta`` from the bindings, a number from trtllm-serve."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value)


def kv_cache_metrics(perf: Any, tokens_per_block: int) -> dict:
    """The engine's block counters for one request, plus ``*_tokens_est`` = blocks × tokens_per_block.

    The estimates are upper bounds on token counts: a partially matched block counts as one
    reused block, and a request's last block is rarely full.
    """
    kv = _get(perf, "kv_cache_metrics") if perf is not None else None
    if kv is None:
        return {}
    out: dict[str, Any] = {}
    for name in KV_FIELDS:
        value = _get(kv, name)
        if value is not None:
            out[name] = float(value) if name == "kv_cache_hit_rate" else int(value)
    out["tokens_per_block"] = tokens_per_block
    for name, short in _BLOCK_COUNTS.items():
        if name in out:
            out[f"{short}_tokens_est"] = out[name] * tokens_per_block
    return out


def timing_metrics(perf: Any) -> dict:
    """Engine timestamps in seconds and the intervals derived from them (queue, TTFT, decode, end to end).

    A zero timestamp means "not recorded" (``arrival_time`` needs the LLM-level flag), so intervals
    are derived only from timestamps that are set.
    """
    tm = _get(perf, "timing_metrics") if perf is not None else None
    if tm is None:
        return {}
    stamps = {name: seconds(_get(tm, name)) for name in TIMING_FIELDS}
    out: dict[str, float] = {f"{name}_s": v for name, v in stamps.items() if v is not None}

    def interval(key: str, start: str, end: str) -> None:
        a, b = stamps.get(start), stamps.get(end)
        if a and b:
            out[key] = b - a

    interval("queue_s", "arrival_time", "first_scheduled_time")
    interval("ttft_s", "arrival_time", "first_token_time")
    interval("decode_s", "first_token_time", "last_token_time")
    interval("e2e_s", "arrival_time", "last_token_time")
    interval("kv_transfer_s", "kv_cache_transfer_start", "kv_cache_transfer_end")
    return out


def request_counters(perf: Any, tokens_per_block: int) -> dict:
    """Flat engine counters of one request: kv_cache_metrics, iteration span, ``engine_*`` timings."""
    if perf is None:
        return {}
    out = kv_cache_metrics(perf, tokens_per_block)
    for name in ("first_iter", "last_iter", "iter"):
        value = _get(perf, name)
        if value is not None:
            out[name] = int(value)
    out.update({f"engine_{k}": v for k, v in timing_metrics(perf).items()})
    return out


def reused_tokens(counters: Mapping[str, Any], prompt_tokens: int) -> int | None:
    """Reused prompt tokens estimated from blocks, or None when the engine reported no counters.

    ``num_reused_blocks × tokens_per_block``, capped at ``prompt_tokens − 1``: TensorRT-LLM never
    reuses a prompt's last token (``addSequence`` matches ``inputLength − 1`` tokens).
    """
    blocks = counters.get("num_reused_blocks")
    if blocks is None:
        return None
    return max(0, min(blocks * counters["tokens_per_block"], prompt_tokens - 1))


def parse_iteration_stats(entries: Iterable[Mapping[str, Any] | str]) -> list[dict]:
    """``LLM.get_stats`` entries (dicts, or JSON strings from trtllm-serve) as dicts, in engine order."""
    return [json.loads(e) if isinstance(e, str) else dict(e) for e in entries]


WORK_BLOCKS = {"allocTotalBlocks": "alloc_total_blocks", "allocNewBlocks": "alloc_new_blocks",
               "reusedBlocks": "reused_blocks", "missedBlocks": "missed_blocks"}
"""``kvCacheStats``' block counters: cumulative over the KV manager's life (``KVCacheManager::getKvCacheStats``; a
request's ``kv_cache_metrics`` are their deltas around its ``addSequence``)."""


def new_work() -> dict[str, int]:
    """Cumulative engine work as the iteration stats count it, before any entry is folded in."""
    return dict.fromkeys(("iterations", "context_tokens", "completed_requests", *WORK_BLOCKS.values()), 0)


def fold_work(work: dict[str, int], seen: dict[str, int], stats: Iterable[Mapping[str, Any]]) -> None:
    """Fold iteration stats entries into ``work`` (cumulative, in place): one per engine iteration,
    ``inflightBatchingStats.numCtxTokens`` (the context tokens that iteration computed: the prompt from
    ``context_current_position``, which block reuse advances; ``model_engine.py`` ``_prepare_tp_inputs``),
    ``numCompletedRequests``, and the growth of ``kvCacheStats``' cumulative block counters since ``seen`` (their last
    values on this KV manager; a value below it is a new manager's count from 0). ``seen`` records which counters the
    engine stated at all (``reused_blocks`` is no reading where ``reusedBlocks`` never came)."""
    for s in stats:
        work["iterations"] += 1
        ifb = s.get("inflightBatchingStats")
        if isinstance(ifb, Mapping):
            work["context_tokens"] += int(ifb.get("numCtxTokens") or 0)
        work["completed_requests"] += int(s.get("numCompletedRequests") or 0)
        kv = s.get("kvCacheStats")
        if not isinstance(kv, Mapping):
            continue
        for name, key in WORK_BLOCKS.items():
            if kv.get(name) is None:
                continue
            value, last = int(kv[name]), seen.get(name, 0)
            work[key] += value - last if value >= last else value
            seen[name] = value


def kv_stats_capacity(stats: Mapping[str, Any]) -> tuple[int, int] | None:
    """``(maxNumBlocks, tokensPerBlock)`` of one iteration's ``kvCacheStats``, when present."""
    kv = stats.get("kvCacheStats")
    if not isinstance(kv, Mapping) or kv.get("maxNumBlocks") is None or kv.get("tokensPerBlock") is None:
        return None
    return int(kv["maxNumBlocks"]), int(kv["tokensPerBlock"])


__all__ = [
    "KV_FIELDS",
    "TIMING_FIELDS",
    "WORK_BLOCKS",
    "fold_work",
    "kv_cache_metrics",
    "kv_stats_capacity",
    "new_work",
    "parse_iteration_stats",
    "reused_tokens",
    "request_counters",
    "seconds",
    "timing_metrics",
]
