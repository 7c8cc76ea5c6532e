"""retention.pinning_under_pressure: every verdict its rules can return, and llama.cpp driven both ways."""

from __future__ import annotations

import math

import pytest

from doubles.trtllm_fixture import fake_trt, model_dir  # noqa: F401 - the fixture

from workbench import probes
from workbench.cells.llamacpp import LlamaCppCell
from workbench.probes.retention import Arm, Params, absence, verdict


def test_llamacpp_never_evicts_so_retention_is_not_applicable_with_evidence(run_probe):
    f = run_probe("retention.pinning_under_pressure", prefix_tokens=64, capacity_tokens=256)
    assert f.verdict == "not-applicable" and f.claim_verdicts["risk.retention_bias"] == "not-applicable"
    (row,) = f.evidence["rows"]
    assert row["resident_after"] == row["resident_before"] == 64  # read back from the engine
    assert row["filler_taken"] == 256 - 64  # the engine itself refused beyond its capacity
    assert f.metrics["engine_resident_tokens"]["source"] == "engine"
    assert any("llama_decode returns 1" in n for n in f.evidence["notes"])


def test_a_prefix_removed_inside_the_engine_mid_fill_is_reported_lost(run_probe, llama_api, monkeypatch):
    real = LlamaCppCell.measure_capacity

    def fill_and_lose_the_pin(self, *, step=None, slot=0):
        llama_api.llama_memory_seq_rm(self._mem, 0, 32, -1)  # the engine drops half the pinned prefix
        return real(self, step=step, slot=slot)

    monkeypatch.setattr(LlamaCppCell, "measure_capacity", fill_and_lose_the_pin)
    f = run_probe("retention.pinning_under_pressure", prefix_tokens=64, capacity_tokens=256)
    assert f.verdict == "refuted" and f.metric("silent_evictions") == 32
    # audit #13: a loss on an engine with no LRU says nothing of priority merely biasing LRU
    assert f.claim_verdicts["risk.retention_bias"] == "inconclusive"


def test_on_the_tensorrt_llm_double_fillers_sit_at_the_default_priority_and_each_arm_keeps_its_own(fake_trt, tmp_path):
    """The double evicts as 1.2 does (strictly by priority, LRU within one; a re-request that names a priority
    overwrites the cached blocks', tests/cells/test_trtllm_double.py). The cell names its own default retention
    (100) on every request, so fillers went in at 100 and each re-request re-pinned the prefix at 100: every arm
    read alike, "no effect of priority". Fillers now name the engine default (35), re-requests the arm's own."""
    f = probes.run("retention.pinning_under_pressure", engine="trtllm", isolated=False,
                   model=str(model_dir(tmp_path, vocab_size=32000)),
                   params={"prefix_tokens": 64, "capacity_tokens": 256, "pressure": "0.5,1,2,4", "filler_slots": 4,
                           "filler_fraction": 0.5, "expiry_ms": 0, "repeats": 2, "priorities": "20,35,100"},
                   cell_options={"dummy_weights": True, "tokens_per_block": 16})
    assert {r["repeat"] for r in f.evidence["rows"]} == {0, 1}
    assert [n.endswith("→ priorities ordered") for n in f.evidence["notes"][:2]] == [True, True]
    assert f.verdict == "confirmed" and f.claim_verdicts["risk.retention_bias"] == "refuted"


# --------------------------------------------------------------------------- the rules, row by row


def _absence_row(before=64, after=64, prefix=64, taken=192):
    return {"prefix_tokens": prefix, "resident_before": before, "filler_taken": taken, "engine_refused": True,
            "capacity_tokens": 256, "resident_after": after}


def test_absence_rule_returns_each_of_its_verdicts():
    assert absence([_absence_row()], "no eviction").verdict == "not-applicable"
    assert absence([_absence_row(after=10)], "no eviction").verdict == "refuted"
    assert absence([_absence_row(before=10)], "no eviction").verdict == "inconclusive"
    assert absence([], "no eviction").verdict == "inconclusive"


