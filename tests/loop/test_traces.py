"""The three trace formats, the shipped files, and bad input."""

from __future__ import annotations

import hashlib
import json
import lzma
import re

import pytest

from workbench.loop import traces
from workbench.loop.traces import BlockTurn, ChatTurn, TraceError


@pytest.mark.parametrize("name", sorted(traces.BUILTIN))
def test_shipped_traces_are_the_upstream_files(name):
    """Decompressed, each file has the sha256 its SOURCE.md states, and its licence sits beside it."""
    path = traces.resolve(name)
    stem = path.name.removesuffix(".xz")
    source = (path.parent / f"{stem}.SOURCE.md").read_text()
    stated = re.search(r"sha256: ([0-9a-f]{64})", source).group(1)
    assert hashlib.sha256(lzma.open(path).read()).hexdigest() == stated
    assert (path.parent / f"{stem}.LICENSE").read_text().strip()
    assert traces.load(name).sha256 == stated


def test_taubench_turns_are_assistant_messages():
    t = traces.load("taubench")
    assert t.format == "taubench" and len(t.sessions) == 200
    turn = t.sessions[0].turns[0]
    assert isinstance(turn, ChatTurn) and turn.reply["role"] == "assistant"
    assert turn.messages[0]["role"] == "system" and turn.messages[-1]["role"] != "assistant"
    # 2,454 assistant messages in the file (SOURCE.md), none of them first in its conversation
    assert t.turns == 2454
    with_calls = [tu for s in t.sessions for tu in s.turns if tu.reply.get("tool_calls")]
    assert len(with_calls) > 100


def test_kvcache_tester_sessions_and_blocks():
    t = traces.load("claude-code")
    assert t.format == "kvcache-tester" and t.block_tokens == 64
    main, *subs = t.sessions
    assert len(main.turns) == 76 and [len(s.turns) for s in subs] == [7, 7]
    first = main.turns[0]
    assert isinstance(first, BlockTurn) and len(first.blocks) * 64 + first.tail_tokens == 18333
    assert first.tail_id is None  # kvcache-tester hashes full blocks only


def test_mooncake_partial_last_block(hand_trace):
    t = traces.load(str(hand_trace))
    assert t.format == "mooncake" and t.block_tokens == 512 and t.turns == 4
    big = traces.load("mooncake")
    assert big.turns == 12031
    first = big.sessions[0].turns[0]  # 6758 tokens, 14 ids: 13 full blocks and a 102-token tail of block 13
    assert first.blocks == tuple(range(13)) and first.tail_tokens == 6758 - 13 * 512 and first.tail_id == 13


def test_subset_takes_first_sessions_and_turns():
    t = traces.load("claude-code").subset(sessions=2, turns=3)
    assert [len(s.turns) for s in t.sessions] == [3, 3]
    with pytest.raises(TraceError, match="--turns"):
        t.subset(turns=0)


@pytest.mark.parametrize("content, message", [
    ("not json at all\n", "not JSON"),
    (json.dumps({"requests": [], "block_size": 0}), "block_size"),
    (json.dumps([{"no": "traj"}]), "traj"),
    (json.dumps({"input_length": 10, "output_length": 1, "hash_ids": [0, 1]}) + "\n", "cannot have"),
])
def test_bad_trace_files_name_the_problem(tmp_path, content, message):
    p = tmp_path / "bad.json"
    p.write_text(content)
    with pytest.raises(TraceError, match=message):
        traces.load(str(p))


def test_unknown_trace_lists_the_names():
    with pytest.raises(TraceError, match="taubench, claude-code, mooncake"):
        traces.load("no-such-trace")


@pytest.mark.parametrize("content, message", [
    (json.dumps([{"traj": ["hello", "world"]}]), "τ-bench run 0 message 0 is a str; each message must be an object"),
    (json.dumps([{"traj": [{"role": "user", "content": {"nested": [1]}}]}]), "'content' must be a string or null"),
    (json.dumps([{"traj": [{"content": "no role"}]}]), "no string 'role'"),
    (json.dumps([{"traj": [{"role": "assistant", "content": "", "tool_calls": ["x"]}]}]), "'tool_calls' must be"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    (json.dumps({"requests": ["not an object"], "block_size": 16}), "malformed trace"),
])
def test_malformed_messages_and_deep_nesting_name_the_problem(tmp_path, content, message):
    p = tmp_path / "bad.json"
    p.write_text(content)
    with pytest.raises(TraceError, match=message):
        traces.load(str(p))
