"""The workload's order (waves of interleaved sessions), its best placement, and the trace rendered into
requests."""

from __future__ import annotations

import pytest

from workbench.cells.vllm.hashing import VllmHasher
from workbench.gateway.workload import BestPlacement, Request, sessions_from_trace, waves


def _sessions(*lengths: int) -> list[list[Request]]:
    return [[Request(s, t, [s, t], 1) for t in range(n)] for s, n in enumerate(lengths)]


def test_waves_interleave_sessions_a_few_at_a_time_in_rotation():
    plan = waves(_sessions(2, 3, 1), concurrency=2)
    assert [[(r.session, r.turn) for r in w] for w in plan] == [
        [(0, 0), (1, 0)], [(2, 0), (0, 1)], [(1, 1)], [(1, 2)]]


def test_waves_keep_each_sessions_turns_in_order_and_send_every_request_once():
    sessions = _sessions(3, 3, 3, 3)
    plan = waves(sessions, concurrency=3)
    sent = [(r.session, r.turn) for w in plan for r in w]
    assert sorted(sent) == sorted((r.session, r.turn) for s in sessions for r in s)
    for s in range(4):
        assert [t for (x, t) in sent if x == s] == [0, 1, 2]
    assert all(len({r.session for r in w}) == len(w) <= 3 for w in plan)


def test_waves_refuse_no_concurrency():
    with pytest.raises(ValueError, match="concurrency"):
        waves(_sessions(1), 0)


def test_best_placement_is_the_longest_prefix_any_earlier_request_holds():
    best = BestPlacement(VllmHasher(4))
    a = list(range(10, 23))  # 3 whole blocks and one token
    assert best.see(a) == 0
    assert best.see(a + [1, 2, 3, 4, 5]) == 12  # a's three blocks; the new fourth block is not held yet
    assert best.see([10, 11, 12, 13, 99, 98, 97, 96, 1]) == 4
    assert best.see(a[:12]) == 8  # never the last token: two of its three blocks


def test_a_hash_only_trace_becomes_sessions_of_growing_prompts():
    sessions, rule = sessions_from_trace("claude-code", sessions=3, turns=3, context_tokens=2048, vocab_size=512)
    assert [len(s) for s in sessions] == [3, 3, 3] and "deterministic tokens" in rule
    for s in sessions:
        assert all(0 < len(r.prompt) + r.max_tokens <= 2048 and all(260 <= t < 512 for t in r.prompt) for r in s)
        assert [r.turn for r in s] == [0, 1, 2]
    sub_agents = sessions[1][0].prompt, sessions[2][0].prompt  # both open on the same system prompt
    assert sub_agents[0][:100] == sub_agents[1][:100]


def test_a_chat_trace_is_rendered_offline_by_the_models_own_tokenizer_folder():
    pytest.importorskip("transformers")
    from workbench import models

    folder = models.hf_directory(models.resolve("synthetic:cpu"))
    sessions, rule = sessions_from_trace("taubench", sessions=2, turns=2, context_tokens=8192, vocab_size=512,
                                         tokenizer=folder)
    assert "chat template of the model" in rule and [len(s) for s in sessions] == [2, 2]
    for s in sessions:  # a turn's prompt opens with the conversation before it
        assert s[1].prompt[:len(s[0].prompt) - 8] == s[0].prompt[:-8]


def test_a_chat_trace_without_a_tokenizer_says_what_it_needs():
    from workbench.loop.traces import TraceError

    with pytest.raises(TraceError, match="tokenizer folder"):
        sessions_from_trace("taubench", sessions=1, turns=1, context_tokens=8192, vocab_size=512)
