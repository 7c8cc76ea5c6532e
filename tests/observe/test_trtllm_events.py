"""TensorRT-LLM KV-event parsing (``workbench.cells.trtllm.events``) on the 1.2 serializer's shapes."""

from __future__ import annotations

import json

import pytest

from workbench.cells.trtllm import events as trtllm_events


def test_event_parser_on_documented_shapes():
    raw = [
        {"event_id": 0, "window_size": 4096, "data": {"type": "created", "num_blocks_per_cache_level": [512, 128]}},
        {"event_id": 1, "window_size": 4096, "attention_dp_rank": 0, "data": {
            "type": "stored", "parent_hash": None, "blocks": [
                {"type": "stored_block", "block_hash": 2 ** 63 + 5, "cache_level": 0, "priority": 100,
                 "tokens": [{"type": "unique_token", "token_id": 11, "token_extra_id": 0},
                            {"type": "unique_token", "token_id": 12, "token_extra_id": 0}]},
                {"type": "stored_block", "block_hash": 7, "cache_level": 0, "priority": 35,
                 "tokens": [{"type": "unique_token", "token_id": 13, "token_extra_id": 0}]}]}},
        json.dumps({"event_id": 2, "window_size": 4096, "data": {"type": "removed", "block_hashes": [7, 8]}}),
        {"event_id": 3, "window_size": 4096, "data": {
            "type": "updated", "block_hash": 2 ** 63 + 5,
            "cache_level": {"type": "event_diff", "old_value": 0, "new_value": 1},
            "priority": {"type": "event_diff", "old_value": 100, "new_value": 35}}},
    ]
    created, stored, removed, offloaded = trtllm_events.parse_events(raw)
    assert created.kind == "created" and created.num_blocks == (512, 128) and created.window_size == 4096
    assert stored.block_hashes == (2 ** 63 + 5, 7) and stored.parent_hash is None
    assert stored.block_tokens == ((11, 12), (13,)) and stored.priority is None and stored.cache_level == 0
    assert removed.kind == "removed" and removed.block_hashes == (7, 8) and removed.event_id == 2
    assert (offloaded.cache_level, offloaded.priority) == (1, 35)
    assert stored.raw["attention_dp_rank"] == 0
    assert trtllm_events.capacity_blocks([created, stored]) == {4096: 512}
    with pytest.raises(ValueError, match="unknown"):
        trtllm_events.parse_event({"event_id": 5, "data": {"type": "evicted"}})
    with pytest.raises(ValueError, match="not a TensorRT-LLM KV event"):
        trtllm_events.parse_event({"event_id": 5})



def test_an_empty_event_is_skipped_not_fatal():
    """``KVCacheEventSerializer.to_json_str(None)`` is ``{}`` (tensorrt_llm/_utils.py); upstream tests skip it."""
    created = {"event_id": 0, "window_size": 256, "data": {"type": "created", "num_blocks_per_cache_level": [8, 0]}}
    assert [e.kind for e in trtllm_events.parse_events([{}, created, None, "{}"])] == ["created"]