def test_a_read_back_beyond_capacity_is_not_survival():
    """The engine took 250 filler tokens of 256: a prefix "all 64 held" beside them cannot be true."""
    out = absence([_absence_row(taken=250)], "no eviction")
    assert out.verdict == "inconclusive" and "does not add up" in out.summary


P = Params(prefix_tokens=64, capacity_tokens=256, priorities=(35, 60, 100), pressure=(0.5, 2.0, 4.0), expiry_ms=0)
ARMS = [Arm(35, None), Arm(60, None), Arm(100, None)]


def _ramp(first_loss, arms=ARMS, admitted=1.0, repeats=3) -> list[dict]:
    """Rows of a ramp where each arm holds its prefix fully until ``first_loss[arm]`` (inf: never lost), the same
    in every one of ``repeats`` repeats, or per repeat when ``first_loss`` is a list; the engine admits
    ``admitted`` of each step's filler load."""
    per_repeat = first_loss if isinstance(first_loss, list) else [first_loss] * repeats
    steps = dict(zip(P.pressure, (b - a for a, b in zip((0.0, *P.pressure), P.pressure))))
    return [{"repeat": k, "arm": a.label, "priority": a.priority, "duration_ms": None, "pressure": x,
             "free_tokens": 192, "fillers_refused": 0 if admitted == 1.0 else 3,
             "fillers_admitted_tokens": int(steps[x] * 192 * admitted), "baseline_reused": 64,
             "reused_tokens": 64 if x < loss[a.label] else 0, "survival_source": "engine",
             "survival": 1.0 if x < loss[a.label] else 0.0}
            for k, loss in enumerate(per_repeat) for a in arms for x in P.pressure]


ORDERED = {"p35": 0.5, "p60": 2.0, "p100": 4.0}


def test_pinned_top_priority_is_confirmed():
    o = verdict(_ramp({"p35": 2.0, "p60": 4.0, "p100": math.inf}), P, ARMS)
    assert o.verdict == "confirmed" and o.claim_verdicts["risk.retention_bias"] == "refuted"
    assert "all 3 repeats" in o.summary


def test_a_pin_that_fails_in_one_repeat_is_no_pin():
    o = verdict(_ramp([{"p35": 2.0, "p60": 4.0, "p100": math.inf}] * 2 + [{"p35": 2.0, "p60": 4.0, "p100": 4.0}]),
                P, ARMS)
    assert o.verdict == "refuted" and "lost in 1 of 3 repeats" in o.summary


def test_eviction_in_priority_order_in_every_repeat_orders_but_does_not_pin():
    o = verdict(_ramp(ORDERED), P, ARMS)
    assert o.verdict == "refuted" and o.claim_verdicts["risk.retention_bias"] == "confirmed"
    assert "orders eviction" in o.summary and "dominated the lower's in all 3 repeats" in o.summary


def test_a_curve_that_dominates_only_in_part_is_still_ordered():
    """p60 and p100 both survive 2× and fall at 4×, but p100 still holds more there: its curve dominates."""
    rows = [r | {"survival": 0.5} if r["arm"] == "p100" and r["pressure"] == 4.0 else r
            for r in _ramp({"p35": 2.0, "p60": 4.0, "p100": 4.0})]
    o = verdict(rows, P, ARMS)
    assert o.claim_verdicts["risk.retention_bias"] == "confirmed" and "orders eviction" in o.summary


def test_one_sample_per_arm_never_says_ordered():
    """Audit #7: "ordered" from one sample per arm; one repeat cannot show that an order is consistent."""
    o = verdict(_ramp(ORDERED, repeats=1), P, ARMS)
    assert o.verdict == "refuted" and "orders eviction" not in o.summary and "raise `repeats`" in o.summary
    assert o.claim_verdicts["risk.retention_bias"] == "inconclusive"


