"""isolation.cache_salt: every verdict of the rule, and llama.cpp's missing engine-level salt shown."""

from __future__ import annotations

import numpy as np
import pytest
from doubles.trtllm_fixture import fake_trt  # noqa: F401 - the fixture

from workbench import probes
from workbench.probes import at_most_inconclusive_without_engine
from workbench.probes.isolation import Params, Ratio, ks_floor, lora_row, tost_log, ttft_ratio, verdict

P = Params(trials=16)


def test_every_timed_request_does_engine_work_even_a_full_repeat(run_probe):
    """A repeat did no engine work at all, so the same-key KS p sat at its floor by construction."""
    f = run_probe("isolation.cache_salt", trials=8, prompt_tokens=64, alpha=0.05)
    rows = [r for r in f.evidence["rows"] if r.get("procedure") == "repeat A"]
    assert rows and all(r["recomputed_last_token"] == 1 and r["ttft_s"] > 0 for r in rows)


def test_on_the_default_model_the_engine_takes_a_same_shape_foreign_state(tmp_path):
    """make run's model is SmolLM2; a tiny other model made the engine refuse by size, which only looked like
    isolation. The default other model has the main model's KV shape, so the engine's answer is about keys."""
    from workbench import models

    f = probes.run("isolation.cache_salt", engine="llamacpp", model=models.DEFAULT_MODEL, isolated=False,
                   params={"trials": 8, "prompt_tokens": 32, "alpha": 0.05})
    engine = next(r for r in f.evidence["rows"] if r.get("arm") == "engine, cell check bypassed")
    assert engine["refused"] is False and engine["decoded"] and f.verdict == "not-applicable"


def test_llamacpp_has_no_engine_salt_it_takes_a_foreign_state_when_the_cell_is_bypassed(run_probe):
    f = run_probe("isolation.cache_salt", prompt_tokens=64)
    assert f.verdict == "not-applicable"
    engine = next(r for r in f.evidence["rows"] if r.get("arm") == "engine, cell check bypassed")
    assert engine["refused"] is False and engine["decoded"]
    assert any(r.get("arm") == "other model" and r["refused"] for r in f.evidence["rows"])  # the cell refuses
    assert f.claim_verdicts["contract.lora"] == "inconclusive"  # no adapter was tested
    procs = [r["procedure"] for r in f.evidence["rows"] if "procedure" in r]
    assert {tuple(procs[i:i + 3]) for i in range(0, len(procs), 3)} == {
        ("cold A", "repeat A", "other B"), ("other B", "cold A", "repeat A")}  # arm order is randomized


def test_trial_counts_keep_the_ks_floor_far_below_alpha():
    assert ks_floor(12) == pytest.approx(1 / 2704156)
    with pytest.raises(probes.ParamError, match="floor"):
        probes.parse_params(probes.get("isolation.cache_salt"), {"trials": 6})


def _rows(cold=1.0, repeat=0.1, other=1.0, cross=0, within=64, n=16, seed=0, source="cell"):
    """Rows as the probe writes them; ``source`` is each request's ``PrefixStatus.source``."""
    rng = np.random.default_rng(seed)
    out = []
    for t in range(n):
        for proc, base, reused in (("cold A", cold, 0), ("repeat A", repeat, within), ("other B", other, cross)):
            out.append({"trial": t, "procedure": proc, "reused_tokens": reused, "computed_tokens": 64 - reused,
                        "reuse_source": source, "ttft_s": base * (1 + 0.02 * rng.standard_normal()), "exact": True})
    return out


def _engine_counted(rows):
    """``rows`` as a request cell reports them: the reuse is the engine's own counter (vLLM num_cached_tokens)."""
    return [r | {"engine_reused": r["reused_tokens"], "reuse_source": "num_cached_tokens"} for r in rows]


REFUSED = [{"arm": "other model", "refused": True, "error": "manifest mismatch"}]


def test_rule_returns_each_of_its_verdicts():
    assert verdict(_rows(), REFUSED, P).verdict == "confirmed"
    assert verdict(_rows(cross=64, other=0.1), REFUSED, P).verdict == "refuted"
    assert verdict(_rows(), [{"arm": "other model", "refused": False, "error": None}], P).verdict == "refuted"
    assert verdict(_rows(within=0, repeat=1.0), REFUSED, P).verdict == "inconclusive"
    slow_repeat = verdict(_rows(repeat=1.0), REFUSED, P)  # reused by the counters, but no faster than cold
    assert slow_repeat.verdict == "inconclusive" and "reused 64 tokens" in slow_repeat.summary
    assert "No reuse was observed" not in slow_repeat.summary
    noisy = verdict(_rows(other=1.5), REFUSED, P)  # slower than cold beyond the margin: not shown equivalent
    assert noisy.verdict == "inconclusive" and "TOST" in noisy.summary
    engine = {"arm": "engine, cell check bypassed", "refused": False, "decoded": [1, 2], "error": None}
    assert verdict(_rows(), REFUSED, P, "no salt in llama_batch", engine).verdict == "not-applicable"


