"""TensorRT-LLM KV-cache events → :class:`workbench.engine.KvEvent`.

``LLM.get_kv_cache_events(timeout)`` returns one dict per event, serialized by
``tensorrt_llm._utils.KVCacheEventSerializer`` (1.2 line)::

    {"event_id": int, "window_size": int, ["attention_dp_rank": int,]
     "data": {"type": "created", "num_blocks_per_cache_level": [primary, secondary]}
           | {"type": "stored", "parent_hash": int | None,
              "blocks": [{"type": "stored_block", "block_hash": int, "cache_level": int, "priority": int,
                          "tokens": [{"type": "unique_token", "token_id": int, "token_extra_id": int}]}]}
           | {"type": "removed", "block_hashes": [int]}
           | {"type": "updated", "block_hash": int,
              "cache_level": {"type": "event_diff", "old_value": int, "new_value": int},
              "priority": {"type": "event_diff", "old_value": int, "new_value": int}}}

1.4 adds ``hash_algo`` (``v1_block_key`` under the V1 manager, ``v2_sha256`` under V2) and, under V2,
``layer_group_id`` (PR #13589): :func:`hash_algo` reads it, so no hash is recomputed under the wrong algorithm.
The 1.2 serializer writes both diffs of an ``updated`` event (``_updated_to_json`` calls
``_event_diff_to_json`` on each), and writes ``{}`` for a ``None`` event (``to_json_str``), which
:func:`parse_events` skips as upstream's own tests do (``if event:``). trtllm-serve's
``POST /kv_cache_events`` returns the same dicts as JSON, so strings are accepted too. Reading the
engine's buffer drains it: exactly one consumer (the cell) may call it.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

from ...engine import KvEvent

KINDS = ("created", "stored", "removed", "updated")


def parse_event(raw: Mapping[str, Any] | str) -> KvEvent:
    """One serialized event; raises ValueError on a payload that is not a KV event."""
    event = json.loads(raw) if isinstance(raw, str) else raw
    data = event.get("data")
    if not isinstance(data, Mapping) or "type" not in data:
        raise ValueError(f"not a TensorRT-LLM KV event (no data.type): {event!r}")
    kind = data["type"]
    common = {"event_id": int(event.get("event_id", 0)), "window_size": event.get("window_size"), "raw": dict(event)}
    if kind == "created":
        return KvEvent(kind, num_blocks=tuple(int(n) for n in data.get("num_blocks_per_cache_level", ())), **common)
    if kind == "stored":
        blocks = list(data.get("blocks", ()))
        parent = data.get("parent_hash")
        return KvEvent(
            kind,
            block_hashes=tuple(int(b["block_hash"]) for b in blocks),
            parent_hash=None if parent is None else int(parent),
            block_tokens=tuple(tuple(int(t["token_id"]) for t in b.get("tokens", ())) for b in blocks),
            priority=_uniform(b.get("priority") for b in blocks),
            cache_level=_uniform(b.get("cache_level") for b in blocks),
            **common,
        )
    if kind == "removed":
        return KvEvent(kind, block_hashes=tuple(int(h) for h in data.get("block_hashes", ())), **common)
    if kind == "updated":
        return KvEvent(
            kind,
            block_hashes=(int(data["block_hash"]),),
            priority=_new_value(data.get("priority")),
            cache_level=_new_value(data.get("cache_level")),
            **common,
        )
    raise ValueError(f"unknown TensorRT-LLM KV event type {kind!r}; known: {', '.join(KINDS)}")


def parse_events(raws: Iterable[Mapping[str, Any] | str | None]) -> list[KvEvent]:
    """Every event of one drain, in engine order; empty events (``{}`` or ``None``) carry nothing and are skipped."""
    events = []
    for raw in raws:
        event = json.loads(raw) if isinstance(raw, str) else raw
        if event:
            events.append(parse_event(event))
    return events


def hash_algo(events: Iterable[KvEvent]) -> str | None:
    """The hash algorithm the events state (1.4: ``hash_algo`` beside ``window_size``, or inside ``data``); None
    where none states one (1.2: its one block key, never named)."""
    for e in events:
        said = e.raw.get("hash_algo") or (e.raw.get("data") or {}).get("hash_algo")
        if said:
            return str(said)
    return None


def capacity_blocks(events: Iterable[KvEvent]) -> dict[int | None, int]:
    """Primary-pool blocks per attention window, from ``created`` events (the real pool size)."""
    return {e.window_size: e.num_blocks[0] for e in events if e.kind == "created" and e.num_blocks}


def _uniform(values: Iterable[Any]) -> int | None:
    """The value shared by every block of a stored event, else None (mixed or absent)."""
    seen = set(values)
    return int(seen.pop()) if len(seen) == 1 and None not in seen else None


def _new_value(diff: Mapping[str, Any] | None) -> int | None:
    return None if not diff else int(diff["new_value"])


__all__ = ["KINDS", "capacity_blocks", "hash_algo", "parse_event", "parse_events"]
