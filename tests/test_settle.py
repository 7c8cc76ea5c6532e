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
from workbench.loop import equal, gate

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


_ROUTING = {"routing_hit_gain_ci_low": m(0.08), "routing_hit_gain_ci_high": m(0.2),
            "routing_ttft_speedup_ci_low": m(1.2, "timed", "x"), "routing_unread_requests": m(0, "cell", "count"),
            "routing_events_lost": m(0, "cell", "count")}
_NO_GAIN = _ROUTING | {"routing_hit_gain_ci_low": m(-0.004), "routing_hit_gain_ci_high": m(0.005)}
_REFUTED = [{"metric": "routing_hit_gain_ci_high", "op": "<=", "value": 0.01}]
_RB = {"router_block": 0, "kill_wave": -1}  # the outcome parameters at their defaults: a measured run
_ROUTED = [{"metric": "routing_hit_gain_ci_low", "op": ">", "value": 0.0}]


def gate_finding(verdict="confirmed", *, low=2.5, high=3.5, gpu=GPU, target=True, metrics=True, claim_verdicts=None,
                 **ev) -> Finding:
    """A loop.gate finding as gate_finding writes it: the subject's speed-up as metrics, the rest of the gate's
    evidence recorded beside it."""
    evidence = gate.GateEvidence(None, best_reference="llamacpp-server-spec", compared_turns=40, **ev)
    f = finding("loop.gate", verdict, claims=(gate.CLAIM,), gpu=gpu, rests_on=[],
                metrics={"speedup_vs_best_llamacpp": m(3.0, "derived", "x"), "speedup_ci_low": m(low, "derived", "x"),
                         "speedup_ci_high": m(high, "derived", "x")} if metrics else {},
                params={"arm": "trtllm", "rule": gate.GateRule().as_dict(), "equal_work": equal.EqualWork().as_dict()},
                claim_verdicts=claim_verdicts or {})
    f.environment["target"] = {"gpu": ["NVIDIA H200"]} if target else None
    f.evidence = {"gate": {k: v for k, v in asdict(evidence).items() if k not in ("speedup", "on_target")},
                  "rows": [{"arm": "trtllm", "best_llamacpp": False}, {"arm": "llamacpp-server-spec", "best_llamacpp": True}]}
    return f


