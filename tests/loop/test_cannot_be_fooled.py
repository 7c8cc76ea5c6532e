"""The loop and the gate cannot be fooled, on real llama.cpp: a subject or a speculative arm that does less
work or produces other tokens is never compared, whatever flags are passed; a KV hole is the engine's loss."""

from __future__ import annotations

import lzma
import time

import pandas as pd
import pytest
from typer.testing import CliRunner

from workbench import claims, findings, loop
from workbench.cli import app
from workbench.engine import WorkbenchError
from workbench.loop import arms, equal, gate, results, spec, target, traces

from . import standins

COMMON = dict(model="synthetic:tiny", threads=1, context_tokens=1024, tokens_per_block=4)
ON_TARGET = {"gpu": ["stand-in GPU"], "models": {"synthetic:tiny": "synthetic:tiny"}}  # as if verified


@pytest.fixture
def subject(monkeypatch):
    """Register a faulty llama.cpp cell as the gate's subject arm (``trtllm``)."""
    standins.register(monkeypatch)

    def use(engine: str) -> None:
        monkeypatch.setitem(arms.ARMS._loaded, "trtllm", arms.ArmSpec(
            "trtllm", engine, True, "none", f"stand-in subject ({engine})", {"threads": 1, "context_tokens": 1024}))
    return use


@pytest.mark.parametrize("engine, kind", [("standin-one-token", "less work"), ("standin-sampled", "other output"),
                                          ("standin-runner-up", "other output than greedy decoding")])
def test_a_subject_doing_other_work_never_confirms_or_refutes(subject, hand_trace, engine, kind):
    subject(engine)
    res = loop.run(str(hand_trace), arms="llamacpp,trtllm", rule=gate.GateRule(min_turns=2), **COMMON)
    by = {s.arm: s for s in res.summaries}
    assert by["trtllm"].disqualified and kind in by["trtllm"].disqualified
    assert "speedup_vs_best_llamacpp" not in by["trtllm"].metrics  # no figure from turns of other work
    g = res.findings[-1]
    assert g.probe == "loop.gate" and g.verdict == "inconclusive" and "cannot be compared" in g.summary
    assert "speedup_vs_best_llamacpp" not in g.metrics
    for rule in (gate.GateRule(), gate.GateRule(min_speedup=0.5, min_turns=2), gate.GateRule(bound="value")):
        # whatever the rule, and even as if on target with a certified model
        out = gate.decide(rule, results.gate_evidence(res.summaries, rule, ON_TARGET))
        assert out.verdict == "inconclusive", out.summary


def test_an_equal_subject_is_compared_on_its_turns(subject, hand_trace):
    """The control: the same stand-in path without a fault compares every turn, so the faults above are what
    bars it (the experiment could have come out otherwise)."""
    subject("standin-plain")
    res = loop.run(str(hand_trace), arms="llamacpp,trtllm", rule=gate.GateRule(min_turns=2), **COMMON)
    s = {s.arm: s for s in res.summaries}["trtllm"]
    assert s.disqualified is None and s.metrics["compared_turns"] == 4
    assert s.ci["speedup_vs_best_llamacpp"]["turns"] == 4
    out = gate.decide(gate.GateRule(), results.gate_evidence(res.summaries, gate.GateRule(), ON_TARGET))
    assert out.verdict == "inconclusive" and "fewer than the rule's 20 turns" in out.summary


def test_a_near_tie_broken_the_other_way_is_the_same_work(subject, hand_trace):
    """Two fair engines part where two logits nearly tie; token identity with the reference would bar the second.
    The scorer reads the gap from llama.cpp's logits and compares it (the runner-up stand-in above, the same
    path with no bound on the gap, is barred)."""
    subject("standin-near-tie")
    res = loop.run(str(hand_trace), arms="llamacpp,trtllm", rule=gate.GateRule(min_turns=2), **COMMON)
    mine = res.rows[res.rows.arm == "trtllm"]
    assert (~mine.same_tokens_as_reference.astype(bool)).any(), "no near-tie in this trace: the test shows nothing"
    assert mine.comparable.all() and (mine.greedy_gap_sd <= 0.2 + 1e-6).all()
    assert {s.arm: s for s in res.summaries}["trtllm"].disqualified is None


