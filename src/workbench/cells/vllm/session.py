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

    @classmethod
    def work_of(cls, cell: Any) -> dict | None:
        """vLLM's own count of the requests it was given (``LLM.request_counter``, vllm/entrypoints/llm.py, read
        where the cell's engine runs in this process): an overflow refused before dispatch leaves it where it was."""
        counter = getattr(getattr(cell, "_llm", None), "request_counter", None)
        value = getattr(counter, "counter", None)
        return None if value is None else {"requests": int(value)}

    @classmethod
    def inject_fault(cls, cell: Any, sess: CellSession) -> str:
        """Shut vLLM's engine core down under the cell (``EngineCoreClient.shutdown``): its next request fails
        inside vLLM."""
        cell._engine.engine_core.shutdown()
        return "engine_core.shutdown(): the engine's next request fails inside vLLM"


__all__ = ["VllmSession"]
