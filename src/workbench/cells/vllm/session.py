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
            "vllm:request_success": "requests_finished"}
    """vLLM's own cumulative counters of its work (``vllm/v1/metrics/loggers.py``), summed over their labels."""

    @classmethod
    def cell_options(cls, options: dict, config: Any, *, slots: int, adapters: Any, policy: Any = None) -> dict:
        return super().cell_options(options, config, slots=slots, adapters=adapters, policy=policy) | {"log_stats": True}

    @classmethod
    def work_of(cls, cell: Any) -> dict | None:
        """vLLM's own cumulative counts of the prompt tokens it took, the tokens it generated and the requests it
        finished (its Prometheus counters, ``LLM.get_metrics``; on with the cell's ``log_stats``): a request refused
        before dispatch leaves them where they were."""
        llm = getattr(cell, "_llm", None)
        if llm is None or not getattr(cell.opts, "log_stats", False):
            return None
        out = dict.fromkeys(cls.WORK.values(), 0)
        for m in llm.get_metrics():
            if m.name in cls.WORK and hasattr(m, "value"):
                out[cls.WORK[m.name]] += int(m.value)
        return out

    @classmethod
    def inject_fault(cls, cell: Any, sess: CellSession) -> str:
        """Take the model away from vLLM's worker through vLLM's own RPC (``LLM.collective_rpc``, as the cell reads
        its KV memory): every later step fails inside vLLM's model runner, as a broken worker would. The engine is
        the slot's, so only a reload (LoadModel) serves again."""
        cell._llm.collective_rpc(_break_worker)
        return "collective_rpc(model_runner.model = None): the engine's next step fails inside vLLM"


def _break_worker(worker: Any) -> bool:
    worker.model_runner.model = None
    return True


__all__ = ["VllmSession"]