@pytest.mark.parametrize("fault", ["stops-after-one", "accepts-unchecked"])
def test_a_faulty_speculative_arm_publishes_no_speedup_and_is_not_the_best(monkeypatch, hand_trace, fault):
    real = spec.continue_greedy

    def faulty(cell, context, first, max_tokens, drafter, *, t0, slot=0):
        if fault == "stops-after-one":
            return spec.SpecResult([first], [time.perf_counter() - t0], "length")
        res = real(cell, context, first, max_tokens, drafter, t0=t0, slot=slot)
        # every drafted token taken as output, unchecked: same length, other tokens
        res.tokens = [res.tokens[0], *[(t + 1) % 256 + 300 for t in res.tokens[1:]]]
        return res

    monkeypatch.setattr(arms, "continue_greedy", faulty)
    res = loop.run(str(hand_trace), arms="llamacpp,llamacpp-spec", **COMMON)
    s = {s.arm: s for s in res.summaries}
    bad = s["llamacpp-spec"]
    assert bad.disqualified and not bad.is_best and s["llamacpp"].is_best
    assert "decode_speedup_copy_heavy" not in bad.metrics and "speedup_vs_best_llamacpp" not in bad.metrics


def test_a_kv_hole_mid_loop_is_the_engines_loss_not_unexplained(monkeypatch, hand_trace):
    """A hole punched in llama.cpp's KV between turns (llama_memory_seq_rm): the cell reads it back, the
    attribution charges it as eviction, nothing is unexplained, and the after-turn check reads holes too."""
    real = arms.CellArm.turn
    calls = {"n": 0}

    def holed(self, prompt, max_tokens):
        calls["n"] += 1
        if calls["n"] == 2:  # before the second turn, which extends the first
            c = self.cell
            lo, _ = c.position_range()
            c._ll.llama_memory_seq_rm(c._mem, 0, lo + 2, lo + 5)
        return real(self, prompt, max_tokens)

    monkeypatch.setattr(arms.CellArm, "turn", holed)
    res = loop.run(str(hand_trace), arms="llamacpp", **COMMON)
    rows = res.rows.set_index("step")
    assert rows.loc[1, "engine_lost_before"] > 0
    # of the lost tokens, those the next prompt could have reused are eviction; 2 survived before the hole
    assert rows.loc[1, "reused"] == 2 and rows.loc[1, "eviction"] == rows.loc[1, "theoretical"] - 2
    assert (res.rows["unexplained"] == 0).all()
    s = res.summaries[0]
    assert any("lost before a turn" in n for n in s.notes) and s.metrics["unexplained_miss_tokens"] == 0


def test_reuse_efficiency_takes_the_source_of_the_rows(hand_trace):
    res = loop.run(str(hand_trace), arms="llamacpp", **COMMON)
    f = next(f for f in res.findings if f.probe == "loop.llamacpp")
    assert set(res.rows["reuse_source"]) == {"engine"} and f.metrics["reuse_efficiency"]["source"] == "engine"
    rows = res.rows.assign(reuse_source="cell")
    s = results.summarise(rows, ["llamacpp"], {})[0]
    assert s.sources["reuse_efficiency"] == "cell"
    assert findings.metric_values({"reuse_efficiency": 0.5}, s.sources)["reuse_efficiency"]["source"] == "cell"
    none = results.summarise(res.rows.assign(reuse_source="none"), ["llamacpp"], {})[0]
    assert none.metrics["reuse_efficiency"] != none.metrics["reuse_efficiency"]  # NaN: missing, never 0