SERVER = "llama-server's /completion has no cache salt"  # a salt-less engine handed no foreign state


@pytest.mark.parametrize("rows, refusals, no_salt, engine, expected", [
    (_engine_counted(_rows()), REFUSED, None, None, "confirmed"),  # vLLM: 0 across keys under its own salt
    (_engine_counted(_rows()), REFUSED, SERVER, None, "inconclusive"),  # llama-server: the 0 is cache_prompt false
    (_engine_counted(_rows(cross=64, other=0.1)), REFUSED, SERVER, None, "refuted"),  # the engine's count crossed
    (_rows(), REFUSED, "no salt in llama_batch", {"arm": "engine, cell check bypassed", "refused": False,
                                                  "decoded": [1, 2], "error": None}, "not-applicable"),
])
def test_a_salt_less_engine_is_not_applicable_only_on_its_own_word(rows, refusals, no_salt, engine, expected):
    """Issue 35 case 10: llama-server confirmed isolation on a cross-key 0 the cell made itself (it sends
    cache_prompt false when a slot's key changes); not-applicable needs the engine's answer to a foreign state."""
    o = at_most_inconclusive_without_engine(verdict(rows, refusals, P, no_salt, engine))
    assert o.verdict == expected, o.summary
    if expected == "inconclusive":
        assert "the cell's doing" in o.summary and SERVER in o.summary


ARM = {"arm": "adapter requests", "refused": False, "error": None, "adapter": "written from the model's geometry",
       "reused": [0, 64, 0, 64], "base_tokens": [11, 12, 13, 14], "adapter_tokens": [21, 22, 23, 24]}
ADAPTER = REFUSED + [{"arm": "same model + adapter", "refused": True, "error": "manifest mismatch"}]


def test_the_cells_own_adapter_refusal_never_confirms_lora():
    """RequestCell.restore's digest comparison confirmed contract.lora on vLLM; no adapter request had reached it."""
    o = at_most_inconclusive_without_engine(verdict(_engine_counted(_rows()), ADAPTER, P))
    assert o.verdict == "confirmed" and o.claim_verdicts["contract.lora"] == "inconclusive"
    assert any("cell's own manifest check" in n for n in o.notes)
    assert verdict(_rows(), REFUSED, P).claim_verdicts["contract.lora"] == "inconclusive"  # no adapter at all


def test_the_lora_row_is_the_engines_answer_to_adapter_requests():
    counted = _engine_counted(_rows())

    def lora(arm):
        o = verdict(counted, ADAPTER, P, lora_arm=arm)
        return o.claim_verdicts["contract.lora"], at_most_inconclusive_without_engine(o).claim_verdicts["contract.lora"]

    assert lora(ARM) == ("confirmed", "confirmed")  # applied, and kept apart from the base KV under one key
    o = verdict(counted, ADAPTER, P, lora_arm=ARM)
    assert o.metrics["engine_lora_cross_reused_tokens"] == 0 and o.metrics["lora_changed_output"] is True
    assert lora(ARM | {"reused": [0, 64, 64, 64]}) == ("partial", "partial")  # the base KV served the adapter
    assert lora(ARM | {"adapter_tokens": ARM["base_tokens"]})[0] == "inconclusive"  # no sign it was applied
    assert lora(ARM | {"reused": [0, 0, 0, 0]})[0] == "inconclusive"  # nothing cached: 0 across says nothing
    assert lora(ARM | {"reused": [0, 64, None, 64]})[0] == "inconclusive"  # the engine gave no count
    assert lora(ARM | {"refused": None, "error": "no adapter to send"})[0] == "inconclusive"


GUARD = "tensorrt_llm 1.2.1 lacks llmapi.LoRARequest (LoRA adapters)"


