"""Hand-built traces for the loop tests (written into tmp, in the formats users bring)."""

from __future__ import annotations

import json

import pytest

# Mooncake format: 512-token blocks, the last one partial. Four requests of one stream:
# [0,1,2] then [0,1,2,3] (extends), [0,1,5] (diverges after block 1), [0,1,2,3,4] (extends turn 2).
REQUESTS = [
    {"timestamp": 0, "input_length": 3 * 512, "output_length": 512, "hash_ids": [0, 1, 2]},
    {"timestamp": 1, "input_length": 4 * 512, "output_length": 512, "hash_ids": [0, 1, 2, 3]},
    {"timestamp": 2, "input_length": 3 * 512, "output_length": 512, "hash_ids": [0, 1, 5]},
    {"timestamp": 3, "input_length": 5 * 512, "output_length": 512, "hash_ids": [0, 1, 2, 3, 4]},
]


@pytest.fixture
def hand_trace(tmp_path):
    p = tmp_path / "hand.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in REQUESTS))
    return p
