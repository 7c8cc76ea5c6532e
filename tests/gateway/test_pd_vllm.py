"""The P/D shape on the real vLLM (CPU build): two ``vllm serve`` sharing ExampleConnector's store, the gateway's
relay between them, and each verdict seen to come out otherwise by a fault through the engine's own files or the
relay. One pair of servers serves the module (each start takes 11–22 s here); each run draws its own prompt."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import require_engine
from workbench import probes
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
    ("state_dropped", "refuted", "refuted"),
    ("state_altered", "refuted", "confirmed"),
    ("no_early_exit", "refuted", "confirmed"),
])
def test_each_fault_drives_a_verdict_otherwise(pair, fault, life, kv):
    o = run(pair, fault, 2 + FAULTS.index(fault))
    assert o.claim_verdicts == {"shapes.pd_lifecycle": life, "shapes.pd_transferred_kv": kv}, o.summary
