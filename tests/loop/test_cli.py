"""`workbench loop` end to end on real llama.cpp: findings per arm, the gate, write-back, bad input."""

from __future__ import annotations

import shutil

import pytest

from typer.testing import CliRunner

from workbench import blueprint, findings
from workbench.cli import app
from workbench.loop import arms, default_arms
from workbench.files import REPO_ROOT


def test_loop_writes_a_finding_per_arm_and_the_gate(hand_trace, tmp_path):
    out = tmp_path / "findings"
    res = CliRunner().invoke(app, ["loop", "--trace", str(hand_trace), "--model", "synthetic:tiny", "--threads", "1",
                                   "--context", "1024", "--tokens-per-block", "4", "--out", str(out)])
    assert res.exit_code == 0, res.output
    found = {f.probe: f for _, f in findings.scan([out]).findings}
    # one finding per reference arm; the subject's (trtllm) not-run reason lives in the gate finding
    assert set(found) == {f"loop.{a}" for a in arms.names() if a != "trtllm"} | {"loop.gate"}
    for name in ("llamacpp-cold", "llamacpp", "llamacpp-spec"):
        f = found[f"loop.{name}"]
        assert f.verdict == "inconclusive" and f.engine == "llamacpp"
        assert {"reuse_efficiency", "ttft_p50_s", "loop_time_s", "speedup_vs_best_llamacpp"} <= f.metrics.keys()
        assert len(f.evidence["rows"]) == 4 and f.claims == ["gate.turn_time"]
        n = f.metric("speedup_turns")  # 4 turns at most: labelled as a CI over so few wherever it is shown
        assert f.evidence["ci"]["speedup_vs_best_llamacpp"]["few_turns"] and f"(CI over {int(n)} turns)" in f.summary
    rows = found["loop.llamacpp"].evidence["rows"]
    # turn 4 extends turn 2's sequence, which turn 3 overwrote in the one-slot cell: an eviction, attributed
    assert sum(r["eviction"] for r in rows) > 0 and all(r["unexplained"] == 0 for r in rows)
    assert found["loop.llamacpp"].metric("reuse_efficiency") == pytest.approx(
        sum(r["reused"] for r in rows) / sum(r["theoretical"] for r in rows))
    assert {"drafted", "accepted", "same_tokens_as_reference"} <= set(found["loop.llamacpp-spec"].evidence["columns"])
    # vLLM's CPU attention cannot run the tiny model's head dim 16: its arms say so instead of failing the loop
    assert found["loop.vllm"].verdict == "not-run" and "head dim 16" in found["loop.vllm"].reason
    # the arms side by side, as serving benchmarks name their numbers, each column's unit and source said once
    assert "ITL (TPOT) p50 (ms)" in res.output and "output throughput (tok/s)" in res.output
    assert "timed by the workbench: TTFT p50" in res.output and "engine-read: reuse efficiency" in res.output
    g = found["loop.gate"]
    assert g.verdict == "not-run" and g.engine == "trtllm"
    assert "gpu_layers" in g.reason and "certified model" in g.reason and "llamacpp-spec" in g.reason
    assert "tensorrt_llm" in g.reason
    # written back under the entry condition, beside the other entry condition's block
    bp = tmp_path / "blueprint.md"
    shutil.copy(REPO_ROOT / "data" / "blueprint" / "blueprint.md", bp)
    assert blueprint.run_writeback(bp, [out]) == 0
    text = bp.read_text()
    block = text[text.index("<!-- workbench:begin entry.step_function -->"):text.index("<!-- workbench:end entry.step_function -->")]
    assert "TensorRT-LLM: unresolved" in block  # the entry condition, across the four gates
    # G4's line under it: the subject's standing (unresolved) first, the llama.cpp arms beside it as references
    gates = text[text.index("<!-- workbench:begin step-function-gates -->"):text.index("<!-- workbench:end step-function-gates -->")]
    (g4,) = [line.strip() for line in gates.splitlines() if line.strip().startswith("- **G4")]
    assert "TensorRT-LLM: unresolved" in g4 and "reference · llamacpp" in g4


def test_an_arm_runs_its_own_model_only_with_the_traces_vocabulary(hand_trace, tmp_path):
    """On a GPU the TensorRT-LLM arm loads a Hugging Face directory and llama.cpp a GGUF of the same model:
    --arm-model gives an arm its own spec, and an arm whose vocabulary differs from the tokenizer's is refused."""
    common = ["loop", "--trace", str(hand_trace), "--arms", "llamacpp", "--model", "synthetic:tiny", "--threads", "1",
              "--context", "1024", "--tokens-per-block", "4", "--out", str(tmp_path / "f")]
    ok = CliRunner().invoke(app, common + ["--arm-model", "llamacpp=synthetic:tiny"])
    assert ok.exit_code == 0, ok.output
    f = next(f for _, f in findings.scan([tmp_path / "f"]).findings if f.probe == "loop.llamacpp")
    assert f.params["arm_models"] == {"llamacpp": "synthetic:tiny"}
    other = CliRunner().invoke(app, common + ["--arm-model", "llamacpp=smollm2-135m"])
    assert other.exit_code == 2 and "vocabulary of 49152 tokens" in other.output
    stray = CliRunner().invoke(app, common + ["--arm-model", "trtllm=/models/x"])
    assert stray.exit_code == 2 and "not in this run: trtllm" in stray.output


