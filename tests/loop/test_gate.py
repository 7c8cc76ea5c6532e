"""G4's rule (gate.turn_time, the loop's gate): every verdict it can give."""

from __future__ import annotations

import pytest

from workbench import claims
from workbench.loop import arms, equal, gate, results


def est(value, low, high):
    return {"value": value, "low": low, "high": high}


WIN, LOSS, STRADDLE = est(3.0, 2.2, 3.5), est(1.2, 1.0, 1.4), est(2.1, 1.8, 2.5)
CLAIM_RULE = gate.GateRule()


def ev(speedup=WIN, *, turns=25, on_target=True, **kw):
    return gate.GateEvidence(speedup, best_reference=kw.pop("best", "llamacpp-spec"), compared_turns=turns,
                             on_target=on_target, **kw)


@pytest.mark.parametrize("rule, evidence, verdict", [
    (CLAIM_RULE, ev(), "confirmed"),
    (CLAIM_RULE, ev(on_target=False), "inconclusive"),  # off target a win is no certification
    (CLAIM_RULE, ev(LOSS), "refuted"),
    (CLAIM_RULE, ev(LOSS, on_target=False), "inconclusive"),  # nor is a loss: refuted needs the same conditions
    (CLAIM_RULE, ev(STRADDLE), "inconclusive"),  # the interval straddles 2×
    (CLAIM_RULE, ev(est(2.5, float("nan"), float("nan"))), "inconclusive"),
    (CLAIM_RULE, ev(turns=4), "inconclusive"),  # 4 turns never decide the claim
    (CLAIM_RULE, ev(LOSS, turns=4), "inconclusive"),
    (CLAIM_RULE, ev(disqualified="4 of its 4 turns could not be compared"), "inconclusive"),  # less work / other tokens
    (CLAIM_RULE, ev(LOSS, disqualified="other output"), "inconclusive"),
    (gate.GateRule(min_speedup=0.5), ev(est(0.965, 0.9, 1.0)), "inconclusive"),  # a turned-around rule: exploratory
    (gate.GateRule(min_speedup=1.1), ev(est(1.5, 1.2, 1.8)), "inconclusive"),
    (gate.GateRule(bound="value"), ev(STRADDLE), "inconclusive"),
    (gate.GateRule(min_turns=3), ev(turns=4), "inconclusive"),
    (gate.GateRule(min_speedup=3.0), ev(est(3.5, 3.1, 4.0)), "inconclusive"),  # moved either way: exploratory
    (gate.GateRule(min_speedup=3.0), ev(), "inconclusive"),
    (gate.GateRule(min_speedup=100), ev(), "inconclusive"),  # a raised bar would refute an honest 3× win
    (gate.GateRule(min_turns=50), ev(turns=60), "inconclusive"),
    (CLAIM_RULE, ev(best=None), "not-run"),
    (CLAIM_RULE, ev(best=None, no_reference="every llama.cpp arm was disqualified"), "inconclusive"),
    (CLAIM_RULE, gate.GateEvidence(None, "tensorrt_llm is not installed"), "not-run"),
    (CLAIM_RULE, ev(baseline_missing=("llama.cpp's own speculation",)), "inconclusive"),  # a weaker bar to clear
    (CLAIM_RULE, ev(LOSS, baseline_missing=("llama.cpp's own speculation",)), "inconclusive"),  # the same conditions
    (CLAIM_RULE, ev(other_work="margin_sd 1 instead of the claim's 0.25"), "inconclusive"),  # more turns pass
    (CLAIM_RULE, ev(other_work="margin_sd 0 instead of the claim's 0.25"), "inconclusive"),  # fewer arms qualify
    # a disqualified llama.cpp arm (the fastest, say) lowers the bar: never a verdict the whole baseline did not give
    (CLAIM_RULE, ev(baseline_disqualified=("llamacpp-server",)), "inconclusive"),
    (CLAIM_RULE, ev(LOSS, baseline_disqualified=("llamacpp-server",)), "inconclusive"),
    # excluded turns: the verdict must also hold with every one counted at its worst for it (issue 35.6)
    (CLAIM_RULE, ev(excluded_turns=2, against=est(1.54, 1.4, 1.7), favour=est(3.2, 2.9, 3.6)), "inconclusive"),
    (CLAIM_RULE, ev(excluded_turns=2, against=est(2.6, 2.1, 3.0), favour=est(3.2, 2.9, 3.6)), "confirmed"),
    (CLAIM_RULE, ev(LOSS, excluded_turns=2, against=est(1.1, 0.9, 1.3), favour=est(2.5, 2.1, 2.9)), "inconclusive"),
    (CLAIM_RULE, ev(LOSS, excluded_turns=2, against=est(1.1, 0.9, 1.3), favour=est(1.3, 1.1, 1.6)), "refuted"),
    (CLAIM_RULE, ev(excluded_turns=2), "inconclusive"),  # excluded turns never counted at their worst: no verdict
])
def test_gate_verdicts(rule, evidence, verdict):
    out = gate.decide(rule, evidence)
    assert out.verdict == verdict, out.summary


