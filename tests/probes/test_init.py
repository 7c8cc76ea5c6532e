"""The probe framework: typed parameters, provenance kept apart, not-run with a reason, engine-sourced answers."""

from __future__ import annotations

import pytest

from workbench import claims, metrics, probes
from workbench.probes import Outcome, at_most_inconclusive_without_engine

TINY = "synthetic:tiny"


def test_trtllm_is_not_run_here_with_the_reason(tmp_path):
    f = probes.run("reuse.per_request_metrics", engine="trtllm", model=TINY, out=tmp_path)
    assert f.verdict == "not-run" and "tensorrt_llm" in f.reason
    assert f.metrics == {} and f.environment["engine_version"] is None


@pytest.mark.parametrize("params, message", [
    ({"bogus": 1}, "unknown parameter.*bogus.*valid: prefix_tokens"),
    ({"prefix_tokens": "many"}, "prefix_tokens must be int"),
    ({"priorities": "35,200"}, r"priorities must be in \[0, 100\]"),
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
    with pytest.raises(probes.ParamError, match="rejected a cell option.*tokens_per_blok"):
        probes.run("reuse.per_request_metrics", engine="llamacpp", model=TINY, cell_options={"tokens_per_blok": 8})


def test_static_probes_refuse_a_model_or_cell_options():
    with pytest.raises(probes.ParamError, match="drop --model"):
        probes.run("surface.contract_mapping", engine="llamacpp", model=TINY)
    with pytest.raises(probes.ParamError, match="drop --model"):
        probes.run("surface.contract_mapping", engine="llamacpp", cell_options={"n_batch": 8})


def test_an_answer_resting_only_on_cell_bookkeeping_is_at_most_inconclusive():
    cell_only = Outcome("confirmed", "The cell says so.", {"reused_tokens": 10}, claim_verdicts={"risk.warmup": "refuted"},
                        rests_on=("reused_tokens",))
    out = at_most_inconclusive_without_engine(cell_only)
    assert out.verdict == "inconclusive" and out.claim_verdicts == {"risk.warmup": "inconclusive"}
    assert "reused_tokens is cell-sourced" in out.summary
    engine = Outcome("confirmed", "Read back.", {"engine_resident_tokens": 10}, rests_on=("engine_resident_tokens",))
    assert at_most_inconclusive_without_engine(engine) is engine


def test_audit_5_the_guard_checks_what_the_verdict_rests_on_not_any_engine_tag():
    """Any engine-tagged metric used to pass an outcome, whatever its verdict rested on; NaN passed too."""
    beside = Outcome("confirmed", "Rests on the cell's count.", {"reused_tokens": 10, "engine_resident_tokens": 10},
                     rests_on=("reused_tokens",))
    assert at_most_inconclusive_without_engine(beside).verdict == "inconclusive"
    nan = Outcome("refuted", "NaN survival.", {"survival_at_max_pressure": float("nan")},
                  rests_on=("survival_at_max_pressure",))
    assert at_most_inconclusive_without_engine(nan).verdict == "inconclusive"
    timed = Outcome("confirmed", "Faster.", {"ttft_cold_s": 0.2}, rests_on=("ttft_cold_s",))
    assert at_most_inconclusive_without_engine(timed).verdict == "inconclusive"
    undeclared = Outcome("confirmed", "Says nothing.", {"engine_resident_tokens": 10})
    assert "named no engine-read number" in at_most_inconclusive_without_engine(undeclared).summary
    na = Outcome("not-applicable", "Absent.", {})
    assert at_most_inconclusive_without_engine(na) is na
    assert metrics.get("reused_tokens").source == "cell"


def test_issue_23_a_vocabulary_too_small_for_probe_prompts_names_the_fix():
    """It was numpy's bare `low >= high`."""
    from types import SimpleNamespace

    import numpy as np
    import pytest

    from workbench.contract import WorkbenchError
    from workbench.probes.common import token_ids

    rng = np.random.default_rng(0)
    assert len(token_ids(rng, 5, SimpleNamespace(extra={"vocab_size": 512}))) == 5
    with pytest.raises(WorkbenchError, match="vocabulary has 200 tokens.*more than 260 tokens"):
        token_ids(rng, 5, SimpleNamespace(extra={"vocab_size": 200}))
