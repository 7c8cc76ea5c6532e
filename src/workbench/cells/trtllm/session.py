"""TensorRT-LLM's contract session adapter: the blueprint's Contract Mapping Reference row by row
(:mod:`workbench.cells.request_session`), over this wing's :class:`~workbench.cells.trtllm.cell.TrtLlmCell`.

What is TensorRT-LLM's own here, each from the mapping table (the seed, ``tensorrt-llm-backend.md`` at 2bfdc1f5):

* **Describe**: the model's ceiling and KV geometry from its ``config.json``, the device's memory from NVML; the
  session's window is enforced with ``max_seq_len`` (the cell's ``context_tokens``) and the KV pool with
  ``KvCacheConfig.max_tokens`` (the cell's ``kv_budget_tokens``) sized from ``capacity.Policy`` in bytes read in
  the model's bytes per token — never ``free_gpu_memory_fraction``.
* **Slot switch**: ``LoadModel`` tears the ``LLM`` down and creates it again (the daemon's slot).
* Reuse counters: ``request_perf_metrics.kv_cache_metrics`` (blocks, converted with ``tokens_per_block``; the cell's
  ``perf_metrics`` reading).

Written against the 1.2 LLM API; it runs where tensorrt_llm runs (an NVIDIA GPU). Kept in a file of its own so the
1.4 profile (``cells/trtllm``) can sit beside it.
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

from ..request_session import RequestSession
from ...transport.capacity import Policy
from ...transport.contract import Config, ModelInfo
from ...transport.session import CellSession


class TrtllmSession(RequestSession):
    reuse_counter: ClassVar[str] = ""  # perf_metrics: the cell's Warm reading (PrefixStatus.engine_reused_tokens)

    @classmethod
    def cell_options(cls, options: dict, config: Config, *, slots: int, adapters: Sequence[str],
                     policy: Policy | None = None) -> dict:
        out = super().cell_options(options, config, slots=slots, adapters=adapters, policy=policy)
        if policy is not None and "kv_budget_tokens" not in out and "kv_budget_bytes" not in out:
            free = _gpu_free_bytes()
            if free and (policy.max_resident_bytes or policy.min_free_bytes):
                out["kv_budget_bytes"] = policy.usable_bytes(free)
        return out

    @classmethod
    def model_info(cls, cell: Any, config: Config, policy: Any, kv: tuple[int, str] | None = None) -> ModelInfo:
        info = super().model_info(cell, config, policy, kv)
        free, total, name = _gpu_memory()
        info.free_bytes, info.device_total_bytes = free, total
        info.device_kind, info.device_id = ("cuda", name) if total else ("", "")
        info.usable_bytes = policy.usable_bytes(free, info.weights_bytes) if free else 0
        info.supports_gpu_offload = bool(total)
        return info

    @classmethod
    def work_of(cls, cell: Any) -> dict | None:
        """TensorRT-LLM's own count of its work, from its iteration stats (``LLM.get_stats``, on with the cell's
        ``enable_iter_perf_stats``; the cell shares that one destructive read with its ``iteration_stats`` observer):
        the context tokens its iterations computed (``inflightBatchingStats.numCtxTokens``), the prompt tokens its KV
        manager served from reused blocks (``kvCacheStats.reusedBlocks`` × tokens per block, cumulative; block-granular,
        a partly matched block counted whole), its iterations and the requests it completed. A request refused
        before dispatch runs no iteration, so it moves none of them."""
        work = cell.engine_work()
        if work is None:
            return None
        out = {"prompt_tokens_computed": work["context_tokens"], "iterations": work["iterations"],
               "requests_finished": work["completed_requests"]}
        if "reused_blocks" in work:
            out["prompt_tokens_cached"] = work["reused_blocks"] * cell.opts.tokens_per_block
        return out

    @classmethod
    def inject_fault(cls, cell: Any, sess: CellSession) -> str:
        """Shut the ``LLM`` down under the cell (``LLM.shutdown``): its next request fails inside TensorRT-LLM."""
        cell._llm.shutdown()
        return "LLM.shutdown(): the engine's next request fails inside TensorRT-LLM"

    @classmethod
    def heal_fault(cls, cell: Any) -> str:
        """A new ``LLM`` with the cell's options in place of the one shut down (the mapping row's slot-switch
        mechanism, the slots' bookkeeping kept: a later request re-prefills what the new pool lacks)."""
        cell._stop()
        cell._start()
        return "LLM(...) created again: TensorRT-LLM serves requests again"


def _gpu_memory() -> tuple[int, int, str]:
    from ...nvml import read

    got = read()
    devices = got.get("devices") or []
    if not devices:
        return 0, 0, ""
    d = devices[0]
    return int(d.get("memory_free_bytes") or 0), int(d.get("memory_total_bytes") or 0), str(d.get("name") or "")


def _gpu_free_bytes() -> int:
    return _gpu_memory()[0]


__all__ = ["TrtllmSession"]