@pytest.mark.parametrize("refusal,row,says", [
    # the engine refused the adapter the workbench wrote for it: a refusal of our artifact, not an absence
    ({"error": "adapter_config.json: target module 'q_proj' has rank 0"}, "inconclusive", "rank 0"),
    ({"error": "bad adapter", "adapter": "/my/adapter"}, "inconclusive", "/my/adapter"),  # a user's, likewise
    # the engine's own word that it has no LoRA (the guard found its LoRA symbols missing): the mechanism is absent
    ({"error": GUARD, "absent": GUARD}, "not-applicable", "has no LoRA"),
])
def test_an_adapter_refusal_is_not_applicable_only_on_the_engines_word(refusal, row, says):
    arm = {"arm": "adapter requests", "refused": True, "adapter": "written from the model's geometry"} | refusal
    verdict_, _, notes, rests = lora_row(arm, ADAPTER, None)
    assert verdict_ == row and not rests
    assert any(says in n for n in notes), notes


def test_a_lora_verdict_beside_engine_counts_that_contradict_it_is_downgraded():
    from dataclasses import replace

    o = verdict(_engine_counted(_rows()), ADAPTER, P, lora_arm=ARM)
    crossed = replace(o, metrics=o.metrics | {"engine_lora_cross_reused_tokens": 32})
    out = at_most_inconclusive_without_engine(crossed)
    assert out.claim_verdicts["contract.lora"] == "inconclusive" and out.verdict == "confirmed"
    assert "contract.lora: engine_lora_cross_reused_tokens is 32" in out.summary
    same = replace(o, metrics=o.metrics | {"lora_changed_output": False})
    assert at_most_inconclusive_without_engine(same).claim_verdicts["contract.lora"] == "inconclusive"


def test_timing_alone_cannot_refute_isolation_when_the_engine_counted_no_cross_key_reuse():
    """The reported case: other-key requests as fast as a hit, the engine's own counters 0 across keys."""
    o = verdict(_engine_counted(_rows(other=0.1)), REFUSED, P)
    assert o.verdict == "refuted" and o.metrics["engine_cross_manifest_reused_tokens"] == 0
    out = at_most_inconclusive_without_engine(o)
    assert out.verdict == "inconclusive"
    assert "engine_cross_manifest_reused_tokens is 0, which does not support it (needs > 0)" in out.summary
    leak = at_most_inconclusive_without_engine(verdict(_engine_counted(_rows(cross=64, other=0.1)), REFUSED, P))
    assert leak.verdict == "refuted"
    accepted = [{"arm": "other model", "refused": False, "error": None}]  # the cell's restore, not the engine
    assert at_most_inconclusive_without_engine(verdict(_engine_counted(_rows()), accepted, P)).verdict == "inconclusive"


def test_on_vllm_the_reported_reuse_is_the_engines_counter_and_the_finding_says_so():
    from workbench import findings

    o = verdict(_engine_counted(_rows()), REFUSED, P)
    m = findings.metric_values(o.metrics, o.sources)
    assert m["cross_manifest_reused_tokens"]["source"] == m["reused_tokens"]["source"] == "engine"
    cell = verdict(_rows(), REFUSED, P)
    assert findings.metric_values(cell.metrics, cell.sources)["reused_tokens"]["source"] == "cell"


def test_a_missing_engine_count_is_missing_not_zero():
    """TensorRT-LLM without perf metrics: the cell's reuse was 0 and read as 'no reuse even within one key'."""
    rows = [r | {"reuse_source": "none"} for r in _rows(within=0)]
    o = verdict(rows, REFUSED, P)
    assert o.metrics["cross_manifest_reused_tokens"] is None and o.metrics["reused_tokens"] is None
    assert o.verdict == "inconclusive" and "no reuse count" in o.summary
    assert any("missing, not 0" in n for n in o.notes)


def test_tost_tells_equal_from_different():
    rng = np.random.default_rng(0)
    cold = 1 + 0.02 * rng.standard_normal(10)
    same = cold * (1 + 0.02 * rng.standard_normal(10))
    assert tost_log(same, cold, 0.25) < 0.01
    assert tost_log(2 * same, cold, 0.25) > 0.5
    assert np.isnan(tost_log(same[:1], cold[:1], 0.25))  # one pair has no variance to test against
    with pytest.raises(ValueError, match="paired"):
        tost_log(same, cold[:5], 0.25)


N = 16
DRIFT = np.exp(np.linspace(-0.6, 0.6, N))  # cold TTFT drifting 3.3× over the trials (a machine warming, other jobs)
SIGN = (-1.0) ** np.arange(N)
_noise = np.random.default_rng(0).standard_normal((2, N))