def test_a_held_back_verdict_says_what_it_would_have_been():
    out = gate.decide(gate.GateRule(min_speedup=0.5), ev(est(0.965, 0.9, 1.0)))
    assert "exploratory" in out.summary and "would be confirmed" in out.summary
    out = gate.decide(CLAIM_RULE, ev(LOSS, on_target=False))
    assert "not on target" in out.summary and "would be refuted" in out.summary
    out = gate.decide(CLAIM_RULE, ev(baseline_disqualified=("llamacpp-server",)))
    assert "disqualified the run's llama.cpp arm(s) llamacpp-server" in out.summary, out.summary
    assert "would be confirmed" in out.summary
    out = gate.decide(CLAIM_RULE, ev(excluded_turns=2, against=est(1.54, 1.4, 1.7), favour=est(3.2, 2.9, 3.6)))
    assert "2 excluded turns counted against it: 1.54× [1.4, 1.7]; in its favour: 3.2× [2.9, 3.6]" in out.summary
    assert "would be confirmed" in out.summary


def _arm(name, *, best=False, reason=None, disqualified=None):
    return results.ArmSummary(name, arms.get(name).engine, reason, disqualified=disqualified, is_best=best)


SUBJECT = results.ArmSummary("trtllm", "trtllm", None, ci={"speedup_vs_best_llamacpp": WIN | {"turns": 25}})
SPEC, REUSE = "llama.cpp's own speculation", "llama.cpp with prefix reuse"


@pytest.mark.parametrize("references, missing", [
    ([_arm("llamacpp-cold", best=True)], (REUSE, SPEC)),  # the cold arm alone: a win that is only the prefix cache
    ([_arm("llamacpp", best=True), _arm("llamacpp-spec")], (SPEC,)),  # our prompt lookup is not llama.cpp's own
    ([_arm("llamacpp", best=True), _arm("llamacpp-server-spec", reason="llama-server crashed")], (SPEC,)),
    ([_arm("llamacpp", best=True), _arm("llamacpp-server-spec", disqualified="other output on 3 of 25 turns")],
     (SPEC,)),
    ([_arm("llamacpp-cold"), _arm("llamacpp"), _arm("llamacpp-server-spec", best=True)], ()),
    ([_arm("llamacpp-server", best=True), _arm("llamacpp-server-spec")], ()),  # served llama.cpp is llama.cpp
])
def test_the_claims_verdict_needs_the_whole_llamacpp_baseline_qualified(references, missing):
    """The best llama.cpp arm is the fastest that qualified, so a run whose reuse or own-speculation arm did not run
    or was disqualified compares against a weaker bar: the verdict is held back, naming what was missing."""
    everywhere = [r.arm for r in references]
    evidence = results.gate_evidence([SUBJECT, *references], CLAIM_RULE, {"gpu": ["H200"]}, on_gpu=everywhere)
    assert evidence.baseline_missing == tuple(kind + " on the GPU" for kind in missing)
    out = gate.decide(CLAIM_RULE, evidence)
    if missing:
        assert out.verdict == "inconclusive" and "would be confirmed" in out.summary
        assert all(kind in out.summary for kind in missing), out.summary
    else:
        assert out.verdict == "confirmed", out.summary


