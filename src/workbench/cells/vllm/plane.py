"""vLLM's answers to the event plane (:class:`workbench.events.plane.EventPlane`): its block hash, the rule its
``/server_info`` states, its LoRA key and the stream others can join."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from ...engine import Description
from ...events.plane import Watch
from ...events.sources import EventSource
from .hashing import Lora, VllmHasher


def hasher(d: Description, seed: str | None, block_size: int) -> VllmHasher:
    algo = d.extra.get("prefix_caching_hash_algo")
    if not algo:
        raise ValueError(f"{d.engine} declares no prefix_caching_hash_algo")
    return VllmHasher(block_size, algo, seed)


def rule(doc: Mapping[str, Any]) -> tuple[int | None, str | None]:
    """``vllm_config.cache_config.block_size`` and ``prefix_caching_hash_algo``."""
    config = doc.get("vllm_config")
    cache = config.get("cache_config") if isinstance(config, Mapping) else None
    cache = cache if isinstance(cache, Mapping) else {}
    return cache.get("block_size"), cache.get("prefix_caching_hash_algo")


def rule_hasher(block_size: int, algo: str, d: Description) -> VllmHasher:
    return VllmHasher(block_size, algo, d.extra.get("kv_hash_seed"))


def lora_key(d: Description) -> Lora:
    """The adapter's ``lora_name`` and ``lora_path`` (the cell sends ``LoRARequest(Path(path).name, 1, path)``)."""
    path = (d.extra.get("adapters") or [None])[0]
    return Lora(Path(path).name, path)


def subscribe(d: Description) -> EventSource | None:
    """A subscriber of its own, where the publisher binds ``kv_events_endpoint`` on ``ipc://`` (with
    ``kv_events_replay_endpoint`` where it has one)."""
    from .events import Subscriber

    endpoint = d.extra.get("kv_events_endpoint")
    if not endpoint or not str(endpoint).startswith("ipc://"):
        return None
    return Subscriber(connect=endpoint, replay=d.extra.get("kv_events_replay_endpoint"))


def _zmq(option: str, value: str) -> str:
    """A ZMQ endpoint as vLLM's publisher binds it: ``ipc://PATH`` or ``tcp://HOST:PORT`` (ZMQ connects lazily, so a
    wrong one would otherwise wait in silence, a replay one until the first gap)."""
    scheme, _, rest = value.partition("://")
    host, _, port = rest.rpartition(":")
    if (scheme == "ipc" and rest) or (scheme == "tcp" and host and port.isdigit() and 0 < int(port) < 65536):
        return value
    raise ValueError(f"{option} {value!r}: give vLLM's ZMQ endpoint (ipc://PATH or tcp://HOST:PORT, as its "
                     "--kv-events-config binds it)")


def watch(endpoint: str, replay: str | None, timeout_s: float, block_size: int, seed: str | None,
          algo: str) -> Watch:
    """vLLM's ZMQ publisher (``KVEventsConfig.endpoint``), with its replay endpoint where one is given."""
    from .events import Subscriber

    connect, again = _zmq("--endpoint", endpoint), None if replay is None else _zmq("--replay", replay)
    hasher = VllmHasher(block_size, algo, seed)
    return Watch(Subscriber(connect=connect, replay=again), hasher, None)
