"""A stored verdict settles a claim only where what the finding recorded re-derives it (issue 35, cases 1-3).

Each row is a hand-built finding as an adversary (or a stale folder) would leave it, and whether it settles its
claim; every row that must not settle did on 5888f08, where standing believed the verdict string."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict
from pathlib import Path

import pytest

from workbench import blueprint, probes, settle, standing
from workbench.findings import Finding
from workbench.loop import gate

NOW = dt.datetime(2026, 12, 6, tzinfo=dt.timezone.utc)
GPU = {"available": True, "devices": [{"name": "NVIDIA H200"}]}
NO_GPU = {"available": False, "devices": [], "reason": "no NVIDIA driver"}
ENGINE = "engine"


def m(value, source=ENGINE, unit="ratio"):
    return {"value": value, "unit": unit, "source": source}


def finding(probe="events.hash_parity", verdict="confirmed", *, claims=("gateway.hash_parity",), engine="trtllm",
            version=None, created="2026-12-05T10:00:00+00:00", metrics=None, rests_on=None, params=None,
            gpu=NO_GPU, **more) -> Finding:
    declared = probes.declared(probe)
    return Finding(
        probe=probe, claims=list(claims), verdict=verdict, summary=verdict, engine=engine,
        environment={"engine": engine, "engine_version": "1.2.1", "model": {"name": "m"},
                     "hardware": {"summary": "h", "gpu": gpu}, "workbench_version": "0", "time": created},
        probe_version=version or declared.version, params={"model": "m"} | (params or {}), created=created,
        metrics={"hash_parity_fraction": m(1.0)} if metrics is None else metrics,
        rests_on=[{"metric": "hash_parity_fraction", "op": ">=", "value": 1.0}] if rests_on is None else rests_on,
        **more)


def gate_finding(verdict="confirmed", *, low=2.5, high=3.5, gpu=GPU, target=True, metrics=True, **ev) -> Finding:
    """A loop.gate finding as gate_finding writes it: the subject's speed-up as metrics, the rest of the gate's
    evidence recorded beside it."""
    evidence = gate.GateEvidence(None, best_reference="llamacpp-server-spec", compared_turns=40, **ev)
    f = finding("loop.gate", verdict, claims=("entry.step_function",), gpu=gpu, rests_on=[],
                metrics={"speedup_vs_best_llamacpp": m(3.0, "derived", "x"), "speedup_ci_low": m(low, "derived", "x"),
                         "speedup_ci_high": m(high, "derived", "x")} if metrics else {},
                params={"arm": "trtllm", "rule": gate.GateRule().as_dict()})
    f.environment["target"] = {"gpu": ["NVIDIA H200"]} if target else None
    f.evidence = {"gate": {k: v for k, v in asdict(evidence).items() if k not in ("speedup", "on_target")}}
    return f


CASES = [
    # (what, finding, settles, a phrase of the reason)
    ("an honest hash-parity finding", finding(), True, None),
    ("hash parity 0.3 with no supports", finding(metrics={"hash_parity_fraction": m(0.3)}, rests_on=[]), False,
     "named no engine-read number"),
    ("hash parity 0.3 against its support", finding(metrics={"hash_parity_fraction": m(0.3)}), False,
     "does not support it"),
    ("hash parity computed by the cell", finding(metrics={"hash_parity_fraction": m(1.0, "cell")}), False,
     "cell-sourced"),
    ("dated 2099", finding(created="2099-01-01T00:00:00+00:00"), False, "in the future"),
    ("an older probe version", finding(version="0"), False, "since superseded"),
    ("a newer probe version", finding(version="99"), False, "does not know"),
    ("an undeclared probe", finding(probe="events.forged", version="1"), False, "no probe 'events.forged'"),
    ("a support naming no declared metric",
     finding(rests_on=[{"metric": "made_up", "op": ">", "value": 0}]), False, "not one this workbench declares"),
    ("not-applicable on the subject from the cell's absence list",
     finding("events.inventory_fidelity", "not-applicable", claims=("gateway.inventory",), metrics={}, rests_on=[]),
     False, "the engine's own word"),
    ("not-applicable on the subject on the engine's word (a missing symbol)",
     finding("surface.cpp_entrypoint", "not-applicable", claims=("unknown.cpp_entrypoint",),
             metrics={"symbols_missing": m(2, unit="count")},
             rests_on=[{"metric": "symbols_missing", "op": ">", "value": 0}]), True, None),
    ("not-applicable on a reference engine (its absence list is its description)",
     finding("events.inventory_fidelity", "not-applicable", claims=("gateway.inventory",), engine="llamacpp",
             metrics={}, rests_on=[]), True, None),
    ("not-applicable on a reference, contradicted by its own reading",
     finding("surface.cpp_entrypoint", "not-applicable", claims=("unknown.cpp_entrypoint",), engine="llamacpp",
             metrics={"symbols_missing": m(0, unit="count")},
             rests_on=[{"metric": "symbols_missing", "op": ">", "value": 0}]), False, "does not support it"),
    ("a survey's partial on Decode",
     finding("surface.contract_mapping", "partial", claims=("contract.decode",),
             metrics={"rows_verified": m(9, unit="count")}, rests_on=[{"metric": "rows_verified", "op": "<",
                                                                        "value": 10}]), False, "behavioural"),
    ("a survey's partial on the contract table, which is about what ships",
     finding("surface.contract_mapping", "partial", claims=("entry.contract_table",),
             metrics={"rows_verified": m(9, unit="count")}, rests_on=[{"metric": "rows_verified", "op": "<",
                                                                        "value": 10}]), True, None),
    ("isolation refuted by a client that leaves the salt out",
     finding("events.inventory_isolation", "refuted", claims=("gateway.isolation",), params={"client_salt": False},
             metrics={"engine_cross_tenant_reused_tokens": m(64, unit="tokens")},
             rests_on=[{"metric": "engine_cross_tenant_reused_tokens", "op": ">", "value": 0}]), False, "exploratory"),
    ("the gate, decided again from what it recorded", gate_finding(), True, None),
    ("the gate with no metrics", gate_finding(metrics=False), False, "the gate says not-run"),
    ("the gate off target (no GPU in its fingerprint)", gate_finding(gpu=NO_GPU), False, "records no GPU"),
    ("the gate with no verified target", gate_finding(target=False), False, "not on target"),
    ("the gate whose interval does not clear 2x", gate_finding(low=1.2), False, "the gate says inconclusive"),
    ("the gate with the baseline incomplete", gate_finding(baseline_missing=("llama.cpp's own speculation",)),
     False, "lacks"),
    ("the gate with no gate evidence recorded", gate_finding(), False, "not recorded whole"),
]
CASES[-1][1].evidence = {}


@pytest.mark.parametrize("what,f,settles,why", CASES, ids=[c[0] for c in CASES])
def test_a_finding_settles_its_claim_only_where_its_verdict_is_re_derived(what, f, settles, why):
    reasons = settle.unsettled(f, f.claims[0], now=NOW)
    assert (not reasons) == settles, reasons
    assert why is None or why in "; ".join(reasons), reasons


def test_a_forged_gate_finding_settles_nothing_in_the_blueprint(tmp_path):
    """The checked-in forgery (no metrics, dated 2099, no GPU) leaves the entry condition unresolved."""
    from workbench import findings

    forged = Path(__file__).parent / "fixtures" / "forged" / "loop.gate-trtllm-forged.json"
    found = findings.scan([forged.parent]).findings
    assert [f.verdict for _, f in found] == ["confirmed"]
    (state,) = [s for s in standing.claim_states(found, "entry") if s.claim.id == gate.CLAIM]
    assert not state.resolved and state.headline.startswith("unresolved — confirmed on TensorRT-LLM")
    assert "in the future" in state.headline
    text = (Path(__file__).parents[1] / "data" / "blueprint" / "blueprint.md").read_text()
    written = blueprint.writeback(text, found, base=tmp_path)
    assert "**TensorRT-LLM: unresolved — confirmed on TensorRT-LLM 1.2.1 is unverified, it settles nothing" in written
    assert "**TensorRT-LLM: confirmed" not in written


def test_a_stale_answer_of_an_older_rule_no_longer_outranks_a_newer_not_run():
    old = finding(version="0", created="2026-11-01T00:00:00+00:00")
    new = finding("events.hash_parity", "not-run", metrics={}, rests_on=[], reason="needs tensorrt_llm")
    (state,) = [s for s in standing.claim_states([(Path("a"), old), (Path("b"), new)], "gateway")
                if s.claim.id == "gateway.hash_parity"]
    (stood,) = state.subject
    assert stood.verdict == "not-run" and not state.resolved


def test_a_forgery_never_masks_a_settled_answer():
    honest = finding(created="2026-11-01T00:00:00+00:00")
    forged = finding("events.hash_parity", "refuted", created="2026-12-05T00:00:00+00:00", rests_on=[])
    (state,) = [s for s in standing.claim_states([(Path("a"), honest), (Path("b"), forged)], "gateway")
                if s.claim.id == "gateway.hash_parity"]
    assert [s.verdict for s in state.answers] == ["confirmed"]