def test_loop_bad_input_exits_2(tmp_path):
    r = CliRunner().invoke(app, ["loop", "--trace", "nope", "--model", "synthetic:tiny", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "unknown trace" in r.output
    r = CliRunner().invoke(app, ["loop", "--arms", "llamacpp,warp-drive", "--model", "synthetic:tiny",
                                 "--out", str(tmp_path)])
    assert r.exit_code == 2 and "valid arms" in r.output
    assert not list(tmp_path.iterdir())  # nothing written


def test_default_arms_per_engine():
    # llama.cpp's pass: its own arms, the subject's (the gate) and the served reference's; vLLM's in-process arms are
    # measured in vLLM's own pass, beside plain llama.cpp on its model (no lane runs them twice)
    assert default_arms("llamacpp") == [n for n in arms.names() if n not in ("vllm", "vllm-spec")]
    assert default_arms("trtllm") == []  # not runnable here: the llama.cpp pass already reported it


def test_a_reference_engine_is_compared_with_plain_llamacpp_only(monkeypatch):
    """The gate's best llama.cpp arm is chosen in the llama.cpp pass (and beside the subject); a reference engine's
    pass repeats only the plain arm it is compared with, not every llama.cpp arm."""
    monkeypatch.setattr(arms, "unavailable", lambda name: None)  # as if every engine ran here
    assert default_arms("vllm") == ["vllm", "vllm-spec", "llamacpp"]
    subject = default_arms("trtllm")
    assert subject[0] == "trtllm" and {n for n in arms.names() if arms.is_llamacpp(n)} <= set(subject)


def test_subject_alone_gives_the_gate_its_not_run_reason(hand_trace):
    from workbench import loop

    res = loop.run(str(hand_trace), arms="trtllm", model="synthetic:tiny", threads=1, context_tokens=1024,
                   tokens_per_block=4)
    assert [(f.probe, f.verdict) for f in res.findings] == [("loop.gate", "not-run")] and res.rows.empty
    assert "tensorrt_llm" in res.findings[0].reason


def test_a_run_without_the_subject_leaves_its_not_run_reason_standing(hand_trace, tmp_path):
    """`make run` runs the loop once per engine: the pass that holds the subject gives its real not-run reason, and a
    later pass without it (vLLM's: its arms and plain llama.cpp) must not mask that with "not in this run"."""
    from workbench import loop, standing

    out = tmp_path / "findings"
    common = dict(model="synthetic:tiny", threads=1, context_tokens=1024, tokens_per_block=4, out=out)
    loop.run(str(hand_trace), arms="trtllm", **common)
    later = loop.run(str(hand_trace), arms="llamacpp", **common)
    reasons = standing.not_run_reasons(findings.scan([out]).findings)["trtllm"]
    assert any("tensorrt_llm" in r for r in reasons) and not any("not in this run" in r for r in reasons), reasons
    assert [f.probe for f in later.findings] == ["loop.llamacpp"]


def test_the_loop_in_a_child_writes_its_findings_here_and_none_for_an_engine_that_cannot_run(hand_trace, tmp_path):
    from workbench import loop

    out = tmp_path / "findings"
    assert loop.run_in_child("trtllm", str(hand_trace), model="synthetic:tiny", out=out) is None  # no arm runs here
    assert not out.exists()
    res = loop.run_in_child("llamacpp", str(hand_trace), arms="trtllm", model="synthetic:tiny", threads=1,
                            context_tokens=1024, tokens_per_block=4, out=out)
    assert [(f.probe, f.verdict) for f in res.findings] == [("loop.gate", "not-run")]
    assert [p.parent for p in res.paths] == [out] and "tensorrt_llm" in res.findings[0].reason


def test_an_engine_crash_in_the_loop_is_reported_with_its_signal_and_writes_nothing(hand_trace, tmp_path, crashing_llama):
    """llama.cpp segfaults at its first decode (through its own API): the notebook's kernel gets the signal, not a
    dead kernel, and no finding of the crashed loop is kept."""
    import json
    import signal
    import subprocess
    import sys

    code = ("import json, sys\nfrom workbench import isolate, loop\ntry:\n"
            "    loop.run_in_child('llamacpp', sys.argv[1], arms='llamacpp', model='synthetic:tiny', threads=1,\n"
            "                      context_tokens=1024, tokens_per_block=4, out=sys.argv[2])\n"
            "except isolate.EngineCrashed as e:\n    print(json.dumps({'signal': e.signum, 'step': e.step}))\n")
    out = tmp_path / "findings"
    r = subprocess.run([sys.executable, "-c", code, str(hand_trace), str(out)], capture_output=True, text=True,
                       timeout=300, env=crashing_llama)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1])["signal"] == signal.SIGSEGV
    assert not out.exists() or not list(out.iterdir())
