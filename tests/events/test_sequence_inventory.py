"""Gap detection and the inventory, fed KvEvents shaped as vllm_events.normalize and trtllm_events.parse_event
make them (no engine involved: the engine runs in test_on_vllm.py)."""

import pytest

from workbench.engine import KvEvent
from workbench.cells.trtllm.hashing import TrtllmHasher
from workbench.cells.vllm.hashing import VllmHasher
from workbench.events.inventory import Inventory
from workbench.events.sequence import Gap, Sequencer


def test_sequencer_table():
    s = Sequencer(0)
    assert [s.see(n) for n in (0, 0, 1, 2)] == [None, None, None, None]  # one vLLM batch repeats its seq
    assert s.see(5) == Gap(3, 5) and Gap(3, 5).missing == 2
    g = s.see(1)
    assert g.regression and g.missing == 0
    late = Sequencer(None)
    assert late.see(9) is None and late.see(11) == Gap(10, 11)
    assert Sequencer(0).see(4) == Gap(0, 4)  # a consumer that joined late
    kept = Sequencer(0, frozenset({1, 2}))  # ids a cell drained itself (its open request): no gap
    assert [kept.see(n) for n in (0, 3)] == [None, None] and kept.see(6) == Gap(4, 6)


def _stored(h: VllmHasher, toks, seq, salt=None, parent=None):
    chain = h.chain(toks, salt)
    B = h.block_size
    return KvEvent("stored", seq, tuple(chain), parent,
                   tuple(tuple(toks[i * B:(i + 1) * B]) for i in range(len(chain))), raw={"medium": "GPU"})


def test_inventory_predicts_and_honours_removed_and_cleared():
    h = VllmHasher(4, "sha256", "0")
    inv = Inventory(h)
    toks = list(range(100, 112))  # 3 blocks
    inv.apply(_stored(h, toks, 0))
    assert inv.predict(toks) == 8  # never the last token: 2 of 3 blocks
    assert inv.predict(toks + [1]) == 12
    assert inv.predict(toks, salt="x") == 0  # a salted request does not merge with the unsalted chain
    inv.apply(KvEvent("removed", 1, (h.chain(toks)[1],)))
    assert inv.predict(toks + [1]) == 4  # the chain breaks at the removed block
    inv.apply(KvEvent("removed", 2, (12345,)))
    assert inv.unknown_removals == 1
    inv.apply(KvEvent("cleared", 3))
    assert inv.predict(toks + [1]) == 0 and len(inv) == 0


def test_inventory_counts_copies_of_one_hash():
    h = VllmHasher(4)
    inv = Inventory(h)
    toks = list(range(9))
    inv.apply(_stored(h, toks, 0))
    inv.apply(_stored(h, toks, 1))
    inv.apply(KvEvent("removed", 2, (h.chain(toks)[0],)))
    assert inv.predict(toks) == 8


def test_inventory_created_resets_for_trtllm():
    h = TrtllmHasher(4)
    inv = Inventory(h)
    toks = list(range(9))
    chain = h.chain(toks)
    inv.apply(KvEvent("stored", 1, tuple(chain), None, (tuple(range(4)), tuple(range(4, 8)))))
    assert inv.predict(toks) == 8
    inv.apply(KvEvent("created", 2, num_blocks=(64, 0)))
    assert inv.predict(toks) == 0 and inv.resets == 1


@pytest.mark.parametrize("bad", ["clear-on-gap", ""])
def test_consumer_refuses_an_undeclared_policy(bad):
    from workbench.events.consumer import Consumer

    with pytest.raises(ValueError, match="resync policy"):
        Consumer(None, Inventory(VllmHasher(4)), bad)


def test_a_rekeyed_inventory_merges_salted_tenants_and_follows_removals():
    h = VllmHasher(4, "sha256", "0")
    toks = list(range(100, 109))
    engine = Inventory(h)
    rekeyed = Inventory(h, rekey=True)
    stored = _stored(h, toks, 0, salt="tenant-A")
    for inv in (engine, rekeyed):
        inv.apply(stored)
    assert engine.predict(toks, salt="tenant-B") == 0
    assert rekeyed.predict(toks, salt="tenant-B") == 8  # its own token hash cannot tell the tenants apart
    rekeyed.apply(KvEvent("removed", 1, (stored.block_hashes[1],)))  # removal by the engine's hash
    assert rekeyed.predict(toks) == 4