@pytest.mark.parametrize("on_gpu, missing", [
    ((), (REUSE, SPEC)),  # the llama.cpp arms ran on the CPU beside a GPU subject
    (("llamacpp",), (SPEC,)),
    (("llamacpp", "llamacpp-server-spec"), ()),
])
def test_on_target_the_baseline_is_llamacpp_on_the_gpu(on_gpu, missing):
    """The blueprint's baseline is the llama.cpp CUDA cell: on target an arm counts only where its engine said it
    holds every layer on the GPU (arms.on_gpu), so a GPU subject never beats llama.cpp left on the CPU."""
    refs = [_arm("llamacpp", best=True), _arm("llamacpp-server-spec")]
    out = gate.decide(CLAIM_RULE, results.gate_evidence([SUBJECT, *refs], CLAIM_RULE, {"gpu": ["H200"]}, on_gpu=on_gpu))
    assert out.verdict == ("inconclusive" if missing else "confirmed"), out.summary
    assert all(f"{kind} on the GPU" in out.summary for kind in missing), out.summary


@pytest.mark.parametrize("work, lax", [
    (equal.EqualWork(), False),
    (equal.EqualWork(margin_sd=0.1, max_failed_share=0.0), True),  # stricter can disqualify the fastest arm: moved
    (equal.EqualWork(margin_sd=0), True),
    (equal.EqualWork(margin_sd=1.0), True),
    (equal.EqualWork(max_failed_share=0.5), True),
])
def test_an_equal_work_rule_moved_either_way_is_exploratory(work, lax):
    refs = [_arm("llamacpp", best=True), _arm("llamacpp-server-spec")]
    out = gate.decide(CLAIM_RULE, results.gate_evidence([SUBJECT, *refs], CLAIM_RULE, {"gpu": ["H200"]}, work,
                                                        on_gpu=[r.arm for r in refs]))
    assert (out.verdict, bool(work.exploratory), work.as_dict()["exploratory"] is not None) == (
        ("inconclusive", True, True) if lax else ("confirmed", False, False)), out.summary


def test_gate_is_unresolved_without_the_subject_or_a_reference():
    out = gate.decide(CLAIM_RULE, gate.GateEvidence(None, "tensorrt_llm is not installed"))
    assert out.verdict == "not-run" and "tensorrt_llm" in out.reason
    assert gate.decide(CLAIM_RULE, ev(best=None)).verdict == "not-run"


@pytest.mark.parametrize("kwargs", [dict(bound="median"), dict(min_speedup=float("nan")), dict(min_speedup=0),
                                    dict(min_speedup=-1.0), dict(min_speedup=float("inf")), dict(min_turns=1)])
def test_a_rule_that_cannot_be_read_is_refused(kwargs):
    with pytest.raises(ValueError):
        gate.GateRule(**kwargs)


def test_only_the_claims_rule_is_not_exploratory():
    assert CLAIM_RULE.exploratory is None and gate.GateRule(min_speedup=2).exploratory is None
    assert "min_speedup 0.5 instead of the claim's 2" in gate.GateRule(min_speedup=0.5).exploratory
    assert "min_speedup 100 instead of the claim's 2" in gate.GateRule(min_speedup=100).exploratory
    assert "bound value" in gate.GateRule(bound="value").exploratory
    assert "min_turns 5" in gate.GateRule(min_turns=5).exploratory and gate.GateRule(min_turns=50).exploratory
    assert "margin_sd 0 instead of the claim's 0.25" in equal.EqualWork(margin_sd=0).exploratory
    assert gate.GateRule(min_speedup=0.5).as_dict()["exploratory"]
    assert claims.get(gate.CLAIM).section == "gates" and gate.CLAIM in claims.GATES