@pytest.mark.parametrize("other, cold, equivalent", [
    # B tracks cold trial by trial (±1 %): equivalent; Welch's unpaired test saw only the drift (p 0.055)
    (DRIFT * (1 + 0.01 * _noise[0]), DRIFT, True),
    # within each trial one of the two pays a cost the other does not (B/cold 0.67 or 1.49, alternately): the means
    # match, every trial is outside the ±25 % band; Welch's test called it equivalent (p 0.002)
    (np.exp(-0.2 * SIGN), np.exp(0.2 * SIGN), False),
    # controls, where both agree: B 40 % slower on every trial; independent ±2 % noise around one TTFT
    (1.4 * DRIFT * (1 + 0.01 * _noise[0]), DRIFT, False),
    (1 + 0.02 * _noise[0], 1 + 0.02 * _noise[1], True),
], ids=["tracks-drift", "anti-correlated", "slower-control", "independent-control"])
def test_the_tost_pairs_each_trials_other_key_with_its_cold_request(other, cold, equivalent):
    """Each trial times cold A and B on one prompt back to back, and the bootstrap resamples them in pairs; the
    TOST was Welch's unpaired test, which disagrees with the paired one where pairs are correlated."""
    assert (tost_log(other, cold, P.margin) < P.alpha) is equivalent


def _drifting(rows):
    """``rows`` with every procedure's TTFT in trial t scaled by DRIFT[t]: B still tracks cold trial by trial."""
    return [r | {"ttft_s": r["ttft_s"] * DRIFT[r["trial"]]} for r in rows]


def test_a_drifting_machine_does_not_hide_equivalence_and_trials_pair_by_index():
    rows = _drifting(_rows(n=N))
    o = verdict(rows, REFUSED, P)
    assert o.verdict == "confirmed" and o.metrics["tost_p_other_manifest"] < P.alpha, o.summary
    assert "paired TOST p=" in o.summary
    shuffled = [rows[i] for i in np.random.default_rng(1).permutation(len(rows))]
    assert verdict(shuffled, REFUSED, P).metrics["tost_p_other_manifest"] == o.metrics["tost_p_other_manifest"]


def test_without_an_engine_salt_a_shape_refusal_is_no_salt_either():
    engine = {"arm": "engine, cell check bypassed", "refused": True, "decoded": None, "error": "wrong size"}
    o = verdict(_rows(), REFUSED, P, "no salt in llama_batch", engine)
    assert o.verdict == "not-applicable" and any("size check, not a salt" in n for n in o.notes)


def test_without_an_engine_salt_the_adapter_refusal_is_the_cells_and_lora_is_not_applicable():
    """The adapter arm's refusal is the cell's digest comparison; it made the LoRA row confirmed on llama.cpp."""
    adapter = REFUSED + [{"arm": "same model + adapter", "refused": True, "error": "mismatch"}]
    engine = {"arm": "engine, cell check bypassed", "refused": False, "decoded": [1, 2], "error": None}
    o = verdict(_rows(), adapter, P, "no salt in llama_batch", engine)
    assert o.claim_verdicts["contract.lora"] == "not-applicable"


def test_the_engines_cross_key_count_decides_the_leak_not_the_cells():
    """The cell said 0 across keys, the engine counted 64: a leak (the rule once read only the cell's count)."""
    rows = [r | {"engine_reused": r["reused_tokens"] + (64 if r["procedure"] == "other B" else 0)} for r in _rows()]
    o = verdict(rows, REFUSED, P)
    assert o.verdict == "refuted" and o.metrics["engine_cross_manifest_reused_tokens"] == 16 * 64
    assert o.metrics["cross_manifest_reused_tokens"] == 0  # the cell's own count, kept beside it


def test_isolation_rests_on_the_engines_own_reuse_counts_not_the_cells():
    from workbench.probes import at_most_inconclusive_without_engine

    cell_only = at_most_inconclusive_without_engine(verdict(_rows(), REFUSED, P))
    assert cell_only.verdict == "inconclusive" and "engine_cross_manifest_reused_tokens" in cell_only.summary
    counted = [r | {"engine_reused": r["reused_tokens"]} for r in _rows()]
    assert at_most_inconclusive_without_engine(verdict(counted, REFUSED, P)).verdict == "confirmed"


def _slower(rows, factor, trials):
    """``rows`` with other-key TTFT ``factor``× slower in the first ``trials`` trials."""
    return [r | {"ttft_s": r["ttft_s"] * factor} if r["procedure"] == "other B" and r["trial"] < trials else r
            for r in rows]


