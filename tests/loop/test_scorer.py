"""The greedy scorer compares fair arms: it reads decode's logits (not one batch's) from the subject's model at
the subject's precision, so an honest arm is compared on its turns, on real llama.cpp."""

from __future__ import annotations

import json

import pytest

from workbench import loop, models
from workbench.loop import arms, equal, gate, verify

from . import standins

# outputs of 64 tokens: teacher forcing them in one batch takes llama.cpp's tiled F32 attention, decode its F16 one
LONG = dict(threads=1, context_tokens=1024, tokens_per_block=64, rule=gate.GateRule(min_turns=2))
TINY = models.parse_synthetic("synthetic:tiny")


def compared_share(res, arm: str) -> float:
    mine = res.rows[res.rows.arm == arm]
    assert len(mine) == 4
    return float(mine.comparable.mean())


def test_honest_llamacpp_arms_are_compared_against_their_own_file(hand_trace):
    """Scored decode-like on the arms' thread count, a plain arm's every token is the scorer's argmax (gap 0.000:
    the scorer reads decode's own logits); teacher forcing 64 tokens in one batch read 0.011 σ here."""
    res = loop.run(str(hand_trace), arms="llamacpp-cold,llamacpp,llamacpp-spec", model="synthetic:tiny", **LONG)
    assert (res.rows.decode_tokens >= 64).all(), "outputs too short to take the batched kernels: the test shows nothing"
    for arm in ("llamacpp-cold", "llamacpp", "llamacpp-spec"):
        assert compared_share(res, arm) >= 0.9, res.rows[res.rows.arm == arm].excluded_why.tolist()
    assert (res.rows[res.rows.arm != "llamacpp-spec"].greedy_gap_sd == 0.0).all()
    assert "decode-like" in res.workload["scorer"]["scoring"]


def test_a_prompt_lookup_arm_is_compared_at_its_calibrated_margin():
    """taubench on synthetic:tiny, two threads: the prompt-lookup arm chose its tokens in verification batches, whose
    kernels read them up to 0.28 σ below the sequential scorer's top token, so the claim's 0.25 σ barred that honest
    arm on 2 of 3 turns. The scorer replays its batches, measures that gap from llama.cpp's logits, widens its margin
    by it and records it; the rule stays the claim's."""
    res = loop.run("taubench", arms="llamacpp,llamacpp-spec", model="synthetic:tiny", sessions=1, turns=3, threads=2)
    rows = res.rows[res.rows.arm == "llamacpp-spec"]
    assert rows.greedy_gap_sd.max() > equal.CLAIM_MARGIN_SD, "the batches read as decode does: the test shows nothing"
    assert res.rows.comparable.mean() >= 0.9 and rows.comparable.mean() >= 0.9, rows.excluded_why.tolist()
    gap = float(rows.numeric_gap_sd.max())
    assert 0 < gap <= equal.NUMERIC_GAP_CAP_SD
    assert res.rows[res.rows.arm == "llamacpp"].numeric_gap_sd.isna().all()  # decoded as the scorer reads: no gap
    found = next(f for f in res.findings if f.probe == "loop.llamacpp-spec")
    assert found.metric("scorer_numeric_gap_sd") == pytest.approx(gap)
    assert found.metric("near_tie_margin_sd") == pytest.approx(equal.CLAIM_MARGIN_SD + gap)
    assert any("near-tie margin calibrated" in n for n in found.evidence["notes"])
    assert res.workload["equal_work"]["exploratory"] is None and "batched-vs-sequential" in res.workload["equal_work_rule"]


def test_a_fair_higher_precision_subject_is_compared(monkeypatch, hand_trace):
    """The subject (a stand-in for TensorRT-LLM) runs the model at F16; the loop's --model is a Q4_0 file of the
    same weights. Scored by the Q4_0 file, the F16 subject is barred on most turns (the control below); scored by
    its own precision, it is compared on its turns, and the finding says which file and weights scored it."""
    standins.register(monkeypatch)
    monkeypatch.setitem(arms.ARMS._loaded, "trtllm", arms.ArmSpec(
        "trtllm", "standin-plain", True, "none", "stand-in subject at F16", {"threads": 1, "context_tokens": 1024}))
    f16, q4 = (str(models.write_synthetic(TINY, weights=w)) for w in ("F16", "Q4_0"))
    run = dict(arms="llamacpp,trtllm", model=q4, arm_models={"llamacpp": f16, "trtllm": f16}, **LONG)
    res = loop.run(str(hand_trace), **run)
    assert compared_share(res, "trtllm") >= 0.9 and compared_share(res, "llamacpp") >= 0.9
    scorer = res.findings[-1].environment["loop"]["scorer"]
    assert scorer["weights"] == "F16" and "the subject's (trtllm) own file" in scorer["chosen_by"]
    barred = loop.run(str(hand_trace), scorer_model=q4, **run)  # the control: the experiment could fail
    assert compared_share(barred, "trtllm") < 0.9
    assert barred.findings[-1].environment["loop"]["scorer"]["weights"] == "Q4_0"


def test_the_scorer_runs_the_subjects_precision(tmp_path):
    """The rule as a table: a given file wins; the subject's own GGUF; its synthetic checkpoint converted at its
    dtype; the loop's model where the subject runs that; a checkpoint that cannot be converted here names the fix."""
    f16 = str(models.write_synthetic(TINY, weights="F16"))
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({**models.hf_config_for(TINY), "torch_dtype": "float16"}))
    cases = [
        (("m", "trtllm", f16, "given.gguf"), "given.gguf", "--scorer-model"),
        (("m", "trtllm", f16, None), f16, "own file"),
        (("m", "trtllm", str(hf), None), f16, "checkpoint as a GGUF at its own precision"),
        (("m", "trtllm", None, None), "m", "the loop's model"),
    ]
    for args, spec, why in cases:
        got = verify.scorer_model(*args)
        assert got.spec == spec and why in got.chosen_by, (args, got)
    real = tmp_path / "real"
    real.mkdir()
    (real / "config.json").write_text(json.dumps({"model_type": "llama", "torch_dtype": "bfloat16"}))
    with pytest.raises(models.ModelSpecError, match="--outtype bf16.*--scorer-model"):
        verify.scorer_model("m", "trtllm", str(real))