RELABELLED = finding(engine="trtllm-serve")
RELABELLED.environment["engine"] = "llamacpp"
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
    ("not-applicable on the subject on a missing symbol its probe's rule never reads that way",
     finding("surface.cpp_entrypoint", "not-applicable", claims=("unknown.cpp_entrypoint",),
             metrics={"symbols_missing": m(2, unit="count")},
             rests_on=[{"metric": "symbols_missing", "op": ">", "value": 0}]), False, "the rule never rests"),
    ("not-applicable on the subject resting on a reading that is not the engine's word on absence",
     finding("reuse.per_request_metrics", "not-applicable", claims=("unknown.reuse_metrics",),
             metrics={"logits_max_abs_diff": m(0.0, unit="logit")},
             rests_on=[{"metric": "logits_max_abs_diff", "op": "<=", "value": 0.1}]), False, "the engine's own word"),
    ("the same not-applicable on a reference engine", finding(
        "reuse.per_request_metrics", "not-applicable", claims=("unknown.reuse_metrics",), engine="llamacpp",
        metrics={"logits_max_abs_diff": m(0.0, unit="logit")},
        rests_on=[{"metric": "logits_max_abs_diff", "op": "<=", "value": 0.1}]), True, None),
    # a finding that chose its own supports: each holds, none is what the probe's rule rests the verdict on
    ("hash parity 0.3 confirmed on a support of its own choosing", finding(
        metrics={"hash_parity_fraction": m(0.3)}, rests_on=[{"metric": "hash_parity_fraction", "op": ">=",
                                                             "value": 0.3}]), False, "not what the rule rests it on"),
    ("isolation confirmed on the engine's own leak", finding(
        "isolation.cache_salt", claims=("contract.manifest",),
        metrics={"engine_cross_manifest_reused_tokens": m(512, unit="tokens")},
        rests_on=[{"metric": "engine_cross_manifest_reused_tokens", "op": ">", "value": 0}]), False,
     "not what the rule rests it on"),
    ("a claim row's verdict on its main verdict's supports", finding(
        "capacity.budget_policy", "refuted", claims=("risk.memory_fraction", "contract.describe"),
        claim_verdicts={"contract.describe": "refuted"},
        metrics={"engine_kv_bytes": m(100, unit="bytes"), "measured_capacity_tokens": m(10, unit="tokens")},
        rests_on=[{"metric": "engine_kv_bytes", "op": "<=", "value": 110},
                  {"metric": "measured_capacity_tokens", "op": ">=", "value": 9}]), False,
     "not what the rule rests it on"),
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
    # the adversary's holes on the first draft of settle (each settled the claim there)
    ("a probe's finding on a claim it does not test", finding(claims=("unknown.retention_pressure",)), False,
     "does not test"),
    ("a probe's finding on the step-function claim, on a GPU", finding(claims=("entry.step_function",), gpu=GPU),
     False, "does not test"),
    ("a reference's finding relabelled as the subject", RELABELLED, False, "fingerprint"),
    ("a cell count lifted to an engine reading by the file",
     finding(metrics={"block_tokens": m(32, unit="tokens")},
             rests_on=[{"metric": "block_tokens", "op": ">", "value": 0}]), False, "cell-sourced"),
    ("a token count given as true", finding("events.inventory_isolation", "confirmed", claims=("gateway.isolation",),
                                            params={"client_salt": True},
                                            metrics={"engine_reused_tokens": m(True, unit="tokens")},
                                            rests_on=[{"metric": "engine_reused_tokens", "op": ">=", "value": 1}]),
     False, "not a tokens reading"),
    ("a support against NaN", finding(metrics={"hash_parity_fraction": m(0.02)},
                                      rests_on=[{"metric": "hash_parity_fraction", "op": "!=", "value": float("nan")}]),
     False, "no finite value"),
    ("an outcome parameter left out", finding("events.inventory_isolation", "refuted", claims=("gateway.isolation",),
                                              metrics={"engine_cross_tenant_reused_tokens": m(64, unit="tokens")},
                                              rests_on=[{"metric": "engine_cross_tenant_reused_tokens", "op": ">",
                                                         "value": 0}]), False, "exploratory"),
    ("a GPU fingerprint that is not a mapping", finding(gpu="none"), True, None),
    ("a cell with a KV connector in it (its loads count as cached tokens)",
     finding(cell_options={"kv_transfer_config": {"kv_connector": "ExampleConnector", "kv_role": "kv_both"}}), False,
     "KV connector"),
    ("routing confirmed on its hit gain and TTFT", finding("gateway.routing", claims=("shapes.kv_routing",), params=_RB,
                                                           metrics=_ROUTING, rests_on=_ROUTED), True, None),
    ("routing confirmed with no TTFT recorded (it tells confirmed from partial)",
     finding("gateway.routing", claims=("shapes.kv_routing",), params=_RB,
             metrics={k: v for k, v in _ROUTING.items() if "ttft" not in k}, rests_on=_ROUTED), False, "not recorded"),
    ("routing confirmed over unread requests", finding("gateway.routing", claims=("shapes.kv_routing",), params=_RB,
     metrics=_ROUTING | {"routing_unread_requests": m(2, "cell", "count")}, rests_on=_ROUTED), False, "unread"),
    ("routing refuted, no gain and nothing lost", finding("gateway.routing", "refuted", claims=("shapes.kv_routing",),
                                                          params=_RB, metrics=_NO_GAIN, rests_on=_REFUTED), True, None),
    ("routing refuted while events were lost (KV-exact routed blind)",
     finding("gateway.routing", "refuted", claims=("shapes.kv_routing",), params=_RB,
             metrics=_NO_GAIN | {"routing_events_lost": m(3, "cell", "count")}, rests_on=_REFUTED), False, "lost"),
    ("routing refuted though the gain's lower bound is above 0",
     finding("gateway.routing", "refuted", claims=("shapes.kv_routing",), params=_RB,
             metrics=_NO_GAIN | {"routing_hit_gain_ci_low": m(0.002), "routing_hit_gain_ci_high": m(0.008)},
             rests_on=_REFUTED), False, "the rule says a gain"),
    ("routing confirmed though TTFT's interval does not clear 1",
     finding("gateway.routing", claims=("shapes.kv_routing",), params=_RB,
             metrics=_ROUTING | {"routing_ttft_speedup_ci_low": m(0.9, "timed", "x")}, rests_on=_ROUTED), False,
     "the rule says partial"),
    ("routing partial though TTFT's interval clears 1",
     finding("gateway.routing", "partial", claims=("shapes.kv_routing",), params=_RB, metrics=_ROUTING, rests_on=_ROUTED),
     False, "the rule says confirmed"),
    ("the gate, decided again from what it recorded", gate_finding(), True, None),
    ("the gate whose claim row says more than its verdict",
     gate_finding("inconclusive", low=1.5, claim_verdicts={gate.CLAIM: "confirmed"}), False,
     "the gate says inconclusive, not confirmed"),
    ("the gate with no metrics", gate_finding(metrics=False), False, "the gate says not-run"),
    ("the gate off target (no GPU in its fingerprint)", gate_finding(gpu=NO_GPU), False, "records no GPU"),
    ("the gate with no verified target", gate_finding(target=False), False, "not on target"),
    ("the gate whose interval does not clear 2x", gate_finding(low=1.2), False, "the gate says inconclusive"),
    ("the gate with the baseline incomplete", gate_finding(baseline_missing=("llama.cpp's own speculation",)),
     False, "lacks"),
    ("the gate with a laxer equal-work rule than it says", gate_finding(), False, "exploratory equal-work rule"),
    ("the gate whose rows name no best llama.cpp arm", gate_finding(), False, "not-run"),
    ("the gate with no gate evidence recorded", gate_finding(), False, "not recorded whole"),
]
CASES[-1][1].evidence = {}
CASES[-2][1].evidence["rows"] = [{"arm": "llamacpp", "best_llamacpp": False}]
CASES[-3][1].params["equal_work"] |= {"margin_sd": 1.5, "exploratory": None}