def test_effect_size_is_the_median_ttft_ratio_with_a_seeded_paired_bootstrap_ci():
    rows = _rows(repeat=0.1, other=1.0)
    warm, other = ttft_ratio(rows, "repeat A", P), ttft_ratio(rows, "other B", P)
    assert warm.low < warm.value < warm.high < 0.11 and 0.09 < warm.low
    assert other.low < 1.0 < other.high and other.within(P.margin)
    assert (other.level, other.resamples, other.pairs) == (1 - 2 * P.alpha, P.resamples, 16)
    assert ttft_ratio(rows, "other B", P) == other  # seeded
    assert "98% percentile bootstrap CI, B=2000, 16 paired trials" in str(other)
    o = verdict(rows, REFUSED, P)
    assert o.metrics["ttft_ratio_other"] == other.value and o.metrics["ttft_ratio_other_ci_high"] == other.high
    assert o.metrics["ttft_ratio_ci_low"] == warm.low
    assert "B/cold median TTFT 1" in o.summary and "inside [0.8, 1.25]" in o.summary


def test_no_leak_needs_the_ci_inside_the_equivalence_band_not_only_tost():
    """9 of 16 other-key trials 27% slower: TOST on mean logs passes at alpha, but the median ratio's CI reaches
    past 1.25, so equivalence to cold is not shown."""
    rows = _slower(_rows(), 1.27, 9)
    t = {proc: [r["ttft_s"] for r in rows if r["procedure"] == proc] for proc in ("other B", "cold A")}
    assert tost_log(t["other B"], t["cold A"], P.margin) < P.alpha
    ratio = ttft_ratio(rows, "other B", P)
    assert ratio.high > 1 + P.margin
    o = verdict(rows, REFUSED, P)
    assert o.verdict == "inconclusive" and "equivalence band [0.8, 1.25]" in o.summary


def test_a_timing_leak_reports_its_effect_size():
    o = verdict(_rows(other=0.5), REFUSED, P)
    assert o.verdict == "refuted" and o.metrics["ttft_ratio_other_ci_high"] < 0.6
    assert "B/cold median TTFT 0.5" in o.summary


def test_the_effect_size_metrics_are_declared_with_units():
    from workbench import metrics

    for tag in ("ttft_ratio_ci_low", "ttft_ratio_ci_high", "ttft_ratio_other", "ttft_ratio_other_ci_low",
                "ttft_ratio_other_ci_high"):
        assert metrics.get(tag).unit is metrics.Unit.TIMES and metrics.get(tag).source == "derived"
    assert metrics.render("ttft_other_s", 0.0123) == "12.3 ms"


def test_too_few_bootstrap_resamples_is_a_bad_parameter():
    with pytest.raises(probes.ParamError, match="resamples"):
        probes.parse_params(probes.get("isolation.cache_salt"), {"resamples": 50})


def test_on_the_tensorrt_llm_double_an_adapter_that_changes_nothing_leaves_lora_inconclusive(fake_trt, tmp_path):
    """The adapter requests reach the engine (the double records each ``lora_request``; it keys blocks by the
    LoRA id as 1.2 does, tests/doubles/fake_tensorrt_llm/llmapi/llm.py ``_admit``), but its decode ignores the
    adapter: with no sign that the adapter was applied, the LoRA row cannot be confirmed."""
    from doubles.trtllm_fixture import model_dir

    f = probes.run("isolation.cache_salt", engine="trtllm", isolated=False, model=str(model_dir(tmp_path, vocab_size=32000)),
                   params={"trials": 8, "prompt_tokens": 64, "alpha": 0.05},
                   cell_options={"dummy_weights": True, "tokens_per_block": 16})
    arm = next(r for r in f.evidence["rows"] if r.get("arm") == "adapter requests")
    assert arm["refused"] is False and arm["reused"] == [0, 48, 0, 48]  # kept apart by the engine's LoRA id
    assert arm["base_tokens"] == arm["adapter_tokens"]
    assert f.claim_verdicts["contract.lora"] == "inconclusive"
    assert any("did not change the engine's greedy tokens" in n for n in f.evidence["notes"])
    sent = [c[1]["lora_request"] for llm in fake_trt.llmapi.llm.LLM.instances for c in llm.calls
            if c[0] == "generate_async"]
    assert any(r is not None for r in sent)  # the adapter rode real requests, not only the cell's manifest



