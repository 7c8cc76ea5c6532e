"""A verdict settles only where this workbench measured it (issue 48): bound to the run that wrote it, possible on its
recorded hardware, re-derived from its own evidence by its probe's code, no parameter building its outcome.

Every forgery is built from a real finding file, written by a real run on llama.cpp (and vLLM, where the session
already runs it), and must settle nothing, with its reason, in the blueprint, the gateway guide, ``workbench
findings`` and the report (:func:`forgery.settles_nothing`). Each fails without its rule: before, a finding that
agreed with itself settled, whoever wrote it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import TINY
from forgery import relabel, rewrite, run_folder, settles_nothing, with_gpu

from workbench import findings, ledger, loop, manifest, probes, runner, settle
from workbench.loop import gate

SUBJECT_GPU = "runs only on an NVIDIA GPU, and its fingerprint records none"


@pytest.fixture(scope="module")
def capacity(tmp_path_factory) -> tuple[Path, Path]:
    """capacity.budget_policy on the real llama.cpp, at its defaults and with the rule's bound moved
    (``max_overshoot=0.9``): each finding's file, written as the probe writes it (its ledger line beside it)."""
    honest, moved = tmp_path_factory.mktemp("honest"), tmp_path_factory.mktemp("moved")
    a = probes.run("capacity.budget_policy", engine="llamacpp", model=TINY, out=honest, isolated=False)
    b = probes.run("capacity.budget_policy", engine="llamacpp", model=TINY, out=moved, isolated=False,
                   params={"max_overshoot": 0.9})
    return honest / f"{a.id}.json", moved / f"{b.id}.json"


@pytest.fixture(scope="module")
def gate_run(tmp_path_factory) -> Path:
    """The loop on the real llama.cpp with the subject's arm: its arm finding and its gate finding (not-run here: no
    TensorRT-LLM), both written by the loop, as ``make run`` writes them."""
    out = tmp_path_factory.mktemp("loop")
    loop.run("claude-code", arms="llamacpp,trtllm", model=TINY, sessions=1, turns=3, threads=1, context_tokens=1024,
             out=out)
    return out


@pytest.fixture(scope="module")
def contract_probes(tmp_path_factory) -> Path:
    """contract.conformance and contract.benchreport (the probes that came with the cell's daemon) on the real
    llama.cpp, small, their files and ledger lines in one folder."""
    out = tmp_path_factory.mktemp("contract")
    probes.run("contract.conformance", engine="llamacpp", model=TINY, out=out, isolated=False)
    probes.run("contract.benchreport", engine="llamacpp", model=TINY, out=out, isolated=False,
               params={"stable_words": 16, "curve": "0,64", "context_tokens": 512, "max_decode": 2})
    return out


def test_an_honest_finding_is_bound_to_its_ledger_line_and_re_derives(capacity):
    path, _ = capacity
    (v,) = settle.read([path.parent]).verified
    assert v.bound == f"{path.parent.name}/{ledger.LEDGER}" and not v.answer_why, v.reasons
    assert v.finding.verdict in settle.ANSWERS  # an answer (a reference's: it settles nothing on the subject's claim)
    assert ledger.ids(path.parent) == {v.finding.id: v.finding.digest}


def test_a_rules_bound_given_as_a_parameter_is_exploratory(capacity):
    """``max_overshoot=0.9`` turned llama.cpp's confirmed into a settled partial."""
    _, moved = capacity
    (v,) = settle.read([moved.parent]).verified
    assert any("exploratory: max_overshoot=0.9" in w for w in v.answer_why), v.reasons


def test_three_fields_relabelled_to_tensorrt_llm_settle_nothing_anywhere(capacity, tmp_path):
    """The issue's relabel: engine, the fingerprint's engine and engine version → trtllm 1.2.1, on a row that reads
    "no GPU". Edited after its run, and a machine that could not have run TensorRT-LLM."""
    run = run_folder(tmp_path, capacity[0])
    rewrite(next((run / "findings").glob("capacity*.json")), relabel())
    said = settles_nothing(run, "risk.memory_fraction", "edited after its run", SUBJECT_GPU)
    assert "**TensorRT-LLM: confirmed" not in said["document"]


