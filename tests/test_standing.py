"""Which verdict stands: one rule for the report and the blueprint; only the subject engine resolves."""

from __future__ import annotations

from pathlib import Path

from workbench import probes, standing
from workbench.environment import fingerprint
from workbench.findings import Finding

RESOLVE_TAIL = " --model HF_DIR --out findings"  # every resolve command names the model folder and the findings folder


#: per verdict, an engine reading that holds and that the warm-up rule rests that verdict on
HELD = {"confirmed": {"metrics": {"engine_reuse_fraction": {"value": 0.5, "unit": "ratio", "source": "engine"}},
                      "rests_on": [{"metric": "engine_reuse_fraction", "op": "<", "value": 1.0}]},
        "refuted": {"metrics": {"engine_reuse_fraction": {"value": 1.0, "unit": "ratio", "source": "engine"}},
                    "rests_on": [{"metric": "engine_reuse_fraction", "op": ">=", "value": 1.0}]}}


def f(verdict, engine="trtllm", version="1.2.0", created="2026-07-03T10:00:00+00:00", reason=None,
      claims=("risk.warmup",), probe="prefix.warmup_materialization", model="m", **more):
    """A finding as its probe writes it: this workbench's version of the probe, resting on an engine reading."""
    declared = probes.declared(probe)
    return Path(f"/x/{engine}-{created}.json"), Finding(
        probe=probe, claims=list(claims), verdict=verdict, summary=f"{verdict} on {engine}", engine=engine,
        environment=fingerprint(engine, version) | {"engine_version": version}, reason=reason, created=created,
        params={"model": model}, probe_version=declared.version if declared else "1", **HELD.get(verdict, {}) | more)


def state(found, claim="risk.warmup"):
    return next(s for s in standing.claim_states(found) if s.claim.id == claim)


def test_only_the_subject_engine_resolves_a_claim():
    s = state([f("confirmed", engine="llamacpp", version="0.3.36")])
    assert not s.resolved and [r.engine for r in s.references] == ["llamacpp"]
    assert s.headline == "unresolved — needs tensorrt_llm on an NVIDIA GPU"
    assert s.command == "workbench probe prefix.warmup_materialization --engine trtllm" + RESOLVE_TAIL
    assert state([f("refuted")]).resolved
    assert not state([f("not-applicable")]).resolved  # the cell's absence list is not the engine's word


def test_the_subject_served_answers_like_the_subject_in_process():
    served = state([f("confirmed", engine="trtllm-serve"), f("confirmed", engine="llamacpp-server", version="b1")])
    assert served.resolved and [s.engine for s in served.answers] == ["trtllm-serve"]
    assert [r.engine for r in served.references] == ["llamacpp-server"]  # another engine served is still a reference
    waiting = state([f("not-run", engine="trtllm-serve", reason="needs tensorrt_llm")])
    assert not waiting.resolved and [s.engine for s in waiting.subject] == ["trtllm-serve"]
    assert waiting.command == "workbench probe prefix.warmup_materialization --engine trtllm" + RESOLVE_TAIL


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


def test_a_static_mapping_finding_never_outranks_a_behavioural_one():
    """surface.contract_mapping runs last (notebook 50); the newest-wins rule let its existence check replace
    the warm-up probe's behavioural verdict on a shared contract row."""
    behaviour = f("confirmed", claims=("risk.warmup", "contract.ensure_prefix"), created="2026-07-01T00:00:00+00:00",
                  claim_verdicts={"contract.ensure_prefix": "refuted"})
    static = f("partial", claims=("contract.ensure_prefix",), probe="surface.contract_mapping",
               created="2026-07-09T00:00:00+00:00")
    (only,) = state([behaviour, static], "contract.ensure_prefix").subject
    assert only.verdict == "refuted" and only.probe == "prefix.warmup_materialization"
    (alone,) = state([static], "contract.ensure_prefix").subject  # with nothing behavioural, the survey stands,
    assert alone.verdict == "partial" and not alone.answers  # and settles nothing: existence is not behaviour


