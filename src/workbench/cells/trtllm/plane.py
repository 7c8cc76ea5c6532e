"""TensorRT-LLM's answers to the event plane (:class:`workbench.events.plane.EventPlane`): its v1 block key, the
rule its ``/server_info`` states (1.3+), its LoRA key; its one destructive queue has room for no second consumer."""

from __future__ import annotations

from typing import Any, Mapping

from ...engine import Description
from ...events.plane import Watch
from ...events.sources import EventSource
from .hashing import TrtllmHasher

HASH_ALGO = "v1_block_key"  # what the cell's description and 1.3+'s /server_info call its block key


def hasher(d: Description, seed: str | None, block_size: int) -> TrtllmHasher:
    """V1's block key, where the cell's description says the engine hashes with it: the algorithm its events
    stated (1.4, read before any hash is recomputed), else the one the manager in use makes."""
    algo = d.extra.get("kv_cache_hash_algo")
    if algo != HASH_ALGO:
        where = d.extra.get("kv_cache_hash_algo_source") or "the cell's description"
        raise ValueError(f"{d.engine} hashes with {algo!r} ({where}), not {HASH_ALGO!r}; the workbench recomputes "
                         "only V1's block key: open the cell with kv_manager='v1'")
    return TrtllmHasher(block_size)


def rule(doc: Mapping[str, Any]) -> tuple[int | None, str | None]:
    """The top-level ``tokens_per_block`` and ``kv_cache_hash_algo``."""
    return doc.get("tokens_per_block"), doc.get("kv_cache_hash_algo")


def rule_hasher(block_size: int, algo: str, d: Description) -> TrtllmHasher:
    if algo != HASH_ALGO:
        raise ValueError(f"{algo!r} is not TensorRT-LLM's {HASH_ALGO}")
    return TrtllmHasher(block_size)


def lora_key(d: Description) -> int:
    """Its LoRA task id: the cell loads its adapter as ``lora_int_id=1`` (cells/trtllm/cell.py)."""
    return 1


def subscribe(d: Description) -> EventSource | None:
    return None


def watch(endpoint: str, replay: str | None, timeout_s: float, block_size: int, seed: str | None,
          algo: str) -> Watch:
    """trtllm-serve's ``POST /kv_cache_events`` drain at ``http(s)://HOST:PORT``; a drain blocks on the server, so a
    refresh waits the timeout."""
    from .sources import TrtllmHttpSource

    if replay is not None:
        raise ValueError("--replay: trtllm-serve 1.2 keeps no replay buffer; --replay is vLLM's "
                         "(KVEventsConfig.replay_endpoint)")
    return Watch(TrtllmHttpSource(endpoint, timeout_s=timeout_s), TrtllmHasher(block_size), timeout_s)