def test_on_target_is_checked_against_this_machine(hand_trace, tmp_path):
    base = ["loop", "--trace", str(hand_trace), "--arms", "llamacpp", "--model", "synthetic:tiny", "--threads", "1",
            "--context", "1024", "--tokens-per-block", "4", "--out", str(tmp_path / "f")]
    r = CliRunner().invoke(app, base + ["--on-target"])
    assert r.exit_code == 2 and "no GPU" in r.output
    r = CliRunner().invoke(app, base + ["--certified", str(tmp_path / "c.txt")])
    assert r.exit_code == 2 and "--on-target" in r.output
    for bad in ("nan", "inf", "-1"):
        r = CliRunner().invoke(app, base + ["--min-speedup", bad])
        assert r.exit_code == 2 and ("min-speedup" in r.output or "min_speedup" in r.output), r.output
    for bad in ("nan", "2.5"):
        r = CliRunner().invoke(app, base + ["--margin", bad])
        assert r.exit_code == 2 and "margin" in r.output, r.output
    assert not (tmp_path / "f").exists()  # nothing ran, nothing written


NVML_GPU = {"gpu": {"available": True, "source": "nvml", "devices": [{"name": "H200"}], "driver": "580"}}


@pytest.fixture
def claims_trace(monkeypatch, hand_trace):
    """The hand trace as the claim's trace (its digest pinned), so the target check reads it without τ-bench."""
    tr = traces.load(str(hand_trace))
    monkeypatch.setattr(target, "claim_trace", lambda: ("hand", tr.sha256))
    return tr


def test_the_target_check_needs_a_gpu_and_a_certified_model(tmp_path, claims_trace):
    gpu = NVML_GPU
    lst = tmp_path / "certified.txt"
    lst.write_text("# certified for the product\nsynthetic:tiny\n")
    got = target.verify(lst, ["synthetic:tiny"], gpu, claims_trace)
    assert got["gpu"] == ["H200"] and got["models"] == {"synthetic:tiny": "synthetic:tiny"}
    assert got["gpu_source"] == "nvml" and got["trace"] == "hand" and got["trace_sha256"] == claims_trace.sha256
    with pytest.raises(Exception, match="not in the certified list"):
        target.verify(lst, ["synthetic:tiny", "synthetic:cpu"], gpu, claims_trace)
    with pytest.raises(Exception, match="needs --certified"):
        target.verify(None, ["synthetic:tiny"], gpu, claims_trace)
    with pytest.raises(Exception, match="no GPU"):
        target.verify(lst, ["synthetic:tiny"], {"gpu": {"available": False, "reason": "nvidia-smi not found"}},
                      claims_trace)
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(Exception, match="names no model"):
        target.verify(tmp_path / "empty.txt", ["synthetic:tiny"], gpu, claims_trace)


@pytest.mark.parametrize("gpu, refused", [
    (NVML_GPU["gpu"], None),
    # a GPU listed by nvidia-smi on PATH, NVML not answering: not target hardware by NVML's word
    ({"available": True, "source": "nvidia-smi", "devices": [{"name": "H100"}]}, "read by nvidia-smi, not NVML"),
    ({"available": False, "source": "nvml", "devices": [],
      "reason": "no NVIDIA GPU: NVML unavailable (nvmlInit_v2: Driver Not Loaded)"}, "Driver Not Loaded"),
])
def test_on_target_reads_the_gpu_through_nvml(tmp_path, claims_trace, gpu, refused):
    lst = tmp_path / "certified.txt"
    lst.write_text("synthetic:tiny\n")
    if refused is None:
        assert target.verify(lst, ["synthetic:tiny"], {"gpu": gpu}, claims_trace)["gpu_source"] == "nvml"
    else:
        with pytest.raises(WorkbenchError, match=refused):
            target.verify(lst, ["synthetic:tiny"], {"gpu": gpu}, claims_trace)