def test_an_order_that_holds_in_some_repeats_only_is_not_ordered():
    o = verdict(_ramp([ORDERED, ORDERED, {"p35": 2.0, "p60": 2.0, "p100": 2.0}]), P, ARMS)
    assert o.verdict == "refuted" and "orders eviction" not in o.summary
    assert "no consistent order" in o.summary and "ordered, ordered, tied" in o.summary
    assert o.claim_verdicts["risk.retention_bias"] == "inconclusive"


def test_arms_lost_at_the_same_pressure_show_no_effect_of_priority_never_an_order():
    o = verdict(_ramp({"p35": 2.0, "p60": 2.0, "p100": 2.0}), P, ARMS)
    assert o.verdict == "refuted" and "no effect of priority" in o.summary and "orders eviction" not in o.summary
    assert o.claim_verdicts["risk.retention_bias"] == "confirmed"


def test_all_arms_surviving_alike_is_no_evidence_about_priority():
    o = verdict(_ramp({"p35": math.inf, "p60": math.inf, "p100": math.inf}), P, ARMS)
    assert o.verdict == "confirmed" and o.claim_verdicts["risk.retention_bias"] == "inconclusive"


def test_eviction_out_of_priority_order_is_no_order():
    o = verdict(_ramp({"p35": 4.0, "p60": 0.5, "p100": 2.0}), P, ARMS)
    assert o.verdict == "refuted" and "crossed, crossed, crossed" in o.summary
    assert o.claim_verdicts["risk.retention_bias"] == "inconclusive"


def test_two_priorities_alike_above_a_lower_one_is_no_order():
    o = verdict(_ramp({"p35": 0.5, "p60": 4.0, "p100": 4.0}), P, ARMS)
    assert "partly tied, partly tied, partly tied" in o.summary and "orders eviction" not in o.summary
    assert o.claim_verdicts["risk.retention_bias"] == "inconclusive"


def test_the_rule_reads_the_arms_by_priority_whatever_order_they_ran_in():
    o = verdict(_ramp(ORDERED), P, list(reversed(ARMS)))
    assert o.claim_verdicts["risk.retention_bias"] == "confirmed" and "orders eviction" in o.summary


def test_a_ramp_that_never_exceeds_free_capacity_is_inconclusive():
    low = Params(prefix_tokens=64, capacity_tokens=256, priorities=(100,), pressure=(0.25, 0.5), expiry_ms=0)
    rows = [r | {"pressure": x} for r, x in zip(_ramp({"p35": 9, "p60": 9, "p100": math.inf}, repeats=1)[6:8],
                                                (0.25, 0.5))]
    assert verdict(rows, low, [Arm(100, None)]).verdict == "inconclusive"


def test_nan_survival_is_not_survival():
    rows = [r | {"survival": math.nan} if r["arm"] == "p100" and r["pressure"] == 4.0 and r["repeat"] == 1 else r
            for r in _ramp({"p35": 2.0, "p60": 4.0, "p100": math.inf})]
    o = verdict(rows, P, ARMS)
    assert o.verdict == "inconclusive" and "not a surviving one" in o.summary


def test_a_ramp_whose_fillers_the_engine_refused_is_not_pressure():
    """Requested 4× but admitted 0.25×: every filler refused used to read "held at every pressure up to 4×"."""
    o = verdict(_ramp({"p35": math.inf, "p60": math.inf, "p100": math.inf}, admitted=0.0625), P, ARMS)
    assert o.verdict == "inconclusive" and "admitted only 0.25×" in o.summary


def test_an_engine_without_retention_priorities_is_not_applicable():
    o = verdict(_ramp({"p35": 2.0, "p60": 2.0, "p100": 2.0}, repeats=1), P, ARMS, "vLLM has no retention priority")
    assert o.verdict == "not-applicable" and o.claim_verdicts["risk.retention_bias"] == "not-applicable"


