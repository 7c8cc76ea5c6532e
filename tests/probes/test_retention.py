"""retention.pinning_under_pressure: every verdict its rules can return, and llama.cpp driven both ways."""

from __future__ import annotations

import math

from workbench.cells.llamacpp import LlamaCppCell
from workbench.probes.retention import Arm, Params, absence, verdict


def test_llamacpp_never_evicts_so_retention_is_not_applicable_with_evidence(run_probe):
    f = run_probe("retention.pinning_under_pressure", prefix_tokens=64, capacity_tokens=256)
    assert f.verdict == "not-applicable" and f.claim_verdicts["risk.retention_bias"] == "not-applicable"
    (row,) = f.evidence["rows"]
    assert row["resident_after"] == row["resident_before"] == 64  # read back from the engine
    assert row["filler_taken"] == 256 - 64  # the engine itself refused beyond its capacity
    assert f.metrics["engine_resident_tokens"]["source"] == "engine"
    assert any("llama_decode returns 1" in n for n in f.evidence["notes"])


def test_a_prefix_removed_inside_the_engine_mid_fill_is_reported_lost(run_probe, llama_api, monkeypatch):
    real = LlamaCppCell.measure_capacity

    def fill_and_lose_the_pin(self, *, step=None, slot=0):
        llama_api.llama_memory_seq_rm(self._mem, 0, 32, -1)  # the engine drops half the pinned prefix
        return real(self, step=step, slot=slot)

    monkeypatch.setattr(LlamaCppCell, "measure_capacity", fill_and_lose_the_pin)
    f = run_probe("retention.pinning_under_pressure", prefix_tokens=64, capacity_tokens=256)
    assert f.verdict == "refuted" and f.metric("silent_evictions") == 32
    assert f.claim_verdicts["risk.retention_bias"] == "confirmed"


# --------------------------------------------------------------------------- the rules, row by row


def _absence_row(before=64, after=64, prefix=64):
    return {"prefix_tokens": prefix, "resident_before": before, "filler_taken": 192, "engine_refused": True,
            "capacity_tokens": 256, "resident_after": after}


def test_absence_rule_returns_each_of_its_verdicts():
    assert absence([_absence_row()], "no eviction").verdict == "not-applicable"
    assert absence([_absence_row(after=10)], "no eviction").verdict == "refuted"
    assert absence([_absence_row(before=10)], "no eviction").verdict == "inconclusive"
    assert absence([], "no eviction").verdict == "inconclusive"


P = Params(prefix_tokens=64, capacity_tokens=256, priorities=(35, 60, 100), pressure=(0.5, 2.0, 4.0), expiry_ms=0)
ARMS = [Arm(35, None), Arm(60, None), Arm(100, None)]


def _ramp(first_loss: dict[str, float]) -> list[dict]:
    """Rows of a ramp where each arm holds its prefix fully until ``first_loss[arm]`` (inf: never lost)."""
    return [{"arm": a.label, "priority": a.priority, "duration_ms": None, "pressure": x, "free_tokens": 192,
             "fillers_refused": 0, "baseline_reused": 64, "reused_tokens": 64 if x < first_loss[a.label] else 0,
             "survival": 1.0 if x < first_loss[a.label] else 0.0}
            for a in ARMS for x in P.pressure]


def test_pinned_top_priority_is_confirmed():
    o = verdict(_ramp({"p35": 2.0, "p60": 4.0, "p100": math.inf}), P, ARMS)
    assert o.verdict == "confirmed" and o.claim_verdicts["risk.retention_bias"] == "refuted"


def test_eviction_in_strict_priority_order_orders_but_does_not_pin():
    o = verdict(_ramp({"p35": 0.5, "p60": 2.0, "p100": 4.0}), P, ARMS)
    assert o.verdict == "refuted" and o.claim_verdicts["risk.retention_bias"] == "confirmed"
    assert "orders eviction" in o.summary


def test_arms_lost_at_the_same_pressure_show_no_effect_of_priority_never_an_order():
    o = verdict(_ramp({"p35": 2.0, "p60": 2.0, "p100": 2.0}), P, ARMS)
    assert o.verdict == "refuted" and "no effect of priority" in o.summary and "orders eviction" not in o.summary


def test_all_arms_surviving_alike_is_no_evidence_about_priority():
    o = verdict(_ramp({"p35": math.inf, "p60": math.inf, "p100": math.inf}), P, ARMS)
    assert o.verdict == "confirmed" and o.claim_verdicts["risk.retention_bias"] == "inconclusive"


def test_eviction_out_of_priority_order_is_partial_on_the_bias_risk():
    o = verdict(_ramp({"p35": 4.0, "p60": 0.5, "p100": 2.0}), P, ARMS)
    assert o.verdict == "refuted" and o.claim_verdicts["risk.retention_bias"] == "partial"


def test_a_ramp_that_never_exceeds_free_capacity_is_inconclusive():
    low = Params(prefix_tokens=64, capacity_tokens=256, priorities=(100,), pressure=(0.25, 0.5), expiry_ms=0)
    rows = [r | {"pressure": x} for r, x in zip(_ramp({"p35": 9, "p60": 9, "p100": math.inf})[6:8], (0.25, 0.5))]
    assert verdict(rows, low, [Arm(100, None)]).verdict == "inconclusive"
