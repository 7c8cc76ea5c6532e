"""The probe framework: typed parameters, provenance kept apart, not-run with a reason, engine-sourced answers."""

from __future__ import annotations

import dataclasses

import pytest

from doubles.trtllm_fixture import fake_trt, model_dir  # noqa: F401 - the fixture

from workbench import claims, metrics, probes
from workbench.probes import Outcome, Support, at_most_inconclusive_without_engine

TINY = "synthetic:tiny"


def test_trtllm_is_not_run_here_with_the_reason(tmp_path):
    f = probes.run("reuse.per_request_metrics", engine="trtllm", model=TINY, out=tmp_path)
    assert f.verdict == "not-run" and "tensorrt_llm" in f.reason
    assert f.metrics == {} and f.environment["engine_version"] is None


@pytest.mark.parametrize("params, message", [
    ({"bogus": 1}, "unknown parameter.*bogus.*valid: prefix_tokens"),
    ({"prefix_tokens": "many"}, "prefix_tokens must be int"),
    ({"priorities": "35,200"}, "priorities=200 must be at most 100"),
    ({"pressure": "0.5,inf"}, r"parameter pressure must be float \(finite\)"),
    ({"filler_fraction": "nan"}, r"parameter filler_fraction must be float \(finite\)"),
    ({"pressure": "-1"}, "pressure ratios must be positive"),
])
def test_bad_parameters_name_what_to_fix(params, message):
    with pytest.raises(probes.ParamError, match=message):
        probes.run("retention.pinning_under_pressure", engine="llamacpp", model=TINY, params=params)


def test_unknown_probe_lists_the_valid_ones():
    with pytest.raises(probes.ParamError, match="valid probes: .*retention.pinning_under_pressure"):
        probes.get("nope")


def test_every_probe_declares_a_version_params_and_known_claims():
    for name in probes.names():
        p = probes.get(name)
        assert p.name == name and p.version and p.claims
        assert p.claim is claims.get(p.claims[0])  # claim text lives in workbench.claims only
        assert all(prm["help"] for prm in probes.describe_params(name))


def test_cell_options_are_recorded_apart_from_params_and_unknown_ones_are_named(tmp_path):
    f = probes.run("reuse.per_request_metrics", engine="llamacpp", model=TINY, params={"repeats": 1, "seed": 3},
                   cell_options={"n_batch": 64}, out=tmp_path)
    assert f.environment["cell"]["extra"]["n_batch"] == 64
    assert f.cell_options == {"n_batch": 64} and f.params["seed"] == 3 and "n_batch" not in f.params
    with pytest.raises(probes.ParamError, match="unknown llamacpp cell option.*tokens_per_blok"):  # before any child
        probes.run("reuse.per_request_metrics", engine="llamacpp", model=TINY, cell_options={"tokens_per_blok": 8})


def test_static_probes_refuse_a_model_or_cell_options():
    with pytest.raises(probes.ParamError, match="drop --model"):
        probes.run("surface.contract_mapping", engine="llamacpp", model=TINY)
    with pytest.raises(probes.ParamError, match="drop --model"):
        probes.run("surface.contract_mapping", engine="llamacpp", cell_options={"n_batch": 8})


def test_an_answer_resting_only_on_cell_bookkeeping_is_at_most_inconclusive():
    cell_only = Outcome("confirmed", "The cell says so.", {"reused_tokens": 10}, claim_verdicts={"risk.warmup": "refuted"},
                        rests_on=(Support("reused_tokens", ">", 0),))
    out = at_most_inconclusive_without_engine(cell_only)
    assert out.verdict == "inconclusive" and out.claim_verdicts == {"risk.warmup": "inconclusive"}
    assert "reused_tokens is cell-sourced" in out.summary
    engine = Outcome("confirmed", "Read back.", {"engine_resident_tokens": 10},
                     rests_on=(Support("engine_resident_tokens", ">", 0),))
    assert at_most_inconclusive_without_engine(engine) is engine