def test_on_target_pins_the_claims_trace_by_digest(tmp_path, hand_trace):
    """The claim names τ-bench; its content must hash to the sha256 its SOURCE.md states. A copy of it elsewhere is
    the same trace; a trace with one byte changed, or another trace, is refused before anything runs."""
    lst = tmp_path / "certified.txt"
    lst.write_text("synthetic:tiny\n")
    name, pinned = target.claim_trace()
    assert name == "taubench" and f"--trace {name}" in claims.get(gate.CLAIM).resolve
    copy = tmp_path / "copy.json"
    copy.write_bytes(lzma.open(traces.resolve(name)).read())
    tr = traces.load(str(copy))
    assert tr.sha256 == pinned and target.verify(lst, ["synthetic:tiny"], NVML_GPU, tr)["trace_sha256"] == pinned
    edited = tmp_path / "edited.json"
    edited.write_bytes(copy.read_bytes().replace(b"airline", b"Airline", 1))
    for other in (edited, hand_trace):
        with pytest.raises(WorkbenchError, match="not the claim's trace taubench"):
            target.verify(lst, ["synthetic:tiny"], NVML_GPU, traces.load(str(other)))


def turn(arm, step, e2e, *, asked=200, got=200, finish="length", gap=0.0, stop=3.0):
    """One hand-built, scored (turn, arm) row with the columns :func:`loop.run` writes."""
    return {"arm": arm, "step": step, "max_tokens": asked, "decode_tokens": got, "finish": finish,
            "greedy_gap_sd": gap, "greedy_gap_at": 0, "stop_gap_sd": stop, "e2e_s": e2e, "ttft_s": e2e / 10,
            "decode_s": e2e * 0.9, "itl_s": e2e * 0.9 / max(got - 1, 1), "prompt": 1000, "theoretical": 900, "reused": 900, "computed": 100, "unexplained": 0,
            "reuse_source": "engine", "speculation_source": "none", "drafted": 0, "accepted": 0, "drafted_steps": 0,
            "engine_resident": None, "held_after": 0, "engine_lost_before": 0, "same_tokens_as_reference": True,
            "own_copy_fraction": 0.0}


def run_of(times, n=25, **subject):
    """``n`` turns of each arm in ``times`` (seconds a turn), the subject's turns shaped by ``subject``."""
    return [turn(arm, step, t, **(subject if arm == "trtllm" else {})) for step in range(n) for arm, t in times.items()]


def with_long(rows, long, n=20, **subject):
    """``rows`` plus two long turns after the first ``n`` (seconds a turn per arm), the subject's shaped by ``subject``."""
    return rows + [turn(arm, step, t, **(subject if arm == "trtllm" else {})) for step in (n, n + 1)
                   for arm, t in long.items()]


BASE = {"llamacpp": 2.5, "llamacpp-server-spec": 3.0}  # the whole baseline: prefix reuse and llama.cpp's speculation
FAST_SERVED = {"llamacpp-server": 1.34, "llamacpp": 6.34, "llamacpp-server-spec": 7.0, "trtllm": 1.0}


