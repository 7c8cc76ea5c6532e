"""The retention, event and connector probes on both release profiles of the TensorRT-LLM double: with V1 pinned
(the claims' mechanism) each gives the verdict its rule gives on 1.2.1; once with 1.4's own default (V2) retention
is reported not honoured, hashes are not recomputed under V2's algorithm, and every such finding is exploratory.

No finding here settles anything: each was made on a test double (its fingerprint says so)."""

from __future__ import annotations

import pytest
from doubles.trtllm_fixture import fake_trt14, fake_trt_any, model_dir  # noqa: F401 - the fixtures

from workbench import probes, settle
from workbench.cells.trtllm import cell as trtllm_cell

RETENTION = {"prefix_tokens": 64, "capacity_tokens": 256, "pressure": "1,4", "filler_slots": 4,
             "filler_fraction": 0.5, "expiry_ms": 0, "repeats": 2, "priorities": "20,35,100"}
RUNS = {  # probe → (its parameters, the verdict V1 gives, the claim rows it settles beside)
    "retention.pinning_under_pressure": (RETENTION, "confirmed", {"risk.retention_bias": "refuted"}),
    "connector.export_granularity": ({}, "refuted", {"contract.snapshot": "refuted"}),
    "events.hash_parity": ({"requests": 2}, "confirmed", {}),
    # TensorRT-LLM's key has no PYTHONHASHSEED: only the wrong-block-size arm diagnoses it
    "events.inventory_fidelity": ({"wrong_tokenizer": "", "wrong_seed": "", "budget_blocks": 6, "requests": 16},
                                  "confirmed",
                                  {"gateway.diagnosis": "partial"}),
    "events.inventory_isolation": ({}, "confirmed", {}),
    "events.ledger_closure": ({"requests": 16, "readback": 4}, "confirmed", {}),
}


@pytest.fixture(autouse=True)
def _double_time(monkeypatch):
    """The probes' waits for events (a consumer's ``pump(0.3)``, a source's ``poll(1.0)``) at the double's pace: its
    time runs ten times faster than 1.2's (doubles/trtllm_fixture.py scales the dispatch sleep and the drain's floor
    alike), so each wait is a tenth, never under the drain's own floor (still five dispatch sleeps). The waits were
    most of these runs' time; what each probe reads and decides is unchanged."""
    drain = trtllm_cell.TrtLlmCell.drain_kv_events
    monkeypatch.setattr(trtllm_cell.TrtLlmCell, "drain_kv_events",
                        lambda self, timeout_s=0.0: drain(self, timeout_s / 10))


def _run(name, tmp_path, **options):
    params = RUNS[name][0]
    return probes.run(name, engine="trtllm", isolated=False, model=str(model_dir(tmp_path, vocab_size=32000)),
                      params=params, cell_options={"dummy_weights": True, "tokens_per_block": 16 if name.startswith(
                          ("retention", "connector")) else 32} | options)


@pytest.mark.parametrize("name", list(RUNS))
def test_each_probe_gives_its_rules_verdict_on_both_profiles_with_v1_pinned(name, fake_trt_any, tmp_path):
    f = _run(name, tmp_path)
    assert (f.verdict, {k: v for k, v in f.claim_verdicts.items() if k in RUNS[name][2]}) == RUNS[name][1:], f.summary
    assert f.environment["cell"]["extra"]["kv_cache_manager"]["used"] == "V1"
    assert settle.unsettled(f, f.claims[0])[0].startswith("it was made on a test double")


def test_on_1_4s_default_retention_is_reported_not_honoured_and_settles_nothing(fake_trt14, tmp_path):
    f = _run("retention.pinning_under_pressure", tmp_path, kv_manager="default")
    assert f.verdict == "refuted" and f.summary.startswith("V2 default: retention not honoured — ")
    assert f.claim_verdicts["risk.retention_bias"] == "confirmed"  # every priority fell alike
    assert any("exploratory: the cell ran the release's default KV manager" in w
               for w in settle.unsettled(f, "unknown.retention_pressure"))


def test_on_1_4s_default_no_hash_is_recomputed_under_v2s_algorithm(fake_trt14, tmp_path):
    f = _run("events.hash_parity", tmp_path, kv_manager="default")
    assert f.verdict == "not-run" and "hashes with 'v2_sha256'" in f.reason


def test_on_1_4s_default_the_ledger_still_closes_it_never_recomputes_a_hash(fake_trt14, tmp_path):
    f = _run("events.ledger_closure", tmp_path, kv_manager="default")
    assert f.verdict == "confirmed", f.summary
    assert f.environment["cell"]["extra"]["kv_cache_hash_algo"] == "v2_sha256"