def test_the_guard_checks_what_the_verdict_rests_on_not_any_engine_tag():
    """Any engine-tagged metric used to pass an outcome, whatever its verdict rested on; NaN passed too."""
    beside = Outcome("confirmed", "Rests on the cell's count.", {"reused_tokens": 10, "engine_resident_tokens": 10},
                     rests_on=(Support("reused_tokens", ">", 0),))
    assert at_most_inconclusive_without_engine(beside).verdict == "inconclusive"
    nan = Outcome("refuted", "NaN survival.", {"survival_at_max_pressure": float("nan")},
                  rests_on=(Support("survival_at_max_pressure", "<", 1),))
    assert at_most_inconclusive_without_engine(nan).verdict == "inconclusive"
    timed = Outcome("confirmed", "Faster.", {"ttft_cold_s": 0.2}, rests_on=(Support("ttft_cold_s", ">", 0),))
    assert at_most_inconclusive_without_engine(timed).verdict == "inconclusive"
    undeclared = Outcome("confirmed", "Says nothing.", {"engine_resident_tokens": 10})
    assert "named no engine-read number" in at_most_inconclusive_without_engine(undeclared).summary
    na = Outcome("not-applicable", "Absent.", {})
    assert at_most_inconclusive_without_engine(na) is na
    assert metrics.get("reused_tokens").source == "cell"


def test_an_engine_reading_that_contradicts_the_verdict_cannot_carry_it():
    """The guard once checked only that a named metric was engine-read and finite: isolation's "KV crossed
    manifests" stood on engine cross-key reuse 0. Each support states the value that supports the verdict."""
    leak = Outcome("refuted", "KV crossed manifests.", {"engine_cross_manifest_reused_tokens": 0},
                   rests_on=(Support("engine_cross_manifest_reused_tokens", ">", 0),))
    out = at_most_inconclusive_without_engine(leak)
    assert out.verdict == "inconclusive"
    assert "engine_cross_manifest_reused_tokens is 0, which does not support it (needs > 0)" in out.summary
    held = Outcome("refuted", "KV crossed manifests.", {"engine_cross_manifest_reused_tokens": 640},
                   rests_on=(Support("engine_cross_manifest_reused_tokens", ">", 0),))
    assert at_most_inconclusive_without_engine(held) is held
    named_only = Outcome("confirmed", "A bare name.", {"engine_resident_tokens": 10}, rests_on=("engine_resident_tokens",))
    assert "names no value that supports the verdict" in at_most_inconclusive_without_engine(named_only).summary


def test_a_source_the_finding_records_overrides_the_declared_one():
    """vLLM's reported reuse is its own num_cached_tokens: engine-read there though the tag is declared cell."""
    o = Outcome("confirmed", "Counted.", {"reused_tokens": 64}, rests_on=(Support("reused_tokens", ">", 0),),
                sources={"reused_tokens": "engine"})
    assert at_most_inconclusive_without_engine(o) is o
    assert at_most_inconclusive_without_engine(Outcome("confirmed", "Counted.", {"reused_tokens": 64},
                                                       rests_on=o.rests_on)).verdict == "inconclusive"


def test_a_claim_row_with_its_own_evidence_is_judged_on_it():
    lora = Outcome("inconclusive", "Isolation undecided.", {"engine_lora_cross_reused_tokens": 32},
                   claim_verdicts={"contract.lora": "confirmed"},
                   claim_rests_on={"contract.lora": (Support("engine_lora_cross_reused_tokens", "==", 0),)})
    out = at_most_inconclusive_without_engine(lora)
    assert out.claim_verdicts["contract.lora"] == "inconclusive" and out.verdict == "inconclusive"
    assert "contract.lora: engine_lora_cross_reused_tokens is 32" in out.summary
    kept = dataclasses.replace(lora, metrics={"engine_lora_cross_reused_tokens": 0})
    assert at_most_inconclusive_without_engine(kept) is kept


def test_a_support_names_a_declared_metric_and_a_known_comparison():
    with pytest.raises(KeyError, match="not declared"):
        Support("no_such_metric", ">", 0)
    with pytest.raises(ValueError, match="op must be one of"):
        Support("engine_resident_tokens", "=>", 0)