def test_a_relabel_that_also_gives_the_fingerprint_a_gpu_is_still_edited_after_its_run(capacity, tmp_path):
    run = run_folder(tmp_path, capacity[0])
    path = next((run / "findings").glob("capacity*.json"))
    rewrite(path, lambda d: (relabel()(d), with_gpu(d)))
    settles_nothing(run, "risk.memory_fraction", "edited after its run")


def test_a_finding_copied_in_without_its_record_settles_nothing(capacity, tmp_path):
    (tmp_path / "run" / "findings").mkdir(parents=True)
    shutil.copy2(capacity[0], tmp_path / "run" / "findings")
    rewrite(next((tmp_path / "run" / "findings").glob("*.json")), relabel())
    settles_nothing(tmp_path / "run", "risk.memory_fraction", "no record of the run that wrote it lists it")


def test_a_stand_in_version_the_guard_does_not_know_settles_nothing(capacity, tmp_path):
    """llama.cpp's 0.3.36 filed as TensorRT-LLM's (the hidden stand-in subject): its record rewritten too, so the
    binding holds; the version is one TensorRT-LLM's guard does not know."""
    run = run_folder(tmp_path, capacity[0])
    path = next((run / "findings").glob("capacity*.json"))
    rewrite(path, lambda d: (relabel(version="0.3.36")(d), with_gpu(d)))
    _record_again(path)
    settles_nothing(run, "risk.memory_fraction", "version '0.3.36' is not one its guard knows")


def test_numbers_its_own_rows_do_not_give_settle_nothing_even_with_the_record_rewritten(capacity, tmp_path):
    """The verdict and its supporting number edited to agree with each other, the record rewritten to match: the
    probe's own rule on the finding's own rows gives another verdict and another number."""
    run = run_folder(tmp_path, capacity[0])
    path = next((run / "findings").glob("capacity*.json"))

    def forge(doc: dict) -> None:
        relabel()(doc)
        with_gpu(doc)
        doc["verdict"] = "refuted"
        doc["claim_verdicts"] = {"contract.describe": "confirmed"}
        doc["metrics"]["engine_kv_bytes"]["value"] = 1.0
        doc["rests_on"] = [{"metric": "engine_kv_bytes", "op": "<=", "value": 2.0},
                           {"metric": "measured_capacity_tokens", "op": ">=", "value": 0.0}]
    rewrite(path, forge)
    _record_again(path)
    settles_nothing(run, "risk.memory_fraction", "re-derived from its own evidence by capacity.budget_policy's rule",
                    "but its own evidence gives")


def _record_again(path: Path) -> None:
    """The forger's next step: the ledger line rewritten to the edited file's digest (what a digest cannot stop)."""
    led = path.parent / ledger.LEDGER
    doc = json.loads(path.read_text())
    lines = [json.loads(x) for x in led.read_text().splitlines()]
    led.write_text("".join(json.dumps(e | ({"digest": ledger.digest(doc)} if e["id"] == doc["id"] else {})) + "\n"
                           for e in lines))


def test_a_reference_finding_relabelled_from_vllm_settles_nothing(vllm_reuse, tmp_path):
    """A real vLLM finding from this CPU machine (the session's reuse probe) relabelled TensorRT-LLM 1.2.1."""
    f, out = vllm_reuse
    run = run_folder(tmp_path, out / f"{f.id}.json")
    rewrite(run / "findings" / f"{f.id}.json", relabel())
    for claim in ("unknown.reuse_metrics", "risk.reuse_metrics"):
        settles_nothing(run, claim, "edited after its run", SUBJECT_GPU)