@pytest.mark.parametrize("rows, rule, work, verdict", [
    # 35.4 less work: the subject stops after 5 of 200 tokens where end of generation only nearly ties (0.2 σ)
    (run_of({"llamacpp": 2.25, "llamacpp-server-spec": 2.5, "trtllm": 0.1}, got=5, finish="stop", stop=0.2),
     gate.GateRule(), equal.EqualWork(), "inconclusive"),
    # 48: a near-tie within the margin taken onto a path whose greedy stop comes after 5 tokens, against 200: each
    # arm's own greedy work, but not equal tokens, so never timed as such (it confirmed 22.5× before)
    (run_of({"llamacpp": 2.25, "llamacpp-server-spec": 2.5, "trtllm": 0.1}, got=5, finish="stop", stop=0.0, gap=0.2),
     gate.GateRule(), equal.EqualWork(), "inconclusive"),
    (run_of({"llamacpp": 2.25, "llamacpp-server-spec": 2.5, "trtllm": 0.75}), gate.GateRule(), equal.EqualWork(),
     "confirmed"),  # the control: an honest 3× win on the same work
    # 35.5 a rule moved either way: the claim's margin refutes 1.34× over the fastest llama.cpp arm (near-ties 0.1 σ) …
    ([r | {"greedy_gap_sd": 0.1} if r["arm"] == "llamacpp-server" else r for r in run_of(FAST_SERVED)], gate.GateRule(), equal.EqualWork(), "refuted"),
    # … a stricter margin 0 disqualifies that arm and would confirm 6.34× over the next
    ([r | {"greedy_gap_sd": 0.1} if r["arm"] == "llamacpp-server" else r for r in run_of(FAST_SERVED)],
     gate.GateRule(), equal.EqualWork(margin_sd=0), "inconclusive"),
    # … and so does the claim's margin where that arm is disqualified for other tokens: the bar is not the run's
    ([r | {"greedy_gap_sd": 0.3} if r["arm"] == "llamacpp-server" else r for r in run_of(FAST_SERVED)],
     gate.GateRule(), equal.EqualWork(), "inconclusive"),
    (run_of({"llamacpp": 3.0, "llamacpp-server-spec": 3.5, "trtllm": 1.0}), gate.GateRule(min_speedup=100),
     equal.EqualWork(), "inconclusive"),  # a raised bar would refute an honest 3× win
    # 35.6 excluded turns: two long ones the subject served no faster, left out as not greedy (2 of 22, within 10 %)
    (with_long(run_of(BASE | {"trtllm": 1.0}, n=20), {"llamacpp": 17.8, "llamacpp-server-spec": 20, "trtllm": 17.8},
               gap=0.3), gate.GateRule(), equal.EqualWork(), "inconclusive"),  # 2.5× compared, 1.54× with them
    (with_long(run_of(BASE | {"trtllm": 1.0}, n=20), {"llamacpp": 0.5, "llamacpp-server-spec": 0.6, "trtllm": 0.2},
               gap=0.3), gate.GateRule(),
     equal.EqualWork(), "confirmed"),  # the control: short excluded turns cannot move it below 2×
    (with_long(run_of({"llamacpp": 1.2, "llamacpp-server-spec": 1.5, "trtllm": 1.0}, n=20),
               {"llamacpp": 40, "llamacpp-server-spec": 45, "trtllm": 1.0}, gap=0.3),
     gate.GateRule(), equal.EqualWork(), "inconclusive"),  # 1.2× refuted only while two 40× turns stay out
], ids=["near-tie-stop-5-of-200", "near-tie-to-a-greedy-stop-5-of-200", "honest-3x", "claim-margin-refutes-1.34x", "margin-0-drops-fastest",
        "fastest-disqualified", "min-speedup-100", "two-long-turns-excluded", "short-turns-excluded",
        "refute-with-40x-turns-excluded"])
def test_hand_built_rows_that_would_make_the_gate_lie(rows, rule, work, verdict):
    """Scored rows built by hand through the loop's own summary and gate, as if on target with every llama.cpp arm on
    the GPU (issue 35: each held-back row confirmed or refuted before)."""
    marked = equal.mark(pd.DataFrame(rows), work)
    ran = list(dict.fromkeys(marked.arm))
    summaries = results.summarise(marked, ran, {}, work=work)
    out = gate.decide(rule, results.gate_evidence(summaries, rule, ON_TARGET, work, on_gpu=ran))
    assert out.verdict == verdict, out.summary