@pytest.mark.parametrize("what,f,settles,why", CASES, ids=[c[0] for c in CASES])
def test_a_finding_settles_its_claim_only_where_its_verdict_is_re_derived(what, f, settles, why):
    claim = next(iter(f.claim_verdicts), f.claims[0])
    reasons = settle.unsettled(f, claim, now=NOW)
    assert (not reasons) == settles, reasons
    assert why is None or why in "; ".join(reasons), reasons


def test_a_forged_gate_finding_settles_nothing_in_the_blueprint(tmp_path):
    """The checked-in forgery (no metrics, dated 2099, no GPU) leaves G4 and the entry condition unresolved."""
    from workbench import findings

    forged = Path(__file__).parent / "fixtures" / "forged" / "loop.gate-trtllm-forged.json"
    found = findings.scan([forged.parent]).findings
    assert [f.verdict for _, f in found] == ["confirmed"]
    (state,) = [s for s in standing.claim_states(found, "gates") if s.claim.id == gate.CLAIM]
    assert not state.resolved and state.headline.startswith("unresolved — confirmed on TensorRT-LLM 1.2.1 settles nothing")
    assert "in the future" in state.headline
    (entry,) = [s for s in standing.claim_states(found, "entry") if s.claim.id == standing.STEP_FUNCTION]
    assert not entry.resolved
    text = (Path(__file__).parents[1] / "data" / "blueprint" / "blueprint.md").read_text()
    written = blueprint.writeback(text, found, base=tmp_path)
    assert "**TensorRT-LLM: unresolved — confirmed on TensorRT-LLM 1.2.1 settles nothing" in written
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


def test_a_forged_or_superseded_survey_counts_for_nothing_across_versions():
    """Version churn is read across the subject's surveys; one from the future or an older rule never enters it."""
    def survey(version, created, probe_version=None):
        f = finding("surface.contract_mapping", "partial", claims=("risk.version_churn",), version=probe_version,
                    created=created, metrics={}, rests_on=[], claim_verdicts={"risk.version_churn": "inconclusive"})
        f.environment["engine_version"] = version
        f.evidence = {"rows": [{"guard": "LLM.generate_async", "feature": "core", "ok": True, "version": version,
                                "signature": {"at": "LLM.generate_async", "names": {"x": version == "0.1"},
                                              "defaults": {}}}]}
        return Path(version), f

    assert standing.version_churn([survey("0.1", "2026-11-01T00:00:00+00:00"),
                                   survey("0.2", "2026-11-02T00:00:00+00:00")]) is not None
    assert standing.version_churn([survey("0.1", "2099-01-01T00:00:00+00:00"),
                                   survey("0.2", "2026-11-02T00:00:00+00:00", probe_version="0")]) is None


def test_one_id_with_two_contents_counts_neither(tmp_path):
    from workbench import findings

    honest = finding()
    forged = finding(created="2099-01-01T00:00:00+00:00")
    forged.id = honest.id
    for folder, f in (("a", forged), ("b", honest)):
        findings.write(f, tmp_path / folder)
    s = findings.scan([tmp_path])
    assert s.findings == [] and len(s.errors) == 2 and "other contents" in s.errors[0][1]
    findings.write(finding(), tmp_path / "c")  # the same finding twice still counts once


def test_every_probe_declares_what_each_verdict_rests_on():
    """Declared once and checked where declared (as pluggy checks an implementation against its spec): every
    entry names a claim the probe tests and a verdict that must rest."""
    for name in probes.names():
        p = probes.get(name)
        assert p.rests, f"{name} declares no rests"
        for (claim, verdict), alternatives in p.rests.items():
            assert claim == "*" or claim in p.claims, (name, claim)
            assert verdict in settle.ANSWERS and alternatives and all(alternatives), (name, verdict)