def _forged_gate(doc: dict) -> None:
    """The real not-run gate made a self-consistent confirmed: about ten fields."""
    doc |= {"verdict": "confirmed", "reason": None, "summary": "trtllm 3.0× [2.5, 3.5] over llamacpp: clears 2×"}
    doc["metrics"] = {t: {"value": v, "unit": "x", "source": "derived"} for t, v in (
        ("speedup_vs_best_llamacpp", 3.0), ("speedup_ci_low", 2.5), ("speedup_ci_high", 3.5))}
    doc["evidence"]["gate"] |= {"subject_reason": None, "best_reference": "llamacpp", "compared_turns": 24,
                                "baseline_missing": [], "baseline_disqualified": [], "no_reference": None}
    doc["evidence"]["rows"] = [r | {"best_llamacpp": r["arm"] == "llamacpp"} for r in doc["evidence"]["rows"]]
    doc["environment"]["target"] = {"gpu": ["NVIDIA H200"]}
    with_gpu(doc)


def test_the_self_consistent_gate_settles_nothing(gate_run, tmp_path):
    (gate_file,) = gate_run.glob("loop.gate-*.json")
    assert json.loads(gate_file.read_text())["verdict"] == "not-run"
    run = run_folder(tmp_path, *gate_run.glob("loop.*.json"))
    rewrite(run / "findings" / gate_file.name, _forged_gate)
    settles_nothing(run, gate.CLAIM, "edited after its run")
    _record_again(run / "findings" / gate_file.name)  # the record rewritten too: its own turns still say not-run
    settles_nothing(run, gate.CLAIM, "re-derived from its own evidence by loop's rule, its verdict on "
                                     f"{gate.CLAIM} is not-run, not confirmed")


def test_a_gate_contradicting_its_params_settles_nothing(gate_run, tmp_path):
    """24 compared turns from a run whose own parameters served one session of 3 turns."""
    (gate_file,) = gate_run.glob("loop.gate-*.json")
    run = run_folder(tmp_path, *gate_run.glob("loop.*.json"))
    rewrite(run / "findings" / gate_file.name, _forged_gate)
    _record_again(run / "findings" / gate_file.name)
    settles_nothing(run, gate.CLAIM, "it compares 24 turns, but its own parameters ran at most 1 session(s) × 3 "
                                     "turn(s)")


def test_a_gate_apart_from_its_runs_arm_findings_settles_nothing(gate_run, tmp_path):
    (gate_file,) = gate_run.glob("loop.gate-*.json")
    run = run_folder(tmp_path, gate_file)
    rewrite(run / "findings" / gate_file.name, _forged_gate)
    _record_again(run / "findings" / gate_file.name)
    settles_nothing(run, gate.CLAIM, "none of the arm findings of its run")


def test_the_run_record_lists_each_findings_digest_and_an_edit_after_the_run_is_named(capacity, tmp_path):
    """What ``workbench run`` records when a notebook ends: each finding its attempt wrote, by digest, in run.json."""
    out = tmp_path / "run"
    doc = json.loads(capacity[0].read_text()) | {"attempt": "a1", "id": "capacity.budget_policy-llamacpp-x-1"}
    finding = findings.from_dict(doc)
    findings.write(finding, out / "findings")
    entry = manifest.NotebookRun("50_capacity_surface", "ok", {}, "notebooks/x.ipynb", "t", 1.0, attempt="a1",
                                 findings=runner.attempt_digests(out, "a1"))
    assert entry.findings == {finding.id: ledger.ids(out / "findings")[finding.id]}
    manifest.record(out, entry)
    (out / "findings" / ledger.LEDGER).unlink()  # only the run's own record binds it now
    (v,) = settle.read([out / "findings"]).verified
    assert v.bound == "run.json (notebook 50_capacity_surface, attempt a1)" and not v.answer_why, v.reasons
    rewrite(out / "findings" / f"{finding.id}.json", relabel())
    (v,) = settle.read([out / "findings"]).verified
    assert v.answer_why[0].startswith("edited after its run: its content is not what run.json (notebook "
                                      "50_capacity_surface, attempt a1) recorded")