def test_on_the_tensorrt_llm_double_a_release_without_lora_symbols_is_not_applicable(fake_trt, tmp_path, monkeypatch):
    """The engine's own word that it has no LoRA: the guard finds ``llmapi.LoRARequest`` missing, so the cell with
    the adapter is refused (EngineUnavailable) where the one without it opened; the row is not-applicable."""
    from doubles.trtllm_fixture import model_dir

    monkeypatch.delattr(fake_trt.llmapi, "LoRARequest")
    f = probes.run("isolation.cache_salt", engine="trtllm", isolated=False, model=str(model_dir(tmp_path, vocab_size=32000)),
                   params={"trials": 8, "prompt_tokens": 64, "alpha": 0.05},
                   cell_options={"dummy_weights": True, "tokens_per_block": 16})
    arm = next(r for r in f.evidence["rows"] if r.get("arm") == "adapter requests")
    assert arm["refused"] is True and "LoRARequest" in arm["absent"]
    assert f.claim_verdicts["contract.lora"] == "not-applicable"
    assert any("the engine has no LoRA" in n for n in f.evidence["notes"])
    from workbench import settle  # it rests on the release's missing symbols, so a reader re-derives it

    # re-derived: nothing but the double's own mark stands in its way (a double never settles a claim)
    assert f.metric("symbols_missing") >= 1
    assert [w for w in settle.unsettled(f, "contract.lora") if not w.startswith("it was made on a test double")] == []


# --------------------------------------------------------------------------- the decision ladder, as a table


def _separation(**kw):
    from workbench.probes.isolation import Separation

    inside = Ratio(1.0, 0.95, 1.05, 0.98, 2000, 16)
    base = dict(within=64, cross=0, cell_cross=0, counted=True, source="engine", ks_same=1e-6, ks_other=0.9,
                ks_floor=1e-9, tost=1e-4, warm=Ratio(0.5, 0.45, 0.55, 0.98, 2000, 16), other=inside, alpha=0.01,
                margin=0.25, snapshot_crossed=False)
    return Separation(**(base | kw))


@pytest.mark.parametrize("summary, verdict_", [
    (_separation(), "confirmed"),
    (_separation(cross=64), "refuted"),  # counted across keys
    (_separation(ks_other=1e-4), "refuted"),  # B faster than cold: a timing leak
    (_separation(snapshot_crossed=True), "refuted"),  # a snapshot restored onto another manifest
    (_separation(within=None, cross=None), "inconclusive"),  # no count: timing alone cannot decide
    (_separation(within=0), "inconclusive"),  # no reuse at all is not isolation
    (_separation(ks_same=0.5), "inconclusive"),  # a repeat no faster than cold
    (_separation(tost=0.2), "inconclusive"),  # B not shown as slow as cold
    (_separation(other=Ratio(1.0, 0.7, 1.4, 0.98, 2000, 16)), "inconclusive"),  # B's interval leaves the equivalence band
    (_separation(no_salt="no salt", engine_took=True, cross=64), "not-applicable"),  # no salt: the engine took it
    (_separation(no_salt="no salt", engine_took=False), "not-applicable"),  # refused for its shape, not a key
    (_separation(no_salt="no salt", cross=64), "refuted"),  # no salt, nothing handed over: the ladder as usual
])
def test_the_isolation_ladder_gives_each_verdict_from_its_summary(summary, verdict_):
    from workbench.probes.isolation import decide

    d = decide(summary)
    assert d.verdict == verdict_, d.case
    assert bool(d.rests_on) == (verdict_ in ("confirmed", "refuted"))


def test_the_lora_row_gives_its_own_reason_never_the_salts_summary():
    """The LoRA row has its own rule and its own reason: a timing summary about the salt ("too noisy") never stands
    beside a LoRA verdict the counts gave (issue 40); demoted by the guard, the row's reason says why."""
    from dataclasses import replace

    o = verdict(_engine_counted(_rows()), ADAPTER, P, lora_arm=ARM)
    said = o.claim_reasons["contract.lora"]
    assert o.claim_verdicts["contract.lora"] == "confirmed" and "adapter KV is kept apart" in said
    assert said != o.summary and "\n" not in said
    out = at_most_inconclusive_without_engine(replace(o, metrics=o.metrics | {"engine_lora_cross_reused_tokens": 32}))
    assert out.claim_reasons["contract.lora"].startswith(said) and "At most inconclusive" in out.claim_reasons["contract.lora"]
    unanswered = verdict(_engine_counted(_rows()), ADAPTER, P, lora_arm=None)
    assert unanswered.claim_reasons["contract.lora"] == "No adapter request reached the engine, so the LoRA row stays inconclusive."
