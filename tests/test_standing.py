"""Which verdict stands: one rule for the report and the blueprint; only the subject engine resolves."""

from __future__ import annotations

from pathlib import Path

from workbench import standing
from workbench.environment import fingerprint
from workbench.findings import Finding


def f(verdict, engine="trtllm", version="1.2.0", created="2026-07-03T10:00:00+00:00", reason=None,
      claims=("risk.warmup",), probe="prefix.warmup_materialization"):
    return Path(f"/x/{engine}-{created}.json"), Finding(
        probe=probe, claims=list(claims), verdict=verdict, summary=f"{verdict} on {engine}", engine=engine,
        environment=fingerprint(engine, version) | {"engine_version": version}, reason=reason, created=created)


def state(found, claim="risk.warmup"):
    return next(s for s in standing.claim_states(found) if s.claim.id == claim)


def test_only_the_subject_engine_resolves_a_claim():
    s = state([f("confirmed", engine="llamacpp", version="0.3.36")])
    assert not s.resolved and [r.engine for r in s.references] == ["llamacpp"]
    assert s.headline == "unresolved — needs tensorrt_llm on an NVIDIA GPU"
    assert s.command == "workbench probe prefix.warmup_materialization --engine trtllm"
    assert state([f("not-applicable")]).resolved


def test_newest_that_ran_stands_and_not_run_never_masks_it():
    found = [f("refuted", created="2026-07-01T00:00:00+00:00"), f("confirmed", created="2026-07-02T00:00:00Z"),
             f("not-run", created="2026-07-09T00:00:00+00:00", reason="no GPU")]
    (only,) = state(found).subject
    assert only.verdict == "confirmed"


def test_inconclusive_keeps_the_claim_open_and_says_so():
    s = state([f("inconclusive")])
    assert not s.resolved and s.headline == "open — inconclusive on TensorRT-LLM 1.2.0"


def test_not_run_reason_is_given_once_per_engine():
    found = [f("not-run", reason="old reason", created="2026-07-01T00:00:00+00:00"),
             f("not-run", reason="no GPU", claims=("risk.version_churn",))]
    assert standing.not_run_reasons(found) == {"trtllm": {"no GPU": ["prefix.warmup_materialization"]}}
    static = f("not-run", reason="not installed", probe="surface.contract_mapping", claims=("risk.version_churn",))
    assert standing.not_run_reasons([*found, static]) == {
        "trtllm": {"no GPU": ["prefix.warmup_materialization"], "not installed": ["surface.contract_mapping"]}}