def test_every_probe_declares_its_re_derivation_and_its_measurement_checked_at_load():
    """As pluggy's _verify_hook checks a hook implementation: a from_evidence of another signature, or a measured
    parameter the probe does not have, is refused when the probe is loaded."""
    for name in probes.names():
        p = probes.get(name)
        assert p.rederives, f"{name} declares no from_evidence"
        assert set(p.measures) <= set(p.defaults()), name
    for source in probes.SOURCES.names():  # the loop, the eval table, the gates and the quality smoke
        assert probes.declared(source).rederives, f"{source} declares no from_evidence"

    class Drifted(probes.Probe):
        def from_evidence(self, rows, params):  # the spec's names are (evidence, p)
            return probes.Outcome("inconclusive", "")

    with pytest.raises(TypeError, match=r"from_evidence\(rows, params\); the hook's spec is from_evidence\(evidence, p\)"):
        probes.verify_declared("drifted", Drifted)

    class Stray(probes.Probe):
        measures = ("nothing_of_mine",)

    with pytest.raises(TypeError, match="nothing_of_mine"):
        probes.verify_declared("stray", Stray)


def test_a_probe_without_its_re_derivation_settles_nothing(capacity, monkeypatch):
    """A new probe gets binding, environment and parameters from its declaration alone; its numbers settle only once
    it declares its rule as from_evidence."""
    from workbench.probes.capacity import BudgetPolicy

    monkeypatch.delattr(BudgetPolicy, "from_evidence")
    settle.forget()
    try:
        (v,) = settle.read([capacity[0].parent]).verified
        assert any("declares no re-derivation of its outcome from its evidence" in w for w in v.answer_why)
    finally:
        settle.forget()


def test_compare_names_a_relabelled_subject_claim_first_and_marked(capacity, tmp_path):
    """Issue 48 item 5: the relabelled finding's claim never appeared as a change. Now it leads, marked, with why."""
    from typer.testing import CliRunner

    from workbench.cli import app

    before = run_folder(tmp_path / "a", capacity[0])
    after = run_folder(tmp_path / "b", capacity[0])
    rewrite(next((after / "findings").glob("capacity*.json")), relabel())
    r = CliRunner().invoke(app, ["compare", str(before), str(after)])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    first = lines.index("the subject's claims that changed:") + 1
    assert lines[first].startswith("  ! answered, settles nothing: ") and "on TensorRT-LLM 1.2.1" in lines[first], lines
    claims = [ln for ln in lines[first:] if ln.startswith("  ! answered")]
    assert {c.split(": ")[1] for c in claims} >= {"risk.memory_fraction"}
    assert all("(settles nothing: edited after its run" in c for c in claims), claims


@pytest.mark.parametrize("probe, claim", [("contract.conformance", "contract.decode"),
                                          ("contract.benchreport", "bench.edited_miss")])
def test_the_daemons_probes_re_derive_and_their_forgeries_settle_nothing(contract_probes, tmp_path, probe, claim):
    """The probes that came with the cell's daemon, as the older ones: an honest finding re-derives from its rows; the
    three-field relabel is edited after its run; the verdict flipped with the record rewritten is not what its own
    rows give."""
    (path,) = contract_probes.glob(f"{probe}-*.json")
    (v,) = [v for v in settle.read([contract_probes]).verified if v.finding.probe == probe]
    assert v.finding.verdict_on(claim) == "confirmed" and not v.why(claim), v.reasons
    run = run_folder(tmp_path / "relabelled", path)
    rewrite(run / "findings" / path.name, relabel())
    settles_nothing(run, claim, "edited after its run", SUBJECT_GPU)

    def flip(doc: dict) -> None:
        relabel()(doc)
        with_gpu(doc)
        doc["claim_verdicts"][claim] = "refuted"
    run = run_folder(tmp_path / "flipped", path)
    rewrite(run / "findings" / path.name, flip)
    _record_again(run / "findings" / path.name)
    settles_nothing(run, claim, f"re-derived from its own evidence by {probe}'s rule, its verdict on {claim} is "
                                "confirmed, not refuted")
