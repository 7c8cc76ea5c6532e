"""vLLM's contract session adapter: the TensorRT-LLM mapping rows where vLLM has the mechanism
(:mod:`workbench.cells.request_session`), over this wing's :class:`~workbench.cells.vllm.cell.VllmCell`.

vLLM keys prefix reuse on ``cache_salt`` (``vllm/v1/core/kv_cache_utils.py``: the first block's hash), reports its own
reuse per request (``RequestOutput.num_cached_tokens``, whole blocks, never the last prompt token) and answers a
``max_tokens=1`` warm-up, so it follows the rows: salted requests, warm-up EnsurePrefix, deferred PrefillSuffix,
capabilities false/false/false/true, text snapshots, Embed refused (a generate runner).
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..request_session import RequestSession
from ...transport.session import CellSession


class VllmSession(RequestSession):
    reuse_counter: ClassVar[str] = "num_cached_tokens"

    WORK = {"vllm:prompt_tokens": "prompt_tokens", "vllm:generation_tokens": "generation_tokens",
            "vllm:request_success": "requests_finished", "vllm:prefix_cache_hits": "prompt_tokens_cached",
            ("vllm:prompt_tokens_by_source", "local_compute"): "prompt_tokens_computed"}
    """vLLM's own cumulative counters of its work (``vllm/v1/metrics/loggers.py``), summed over their labels: the
    prompt tokens its requests carried, the tokens it generated, the requests it finished, the prompt tokens its KV
    cache manager found cached (``prefix_cache_hits``: ``KVCacheManager.record_prefix_cache_stats`` at scheduling,
    ``vllm/v1/core/kv_cache_manager.py``) and those it computed (``prompt_tokens_by_source{source="local_compute"}``:
    ``PromptTokenStats.computed``, ``vllm/v1/metrics/stats.py``)."""

    @classmethod
    def cell_options(cls, options: dict, config: Any, *, slots: int, adapters: Any, policy: Any = None) -> dict:
        return super().cell_options(options, config, slots=slots, adapters=adapters, policy=policy) | {"log_stats": True}

    @classmethod
    def work_of(cls, cell: Any) -> dict | None:
        """vLLM's own cumulative counts of its work (:data:`WORK`; its Prometheus counters, ``LLM.get_metrics``, on
        with the cell's ``log_stats``): a request refused before dispatch leaves them where they were."""
        llm = getattr(cell, "_llm", None)
        if llm is None or not getattr(cell.opts, "log_stats", False):
            return None
        out = dict.fromkeys(cls.WORK.values(), 0)
        for m in llm.get_metrics():
            key = cls.WORK.get((m.name, (m.labels or {}).get("source"))) or cls.WORK.get(m.name)
            if key is not None and hasattr(m, "value"):
                out[key] += int(m.value)
        return out

    @classmethod
    def kv_bytes_read(cls, cell: Any, free_slot: int | None) -> int | None:
        """The bytes of each worker's KV tensors over the tokens its pool holds (``LLM.collective_rpc``: the storage
        the runner allocated ÷ its ``num_blocks`` × block size): a second path to ``Describe``'s per-token figure,
        which vLLM's KV spec gives (``page_size_bytes``). None where the engine runs out of process."""
        from .cell import _worker_kv_memory

        if not getattr(cell, "_inprocess", False):
            return None
        block = int(cell._engine.vllm_config.cache_config.block_size)
        got = cell._llm.collective_rpc(_worker_kv_memory)
        return int(round(sum(w["tensor_bytes"] / (w["num_blocks"] * block) for w in got)))

    @classmethod
    def inject_fault(cls, cell: Any, sess: CellSession) -> str:
        """Take the model away from vLLM's worker through vLLM's own RPC (``LLM.collective_rpc``, as the cell reads
        its KV memory): every later step fails inside vLLM's model runner, as a broken worker would. The engine is
        the slot's, so only a reload (LoadModel) serves again."""
        cell._llm.collective_rpc(_break_worker)
        return "collective_rpc(model_runner.model = None): the engine's next step fails inside vLLM"

    @classmethod
    def heal_fault(cls, cell: Any) -> str:
        """The model given back to the worker (``LLM.collective_rpc``); the cell aborted the request whose step
        failed, so vLLM schedules afresh and serves again."""
        cell._llm.collective_rpc(_heal_worker)
        return "collective_rpc(model_runner.model restored): vLLM's steps run again"


def _break_worker(worker: Any) -> bool:
    runner = worker.model_runner
    if runner.model is not None:
        runner._workbench_model = runner.model  # kept for _heal_worker
    runner.model = None
    return True


def _heal_worker(worker: Any) -> bool:
    runner = worker.model_runner
    runner.model = getattr(runner, "_workbench_model", runner.model)
    return True


__all__ = ["VllmSession"]