def test_a_vocabulary_too_small_for_probe_prompts_names_the_fix():
    """It was numpy's bare `low >= high`."""
    from types import SimpleNamespace

    import numpy as np
    import pytest

    from workbench.engine import WorkbenchError
    from workbench.probes.common import token_ids

    rng = np.random.default_rng(0)
    assert len(token_ids(rng, 5, SimpleNamespace(extra={"vocab_size": 512}))) == 5
    with pytest.raises(WorkbenchError, match="vocabulary has 200 tokens.*more than 260 tokens"):
        token_ids(rng, 5, SimpleNamespace(extra={"vocab_size": 200}))


NA = "not-applicable"


@pytest.mark.parametrize("outcome,subject,verdict", [
    # the subject's not-applicable from the cell's own absence list: at most inconclusive (issue 35, case 2)
    (Outcome(NA, "No event stream."), True, "inconclusive"),
    # ... resting on the engine's own word, read from the installed package: it stands
    (Outcome(NA, "Not shipped.", {"symbols_missing": 3}, rests_on=(Support("symbols_missing", ">", 0),)), True, NA),
    # a reference engine's absence list is its description of itself: it stands beside the claim
    (Outcome(NA, "No event stream."), False, NA),
    # the contradicting-metric guard applies to not-applicable too
    (Outcome(NA, "Not shipped.", {"symbols_missing": 0}, rests_on=(Support("symbols_missing", ">", 0),)), False,
     "inconclusive"),
    # a claim row's not-applicable on the subject, with nothing the engine said
    (Outcome("inconclusive", "Row.", claim_verdicts={"contract.ensure_prefix": NA}), True, "inconclusive"),
])
def test_not_applicable_on_the_subject_needs_the_engines_word(outcome, subject, verdict):
    out = at_most_inconclusive_without_engine(outcome, subject)
    assert (out.claim_verdicts or {"": out.verdict}).popitem()[1] == verdict, out.summary
    if verdict == "inconclusive" and subject and not outcome.rests_on:
        assert "the engine's own word" in out.summary


def test_admission_in_process_on_tensorrt_llm_is_not_run_with_the_served_command(fake_trt, tmp_path):
    """1.2 in-process has no /server_info: the claim is about the server, so this run does not test it (on 5888f08
    the double's in-process run settled it as not-applicable)."""
    f = probes.run("events.admission", engine="trtllm", model=str(model_dir(tmp_path)), isolated=False)
    assert f.verdict == "not-run"
    assert "workbench probe events.admission --engine trtllm-serve" in f.reason


def test_each_claim_row_gets_a_reason_that_cannot_contradict_its_verdict():
    """A probe that names no row's reason still gets one per row (issue 40): the summary where the row carries the
    finding's verdict, what the row rests on where it has a verdict of its own; the rule's own words win; a row the
    guard demotes says why."""
    engine = {"engine_reused_tokens": 12}
    o = Outcome("confirmed", "The engine reused 12 tokens.", engine, rests_on=(Support("engine_reused_tokens", ">", 0),),
                claim_verdicts={"risk.reuse_metrics": "confirmed", "unknown.reuse_metrics": "refuted"})
    assert probes.row_reasons(o) == {"risk.reuse_metrics": "The engine reused 12 tokens.",
                                     "unknown.reuse_metrics": "refuted, resting on engine reuse > 0 (read: 12)"}
    own = dataclasses.replace(o, claim_reasons={"unknown.reuse_metrics": "Its own\nwords."})
    assert probes.row_reasons(own)["unknown.reuse_metrics"] == "Its own words."  # one line
    cell = dataclasses.replace(o, metrics={"reused_tokens": 12}, rests_on=(Support("reused_tokens", ">", 0),))
    out = at_most_inconclusive_without_engine(cell)
    assert out.claim_verdicts["unknown.reuse_metrics"] == "inconclusive"
    assert "At most inconclusive" in out.claim_reasons["unknown.reuse_metrics"]
