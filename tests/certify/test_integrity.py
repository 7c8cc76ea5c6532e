"""Benchmark integrity's rules: result classes on findings, p50/p90/p95 with the run count, the same-model rule,
the warm-state rule, stage times, the quality smoke's words."""

from __future__ import annotations

import pytest

from workbench import findings
from workbench.certify import classes, integrity
from workbench.certify.integrity import Identity


def test_percentiles_over_runs_carry_the_run_count():
    p = integrity.Percentiles.of([1.0, 2.0, 3.0, None, float("nan")])
    assert (p.p50, p.runs) == (2.0, 3) and p.p90 == pytest.approx(2.8) and p.p95 == pytest.approx(2.9)
    assert p.text() == "p50 2 · p90 2.8 · p95 2.9 (3 runs)"
    one = integrity.Percentiles.of([1.5])
    assert (one.p50, one.p90, one.p95) == (1.5, 1.5, 1.5) and "1 run: no spread" in one.text()
    assert integrity.Percentiles.of([None]) is None


BASE = Identity(model="synthetic-long", digest="a" * 64, quantization="F32", prompt_set="uniform, seed 0",
                context=32768, output_cap=128, device="Xeon (2 cores); no GPU", runtime_profile="threads=1",
                warm_state="cold")


@pytest.mark.parametrize("other, named", [
    (BASE, None),
    (Identity(**{**BASE.__dict__, "model": "SmolLM2-135M-Instruct-Q4_1", "digest": "b" * 64}), "model"),
    (Identity(**{**BASE.__dict__, "quantization": "Q4_1"}), "quantization: F32 vs Q4_1"),
    (Identity(**{**BASE.__dict__, "prompt_set": "taubench"}), "prompt set"),
    (Identity(**{**BASE.__dict__, "context": 8192}), "context: 32768 vs 8192"),
    (Identity(**{**BASE.__dict__, "output_cap": 16}), "output cap"),
    (Identity(**{**BASE.__dict__, "device": "H100"}), "device"),
    (Identity(**{**BASE.__dict__, "runtime_profile": "threads=2"}), "runtime profile"),
    (Identity(**{**BASE.__dict__, "warm_state": "warm"}), "warm state: cold vs warm"),
    (Identity(**{**BASE.__dict__, "quantization": None}), "quantization: F32 vs not recorded"),
])
def test_the_same_model_rule_says_not_comparable_and_names_the_difference(other, named):
    got = integrity.comparable((classes.ResultClass.RAW.value, BASE), (classes.ResultClass.RAW.value, other))
    assert bool(got) is (named is None)
    if named:
        assert got.words.startswith("not comparable: ") and named in got.words, got.words


def test_a_field_varied_by_design_is_not_a_difference():
    other = Identity(**{**BASE.__dict__, "context": 8192})
    assert integrity.comparable(("raw_backend_control", BASE), ("raw_backend_control", other), varies=("context",))


@pytest.mark.parametrize("a, b", [("raw_backend_control", "microbenchmark"),
                                  ("raw_backend_control", "contenox_product_path"),
                                  ("failed_no_performance_claim", "failed_no_performance_claim")])
def test_mixed_classes_and_failed_runs_are_never_compared(a, b):
    got = integrity.comparable((a, BASE), (b, BASE))
    assert not got and ("mixed classes" in got.why or "no performance claim" in got.why)


@pytest.mark.parametrize("w, problem", [
    (integrity.WarmState("cold"), None),
    (integrity.WarmState("warm", 1, "s", (1, "s"), 90, 10), None),
    (integrity.WarmState("warm", 1, "s", (2, "s"), 90, 10), "another process or session"),  # a one-shot replay
    (integrity.WarmState("warm", 1, "s", (1, "t"), 90, 10), "another process or session"),
    (integrity.WarmState("warm", 1, "s", (1, "s")), "PrefixStatus counters"),
    (integrity.WarmState("warm"), "name the process and session"),
    (integrity.WarmState("lukewarm"), "neither cold nor warm"),
])
def test_the_warm_state_rule(w, problem):
    got = integrity.warm_problem(w)
    assert (got is None) if problem is None else (problem in got)


def test_engine_layer_stage_times_say_what_they_do_not_measure():
    st = integrity.engine_stages(1.0, 0.5, 0.2)
    assert st.session_open_s is None and "no session" in st.missing["session_open_s"]
    assert "no suffix" in st.missing["prefill_suffix_s"] and st.layer == "engine"
    assert set(integrity.STAGES) <= set(st.as_dict())
    assert isinstance(type("T", (), {"stage_times": lambda self: st})(), integrity.StageTimer)


def test_no_throughput_claim_without_a_quality_smoke():
    assert integrity.throughput_words("passed") == "quality smoke passed"
    assert "no throughput claim" in integrity.throughput_words(None) and "failed" in integrity.throughput_words("failed")


def _finding(verdict="inconclusive", result_class=None, **env):
    return findings.Finding(probe="loop.llamacpp", claims=["gate.turn_time"], verdict=verdict, summary="s",
                            engine="llamacpp", environment={"engine": "llamacpp", "engine_version": None, "model": {},
                                                            "hardware": {}, "workbench_version": "0", "time": "t",
                                                            **env},
                            result_class=result_class)


def test_a_finding_without_a_recorded_class_is_read_with_its_writers():
    assert integrity.result_class(_finding()) == ("raw_backend_control", "declared")
    assert integrity.result_class(_finding("not-run")) == ("failed_no_performance_claim", "declared")
    assert integrity.result_class(_finding(result_class="raw_backend_control")) == ("raw_backend_control", "recorded")


@pytest.mark.parametrize("verdict, cls, env, error", [
    ("inconclusive", "raw_backend_control", {}, None),
    ("inconclusive", None, {}, None),  # older findings: optional
    ("inconclusive", "contenox_product_path", {}, "no contenox runtime drove it"),
    # the reviewer's construction (review of issue 50, item 15): any truthy value made a product-path row
    ("inconclusive", "contenox_product_path", {"contenox_runtime": "yes"}, "not the runtime's version"),
    ("inconclusive", "contenox_product_path", {"contenox_runtime": {"version": "1.0.0"}}, "states no command"),
    ("inconclusive", "contenox_product_path", {"contenox_runtime": {"version": "1.0.0", "command": "contenox run",
                                                                    "trace_sha256": "abc"}}, "is no sha256"),
    ("inconclusive", "contenox_product_path", {"contenox_runtime": {"version": "1.0.0", "command": "contenox run",
                                                                    "trace_sha256": "a" * 64}}, None),
    ("not-run", "raw_backend_control", {}, "measured nothing"),
    ("not-run", "failed_no_performance_claim", {}, None),
])
def test_the_schema_holds_the_class_to_what_drove_the_run(verdict, cls, env, error):
    doc = _finding(verdict, None, **env).to_dict() | ({"result_class": cls} if cls else {})  # as a file may say
    if error:
        with pytest.raises(findings.FindingError, match=error):
            findings.validate(doc)
    else:
        findings.validate(doc)
    bad = dict(doc, result_class="headline")
    with pytest.raises(findings.FindingError):
        findings.validate(bad)


def test_a_run_restated_as_measuring_nothing_carries_the_failed_class():
    """A finding built (or replaced) with a not-run verdict is a failed run whatever class it was given."""
    from dataclasses import replace

    ran = _finding("inconclusive", "raw_backend_control")
    assert replace(ran, verdict="not-run").result_class == "failed_no_performance_claim"
