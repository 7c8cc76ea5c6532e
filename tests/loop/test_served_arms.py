"""The loop's served llama.cpp arms on the real llama-server: reuse and speculation counts read from the server,
output identical to plain decode, and the gate's "best llama.cpp arm" chosen among them too."""

from __future__ import annotations

import pytest

from conftest import TINY, require_engine
from workbench import loop
from workbench.loop import arms, equal

pytestmark = pytest.mark.slow


def test_served_llamacpp_arms_count_as_llamacpp():
    assert arms.is_llamacpp("llamacpp-server") and arms.is_llamacpp("llamacpp-server-spec")
    assert not arms.is_llamacpp("vllm-server") and not arms.is_llamacpp("trtllm")
    assert arms.get("llamacpp-server-spec").speculation == "engine"


def test_a_speculation_arm_is_measured_against_plain_decode_on_its_own_engine_and_transport():
    assert arms.plain("llamacpp-server-spec") == "llamacpp-server" == arms.plain("llamacpp-server")
    assert arms.plain("llamacpp-spec") == "llamacpp" and arms.plain("vllm-spec") == "vllm"


def test_served_arms_read_reuse_and_drafts_from_the_server(hand_trace, tmp_path):
    require_engine("llamacpp-server")
    res = loop.run(str(hand_trace), arms="llamacpp,llamacpp-server,llamacpp-server-spec,trtllm", model=TINY,
                   threads=1, context_tokens=1024, tokens_per_block=4, out=tmp_path)
    rows = res.rows
    served = rows[rows.arm == "llamacpp-server"]
    spec = rows[rows.arm == "llamacpp-server-spec"]
    assert len(served) == len(spec) == 4
    assert (served.reuse_source == "engine").all() and served.reused.sum() > 0  # timings.cache_n / prompt_n
    # the same llama.cpp, served: what it reuses matches the in-process arm's engine counters
    inproc = rows[rows.arm == "llamacpp"].set_index("step")
    assert (served.set_index("step").reused == inproc.reused).all()
    assert (served.drafted == 0).all() and (spec.accepted <= spec.drafted).all()
    # the same greedy tokens as the in-process llama.cpp, with and without the server's speculation
    assert served.same_tokens_as_reference.all() and spec.same_tokens_as_reference.all()
    assert rows.comparable.all() and (rows.greedy_gap_sd <= equal.EqualWork().margin_sd).all()
    by = {s.arm: s for s in res.summaries}
    if "decode_speedup_copy_heavy" in by["llamacpp-server-spec"].ci:  # against the served plain arm, not in-process
        assert by["llamacpp-server-spec"].ci["decode_speedup_copy_heavy"]["reference"] == "llamacpp-server"
    gate = next(f for f in res.findings if f.probe == "loop.gate")
    assert "llamacpp-server" in str(gate.reason) or "llamacpp-server" in str(gate.evidence)


def test_served_arms_alone_are_checked_against_the_served_plain_arm(hand_trace, tmp_path):
    """No in-process llama.cpp in the run: the reference is the served plain arm, named in every finding, and the
    served arms are compared rather than all disqualified for want of a ``llamacpp`` arm."""
    require_engine("llamacpp-server")
    res = loop.run(str(hand_trace), arms="llamacpp-server-spec,llamacpp-server,trtllm", model=TINY, threads=1,
                   context_tokens=1024, tokens_per_block=4, out=tmp_path)
    assert res.workload["equal_work"]["reference"] == "llamacpp-server"
    by = {s.arm: s for s in res.summaries}
    assert by["llamacpp-server"].disqualified is None and by["llamacpp-server-spec"].disqualified is None
    assert res.rows.comparable.all() and res.rows.same_tokens_as_reference.all()
    assert any(s.is_best for s in res.summaries)
    assert "speedup_vs_best_llamacpp" in by["llamacpp-server-spec"].metrics
    for f in res.findings:
        assert "outputs are shown against llamacpp-server's (" in " ".join(f.evidence["notes"])
    # the gate finding names the best llama.cpp arm, and the speculation arm's acceptance as the server counted it
    gate = next(f for f in res.findings if f.probe == "loop.gate")
    best = next(s.arm for s in res.summaries if s.is_best)
    assert f"Best llama.cpp arm: {best}." in gate.summary
    if by["llamacpp-server-spec"].sources.get("acceptance_rate") == "engine":
        assert "read from llama-server's timings.draft_n, draft_n_accepted" in gate.summary


def test_a_declared_reference_outside_the_arms_exits_2_before_anything_runs(hand_trace, tmp_path):
    from typer.testing import CliRunner

    from workbench.cli import app

    r = CliRunner().invoke(app, ["loop", "--trace", str(hand_trace), "--arms", "llamacpp-server-spec", "--model", TINY,
                                 "--reference", "llamacpp", "--out", str(tmp_path / "f")])
    assert r.exit_code == 2 and "--reference llamacpp is not one of the run's arms" in r.output
    assert not (tmp_path / "f").exists() or not any((tmp_path / "f").iterdir())


def test_the_speculation_arm_reads_drafted_and_accepted_tokens_from_the_server():
    """SmolLM2 on a repetitive prompt: llama-server's n-gram speculation drafts (the tiny synthetic model's
    output repeats nothing its n-grams could find)."""
    require_engine("llamacpp-server")
    from workbench.loop.spec import Drafter

    text = ("The list: apple, banana, cherry, grape, lemon, mango, peach, plum. Again: apple, banana, cherry, "
            "grape, lemon, mango, peach, plum. Again: apple, banana,")
    out = {}
    for name in ("llamacpp-server", "llamacpp-server-spec"):
        arm = arms.open_arm(name, "smollm2-135m", threads=1, context_tokens=1024, drafter=Drafter())
        try:
            out[name] = arm.turn(arm.cell.tokenize(text), 40)
        finally:
            arm.close()
    plain, spec = out["llamacpp-server"], out["llamacpp-server-spec"]
    assert plain.drafted == 0 and spec.drafted > 0 and 0 <= spec.accepted <= spec.drafted
    assert spec.tokens == plain.tokens  # greedy verification: speculation changes no token


def test_a_served_speculation_arms_acceptance_is_named_as_read_from_llama_server():
    from workbench.loop import results

    m = {"loop_time_s": 10.0, "ttft_p50_s": 1.0, "reuse_efficiency": 1.0, "compared_turns": 4, "turns": 4,
         "acceptance_rate": 0.5, "drafted_tokens": 40, "accepted_tokens": 20}
    served = results.ArmSummary("llamacpp-server-spec", "llamacpp-server", None, dict(m),
                                sources={"acceptance_rate": "engine"}, is_best=True)
    ours = results.ArmSummary("llamacpp-spec", "llamacpp", None, dict(m), sources={"acceptance_rate": "cell"})
    assert results._summary_line(served).startswith("llamacpp-server-spec (best llama.cpp): ")
    assert "20 of 40 drafted tokens, read from llama-server's timings.draft_n, draft_n_accepted" in \
        results._summary_line(served)
    assert "20 of 40 drafted tokens, the cell's count" in results._summary_line(ours)