def test_a_single_arm_is_not_out_of_order():
    one = Params(prefix_tokens=64, capacity_tokens=256, priorities=(100,), pressure=(0.5, 2.0, 4.0), expiry_ms=0)
    o = verdict(_ramp({"p100": 2.0}, arms=[Arm(100, None)]), one, [Arm(100, None)])
    assert o.verdict == "refuted" and "not in priority order" not in o.summary and "one priority arm" in o.summary
    assert o.claim_verdicts["risk.retention_bias"] == "inconclusive"


def test_repeats_must_be_positive():
    import pytest

    with pytest.raises(probes.ParamError, match="repeats"):
        probes.parse_params(probes.get("retention.pinning_under_pressure"), {"repeats": 0})


class _Described:
    """A context that opens a cell describing only what the probe's arm loop reads: what the engine lacks."""

    def __init__(self, absent):
        self.absent = absent

    def open(self, **_):
        import contextlib
        import types

        return contextlib.nullcontext(types.SimpleNamespace(describe=lambda: types.SimpleNamespace(absent=self.absent)))


def _runs(monkeypatch, absent, **params):
    from workbench.probes.retention import PinningUnderPressure

    ran = []

    def arm(self, ctx, p, a, rep, rng):
        ran.append((rep, a.label))
        return [r | {"repeat": rep} for r in _ramp(ORDERED, repeats=1) if r["arm"] == a.label]

    monkeypatch.setattr(PinningUnderPressure, "_arm", arm)
    p = Params(**{"prefix_tokens": 64, "capacity_tokens": 256, "pressure": (0.5, 2.0, 4.0), "expiry_ms": 0} | params)
    return ran, PinningUnderPressure().run(_Described(absent), p)


def test_every_arm_runs_in_every_repeat_in_a_new_seeded_random_order(monkeypatch):
    ran, out = _runs(monkeypatch, {}, repeats=4, seed=1)
    per = [[label for rep, label in ran if rep == k] for k in range(4)]
    assert all(sorted(o) == ["p100", "p35", "p60"] for o in per) and len({tuple(o) for o in per}) > 1
    assert ran == _runs(monkeypatch, {}, repeats=4, seed=1)[0]  # seeded
    assert out.claim_verdicts["risk.retention_bias"] == "confirmed" and "all 4 repeats" in out.summary


def test_an_engine_without_priorities_runs_one_repeat_its_baseline(monkeypatch):
    ran, out = _runs(monkeypatch, {"retention_priority": "no priorities in the block pool"}, repeats=5)
    assert {rep for rep, _ in ran} == {0} and out.verdict == "not-applicable"


def test_each_retention_verdict_is_downgraded_beside_an_engine_survival_that_contradicts_it():
    from dataclasses import replace

    from workbench.probes import at_most_inconclusive_without_engine as guard

    pinned = verdict(_ramp({"p35": 2.0, "p60": 4.0, "p100": math.inf}), P, ARMS)
    lost = verdict(_ramp(ORDERED), P, ARMS)
    for o, value in ((pinned, 0.5), (lost, 1.0)):
        assert o.verdict in ("confirmed", "refuted") and guard(o).verdict == o.verdict
        assert guard(replace(o, metrics=o.metrics | {"survival_at_max_pressure": value})).verdict == "inconclusive"
    gone = absence([_absence_row(after=10)], "no eviction")
    assert guard(gone).verdict == "refuted"
    held = replace(gone, metrics=gone.metrics | {"engine_resident_tokens": 64})
    assert guard(held).verdict == "inconclusive"


def test_a_re_request_the_engine_gave_no_count_is_unmeasured_not_lost():
    """``engine_reused_tokens or 0``: a re-request without a count read as the whole prefix lost."""
    from workbench.engine import PrefixStatus
    from workbench.probes.retention import _reused

    silent = PrefixStatus(slot=0, prompt_tokens=64, reused_tokens=0, computed_tokens=64, source="none")
    assert _reused(silent, True) is None and _reused(silent, False) is None
    counted = PrefixStatus(slot=0, prompt_tokens=64, reused_tokens=48, computed_tokens=16, source="num_cached_tokens")
    assert _reused(counted, True) == 48


