"""The P/D shape on the real vLLM (CPU build): two ``vllm serve`` sharing ExampleConnector's store, the gateway's
relay between them, and each verdict seen to come out otherwise by a fault through the engine's own files or the
relay. One pair of servers serves the module (each start takes 11–22 s here); each run draws its own prompt. In
process too: two vLLM engines of this process, producer then consumer, sharing the store."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import ids, require_engine
from workbench import cells, probes
from workbench.cells.vllm.pd import Store, aligned_prefix, transfer_config
from workbench.probes import ProbeContext, gateway_pd

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
MODEL = "synthetic:cpu"
FAULTS = gateway_pd.FAULTS


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    require_engine("vllm-server")
    logs = str(tmp_path_factory.mktemp("logs"))
    with ProbeContext("vllm", MODEL, {"log_dir": logs}) as ctx, gateway_pd.open_pair(ctx, gateway_pd.Params()) as p:
        yield p, ctx.description


def run(pair, fault: str, seed: int) -> probes.Outcome:
    p, d = pair
    params = gateway_pd.Params(fault=fault, seed=seed, repeats=3 if fault == "none" else 1)
    return probes.at_most_inconclusive_without_engine(gateway_pd.measure(p, params, np.random.default_rng(seed), d))


def test_pd_equals_one_engine_and_the_decode_loads_the_prefix(pair):
    o = run(pair, "none", 1)
    m = o.metrics
    assert o.claim_verdicts == {"shapes.pd_lifecycle": "confirmed", "shapes.pd_transferred_kv": "confirmed"}, o.summary
    assert m["pd_external_tokens"] == m["pd_expected_external_tokens"] == 192
    assert m["pd_decode_cached_tokens"] == 192 and m["pd_early_exits"] == 1
    assert m["pd_ttft_s"] > m["pd_context_s"] > 0 and len([r for r in o.rows if r.get("repeat")]) == 4
    probes.check_rests(probes.get("gateway.pd"), o, subject=False)


@pytest.mark.parametrize("fault, life, kv", [
    ("prompt_rewritten", "refuted", "refuted"),
    ("state_dropped", "confirmed", "refuted"),  # the decode recomputed: one engine's answer, no transfer taken
    ("state_altered", "refuted", "confirmed"),
    ("no_early_exit", "refuted", "confirmed"),
])
def test_each_fault_drives_a_verdict_otherwise(pair, fault, life, kv):
    o = run(pair, fault, 2 + FAULTS.index(fault))
    assert o.claim_verdicts == {"shapes.pd_lifecycle": life, "shapes.pd_transferred_kv": kv}, o.summary


def test_a_prompt_too_short_to_transfer_leaves_both_claims_open(pair):
    """Issue 48: a prompt below one block (20 tokens: ExampleConnector moves whole 32-token blocks of all but the last
    token) has nothing transferable; neither row has room to differ, so neither is refuted or confirmed."""
    p, d = pair
    short = gateway_pd.Params(prompt_tokens=20, repeats=1, seed=11)
    o = probes.at_most_inconclusive_without_engine(gateway_pd.measure(p, short, np.random.default_rng(11), d))
    assert o.metrics["pd_expected_external_tokens"] == 0, o.metrics
    assert o.claim_verdicts == {"shapes.pd_lifecycle": "inconclusive", "shapes.pd_transferred_kv": "inconclusive"}, \
        o.summary
    assert "no room to differ" in o.summary


def test_in_process_the_consumer_engine_counts_the_producers_prefix_as_cached_and_a_zeroed_store_changes_it(tmp_path):
    """Two ``LLM`` engines in this process, one after the other (vLLM's distributed state is per process): the
    producer prefills the prompt (its connector saves the KV into the store) and decodes it as one engine would;
    the consumer, which never saw the prompt, reports the transferred prefix as its own ``num_cached_tokens`` and
    decodes the same tokens; with the store's tensors zeroed (a fresh salt: no local hit), its output changes."""
    require_engine("vllm")
    tokens = ids(200)
    opts = {"context_tokens": 256, "kv_events": False}
    with cells.open_cell("vllm", MODEL, kv_transfer_config=transfer_config("kv_producer", tmp_path), **opts) as producer:
        assert producer.ensure_prefix(tokens).engine_reused_tokens == 0
        single = producer.decode(max_tokens=8).tokens
    with cells.open_cell("vllm", MODEL, kv_transfer_config=transfer_config("kv_consumer", tmp_path), **opts) as consumer:
        assert consumer.ensure_prefix(tokens).engine_reused_tokens == aligned_prefix(200, 32) == 192
        assert consumer.decode(max_tokens=8).tokens == single
        store = Store(tmp_path)
        assert store.zero(store.entry(tokens, 32)) > 0
        assert consumer.ensure_prefix(tokens, salt="zeroed").engine_reused_tokens == 192  # loaded again: zeros
        assert consumer.decode(max_tokens=8).tokens != single