def test_length_differences_are_reported():
    """Both arms did the work (the subject's stop is the greedy one), yet decoded other lengths: reported beside the
    speed-up, not hidden in it."""
    rows = run_of({"llamacpp": 2.25, "llamacpp-server-spec": 2.5, "trtllm": 0.1}, got=5, finish="stop", stop=0.0)
    marked = equal.mark(pd.DataFrame(rows), equal.EqualWork())
    by = {s.arm: s for s in results.summarise(marked, list(dict.fromkeys(marked.arm)), {})}
    assert by["trtllm"].metrics["decode_tokens_vs_best_llamacpp"] == pytest.approx(5 / 200)
    assert any("decoded lengths differ from llamacpp's on 25 of the 25 turns both served comparably" in n
               and "25 of them differ beyond the equal-tokens tolerance" in n for n in by["trtllm"].notes)
    assert "speedup_vs_best_llamacpp" not in by["trtllm"].metrics  # 5 tokens are never timed against 200
    honest = run_of({"llamacpp": 2.25, "llamacpp-server-spec": 2.5, "trtllm": 0.75}, got=190, finish="stop",
                    stop=0.0)  # a greedy stop 10 tokens early: within the tolerance
    marked = equal.mark(pd.DataFrame(honest), equal.EqualWork())
    by = {s.arm: s for s in results.summarise(marked, list(dict.fromkeys(marked.arm)), {})}
    assert by["trtllm"].metrics["speedup_turns"] == 25 and by["trtllm"].disqualified is None


@pytest.mark.parametrize("n, few", [(3, True), (25, False)])
def test_a_speed_up_over_few_turns_is_labelled_as_such(n, few):
    """make run's loop compares 3 turns: its "95%" interval (10 distinct resamples) read like one over 25 turns. The
    label stands in the arm's summary, its notes, its recorded CI and the gate's summary, live and decided again."""
    marked = equal.mark(pd.DataFrame(run_of(BASE | {"trtllm": 1.0}, n=n)), equal.EqualWork())
    summaries = results.summarise(marked, list(dict.fromkeys(marked.arm)), {})
    label = f"(CI over {n} turns)"
    for s in summaries:
        assert s.ci["speedup_vs_best_llamacpp"]["few_turns"] is few and s.metrics["speedup_turns"] == n
        assert (label in results._summary_line(s)) is few
        assert any(f"CI is over {n} turns" in note for note in s.notes) is few
    rule = gate.GateRule(min_turns=2)
    out = gate.decide(rule, results.gate_evidence(summaries, rule, ON_TARGET, on_gpu=list(marked.arm)))
    assert (label in out.summary) is few and "compared turns" in out.summary
    doc = {"trace": "hand-built", "turns": n, "rule": "by hand", "equal_work_rule": "the claim's"}
    g = results.gate_finding(summaries, rule, {"model": "synthetic:tiny", "equal_work": {}}, doc, None)
    assert (label in gate.decide(rule, results.recorded_evidence(g)).summary) is few

def test_excluded_turns_are_reported_at_their_worst_both_ways():
    rows = with_long(run_of(BASE | {"trtllm": 1.0}, n=20), {"llamacpp": 17.8, "llamacpp-server-spec": 20, "trtllm": 17.8},
                     gap=0.3)
    marked = equal.mark(pd.DataFrame(rows), equal.EqualWork())
    s = {s.arm: s for s in results.summarise(marked, list(dict.fromkeys(marked.arm)), {})}["trtllm"]
    assert s.metrics["speedup_vs_best_llamacpp"] == pytest.approx(2.5)
    against, favour = s.ci["speedup_excluded_against"], s.ci["speedup_excluded_favour"]
    assert against["value"] == favour["value"] == pytest.approx(85.6 / 55.6)  # 1.54×: served no faster either way
    assert (against["excluded"], against["turns"], against["reference"]) == (2, 22, "llamacpp")
    assert s.metrics["speedup_excluded_against_low"] == against["low"] < 2
    assert s.metrics["speedup_excluded_favour_high"] == favour["high"]