# --------------------------------------------------------------------------- the decision ladder, as a table


def _summary(**kw):
    from workbench.probes.retention import Ramp

    base = dict(top=Arm(100, None), arms=tuple(ARMS), plain=tuple(ARMS), repeats=3, max_ratio=4.0, has_top=True,
                refused=0, admitted=4.0, unmeasured=0, survival_max=1.0, survival_tag="survival_at_max_pressure",
                held_upto=4.0, silent_evictions=0, capacity_tokens=256,
                losses={k: {"p35": 2.0, "p60": 4.0, "p100": math.inf} for k in range(3)}, top_lost=(),
                orders={k: "ordered" for k in range(3)}, lower_lost=True)
    return Ramp(**(base | kw))


LOST = dict(top_lost=(0, 1, 2), survival_max=0.0)


@pytest.mark.parametrize("summary, verdict_, bias", [
    (_summary(), "confirmed", "refuted"),  # pinned, and lower priorities were lost: priority does something
    (_summary(lower_lost=False), "confirmed", "inconclusive"),  # pinned, but so was everything
    (_summary(plain=(Arm(100, None),), orders={}), "confirmed", "inconclusive"),  # one arm shows no effect
    (_summary(**LOST), "refuted", "confirmed"),  # lost, in order in every repeat: orders, does not pin
    (_summary(**LOST, orders={k: "tied" for k in range(3)}), "refuted", "confirmed"),
    (_summary(**LOST, orders={0: "ordered", 1: "crossed", 2: "ordered"}), "refuted", "inconclusive"),
    (_summary(**LOST, repeats=1, orders={0: "ordered"}), "refuted", "inconclusive"),  # one repeat: no order
    (_summary(max_ratio=1.0), "inconclusive", None),  # never past free capacity
    (_summary(has_top=False), "inconclusive", None),
    (_summary(unmeasured=2), "inconclusive", None),  # unmeasured is not survival
    (_summary(admitted=0.5), "inconclusive", None),  # the engine refused the load
    (_summary(no_priority="no priorities"), "not-applicable", "not-applicable"),
    (_summary(no_priority="no priorities", unmeasured=1), "inconclusive", None),  # measured first, then asked
])
def test_the_pinning_ladder_gives_each_verdict_from_its_summary(summary, verdict_, bias):
    from workbench.probes.retention import decide

    d = decide(summary)
    assert d.verdict == verdict_ and d.claim_verdicts.get("risk.retention_bias") == bias, d.case
    assert bool(d.rests_on) == (verdict_ in ("confirmed", "refuted"))


# --------------------------------------------------------------------------- the release's default manager


@pytest.mark.parametrize("loss, verdict_, words", [
    ({"p35": 2.0, "p60": 4.0, "p100": math.inf}, "confirmed", "V2 default: retention honoured — "),  # pinned
    (ORDERED, "refuted", "V2 default: retention honoured — "),  # lost, but in priority order: honoured, not pinned
    ({"p35": 2.0, "p60": 2.0, "p100": 2.0}, "refuted", "V2 default: retention not honoured — "),  # all alike
])
def test_a_run_on_the_releases_default_manager_says_whether_it_honoured_retention(loss, verdict_, words):
    """TensorRT-LLM 1.4's V2 ignores KvCacheRetentionConfig (issue #16251): its run is a finding of its own."""
    out = verdict(_ramp(loss), P, ARMS, None, "V2")
    assert out.verdict == verdict_ and out.summary.startswith(words)
    assert out.notes[0].startswith("the cell ran the release's default KV manager (V2)")
    plain = verdict(_ramp(loss), P, ARMS)  # the cell's pinned manager: no such label
    assert plain.verdict == verdict_ and not plain.summary.startswith("V2")