def test_a_finding_on_another_model_does_not_replace_this_models():
    found = [f("refuted", model="a", created="2026-07-01T00:00:00+00:00"), f("confirmed", model="b")]
    assert sorted((s.model, s.verdict) for s in state(found).subject) == [("a", "refuted"), ("b", "confirmed")]


def test_each_loop_arm_stands_beside_the_gate_and_the_loop_resolves_it():
    """The loop's arms are one engine in several configurations: each keeps its own reference row."""
    from workbench import standing

    def arm(name):
        return (None, Finding(probe=f"loop.{name}", claims=["gate.turn_time"], verdict="inconclusive",
                              summary=name, engine="llamacpp", environment={"engine_version": "0.3.36"},
                              params={"arm": name, "model": "m"}))

    found = [arm("llamacpp"), arm("llamacpp-spec"), arm("llamacpp-cold")]
    (state,) = [c for c in standing.claim_states(found, "gates") if c.claim.id == "gate.turn_time"]
    assert sorted(s.summary for s in state.references) == ["llamacpp", "llamacpp-cold", "llamacpp-spec"]
    assert state.command.startswith("workbench loop --trace taubench --arms trtllm,")


# --------------------------------------------------------------------------- version churn, across findings


def survey(version, cache_salt=True, engine="trtllm", created="2026-07-03T10:00:00+00:00", signature=True):
    """A contract-mapping survey of ``version`` whose generate_async row does or does not have cache_salt."""
    path, fd = f("partial", engine=engine, version=version, created=created, probe="surface.contract_mapping",
                 claims=("entry.contract_table", "risk.version_churn"))
    row = {"guard": "LLM.generate_async", "feature": "core", "ok": cache_salt, "version": version}
    if signature:
        row["signature"] = {"at": "LLM.generate_async", "names": {"inputs": True, "cache_salt": cache_salt},
                            "defaults": {}}
    fd.evidence = {"rows": [row]}
    fd.claim_verdicts = {"risk.version_churn": "inconclusive"}
    return path, fd


def test_version_churn_is_settled_across_the_subjects_versions():
    changed = state([survey("1.2.1"), survey("1.3.0", cache_salt=False)], "risk.version_churn")
    (only,) = changed.subject
    assert changed.resolved and only.verdict == "confirmed" and only.engine_version == "1.2.1 → 1.3.0"
    assert "cache_salt gone" in only.summary
    same = state([survey("1.2.0"), survey("1.2.1")], "risk.version_churn")
    assert [s.verdict for s in same.subject] == ["refuted"]


def test_one_version_leaves_churn_open_with_what_it_needs():
    s = state([survey("1.2.1"), survey("1.2.1", created="2026-07-04T10:00:00+00:00")], "risk.version_churn")
    (only,) = s.subject
    assert not s.resolved and only.verdict == "inconclusive" and "≥2 TensorRT-LLM versions" in only.summary
    assert s.command.startswith("workbench probe surface.contract_mapping --engine trtllm") and "each" in s.command and s.command.endswith("into the same --out")


def test_other_engines_versions_never_answer_churn():
    s = state([survey("0.3.35", engine="llamacpp"), survey("0.3.36", engine="llamacpp", cache_salt=False)],
              "risk.version_churn")
    assert not s.resolved and not s.subject and {r.engine for r in s.references} == {"llamacpp"}
    assert s.headline == "unresolved — needs tensorrt_llm on an NVIDIA GPU"


def test_release_order_puts_a_release_candidate_before_its_release():
    """Churn compares surveys old → new: 1.2.0rc1 once sorted after 1.2.0 and read each change backwards."""
    from workbench.versions import natural

    assert sorted(["1.2.0", "1.10.0", "1.2.0rc1", "1.9.1"], key=natural) == ["1.2.0rc1", "1.2.0", "1.9.1", "1.10.0"]
    assert sorted(["1.2", "not-a-version"], key=natural) == ["not-a-version", "1.2"]
