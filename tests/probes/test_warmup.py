"""prefix.warmup_materialization: every verdict of the rules, and llama.cpp driven both ways."""

from __future__ import annotations

from workbench.cells.llamacpp import LlamaCppCell
import pytest

from workbench.probes.warmup import FollowUps, absence, decide, summarise, verdict

PARAMS = dict(blocks="1,2", nominal_block=16, capacity_tokens=256)


def test_llamacpp_has_no_max_tokens_1_warmup_so_the_risk_is_not_applicable(run_probe):
    f = run_probe("prefix.warmup_materialization", **PARAMS)
    assert f.verdict == "not-applicable" and f.claim_verdicts["contract.ensure_prefix"] == "not-applicable"
    rows = f.evidence["rows"]
    assert {r["prefix_tokens"] for r in rows} == {15, 16, 17, 31, 32, 33}
    assert all(r["engine_resident"] == r["prefix_tokens"] for r in rows)  # read back from the engine
    assert any("llama_decode evaluates every token" in n for n in f.evidence["notes"])


def test_a_warmup_whose_tail_the_engine_drops_is_confirmed(run_probe, llama_api, monkeypatch):
    real = LlamaCppCell.ensure_prefix

    def warm_then_drop_tail(self, prompt, *, slot=0, salt=None, retention=None):
        st = real(self, prompt, slot=slot, salt=salt, retention=retention)
        llama_api.llama_memory_seq_rm(self._mem, slot, len(prompt) - 3, -1)  # the engine lost the last 3
        return st

    monkeypatch.setattr(LlamaCppCell, "ensure_prefix", warm_then_drop_tail)
    f = run_probe("prefix.warmup_materialization", **PARAMS)
    assert f.verdict == "confirmed" and f.claim_verdicts["contract.ensure_prefix"] == "refuted"


def test_absence_rule_returns_each_of_its_verdicts():
    whole = [{"prefix_tokens": 16, "boundary": "1·B", "engine_resident": 16}]
    short = [{"prefix_tokens": 16, "boundary": "1·B", "engine_resident": 12}]
    assert absence(whole, "why").verdict == "not-applicable"
    assert absence(short, "why").verdict == "confirmed"
    assert absence([], "why").verdict == "inconclusive"


def _row(pressure, fraction, n=32, B=1, reused=None):
    return {"prefix_tokens": n, "boundary": "2·B", "pressure": pressure, "fillers_refused": 0, "block_tokens": B,
            "followup_reused": int(n * fraction) if reused is None else reused, "from_engine": True}


def test_pressure_rule_returns_each_of_its_verdicts():
    refuted = verdict([_row(0, 1.0), _row(2, 1.0)])
    assert refuted.verdict == "refuted" and refuted.claim_verdicts["contract.ensure_prefix"] == "confirmed"
    assert "engine_reuse_fraction" in refuted.metrics  # the engine's own per-request counters
    lost = verdict([_row(0, 1.0), _row(2, 0.5)])
    assert lost.verdict == "confirmed" and lost.claim_verdicts["contract.ensure_prefix"] == "partial"
    never = verdict([_row(0, 0.5)])
    assert never.verdict == "confirmed" and never.claim_verdicts["contract.ensure_prefix"] == "refuted"


def test_block_rounding_on_a_paged_engine_is_not_a_loss():
    """Against n, a 16-token-block engine reusing 32 of 33 prefix tokens read "not materialized" at every k·B±1."""
    paged = [_row(p, 0, n=n, B=16, reused=n // 16 * 16) for p in (0, 2) for n in (31, 32, 33)]
    out = verdict(paged)
    assert out.verdict == "refuted" and out.claim_verdicts["contract.ensure_prefix"] == "confirmed"
    short = [_row(0, 0, n=33, B=16, reused=32), _row(2, 0, n=33, B=16, reused=16)]  # a whole block lost
    assert verdict(short).verdict == "confirmed"
    assert verdict([_row(0, 0, n=15, B=16, reused=0)]).verdict == "inconclusive"


def test_an_empty_pressure_list_is_a_parameter_error():
    from workbench import probes

    with pytest.raises(probes.ParamError, match="pressure"):
        probes.parse_params(probes.get("prefix.warmup_materialization"), {"pressure": ""})


def test_a_follow_up_without_an_engine_count_is_missing_not_a_loss():
    """A request cell whose engine gave no count reported reuse 0: read as 'the warm-up kept nothing'."""
    rows = [_row(0, 1.0), _row(2, 1.0) | {"followup_reused": None, "from_engine": False}]
    o = verdict(rows)
    assert o.verdict == "inconclusive" and "missing, not 0" in o.summary


def test_each_warmup_verdict_is_downgraded_beside_an_engine_fraction_that_contradicts_it():
    from dataclasses import replace

    from workbench.probes import at_most_inconclusive_without_engine as guard

    for rows, value in (([_row(0, 1.0), _row(2, 1.0)], 0.5), ([_row(0, 1.0), _row(2, 0.5)], 1.0),
                        ([_row(0, 0.5)], 1.0)):
        o = verdict(rows)
        assert guard(o).verdict == o.verdict
        assert guard(replace(o, metrics=o.metrics | {"engine_reuse_fraction": value})).verdict == "inconclusive"
    short = absence([{"prefix_tokens": 64, "engine_resident": 40, "boundary": "2·B"}], "no warm-up")
    assert guard(short).verdict == "confirmed"
    assert guard(replace(short, metrics=short.metrics | {"engine_resident_tokens": 64})).verdict == "inconclusive"


# --------------------------------------------------------------------------- the decision ladder, as a table


@pytest.mark.parametrize("summary, verdict_, case, ensure_prefix", [
    (summarise([_row(0, 1.0), _row(2, 1.0)]), "refuted", "whole", "confirmed"),
    (summarise([_row(p, 0, n=n, B=16, reused=n // 16 * 16) for p in (0, 2) for n in (31, 32, 33)]), "refuted", "whole",
     "confirmed"),  # block rounding is no loss
    (summarise([_row(0, 1.0), _row(2, 0.5)]), "confirmed", "lost", "partial"),  # whole, then lost under pressure
    (summarise([_row(0, 0.5)]), "confirmed", "short", "refuted"),  # short even without pressure
    (summarise([_row(2, 0.5)]), "confirmed", "short", "refuted"),  # no calm row: nothing shows it was ever whole
    (summarise([_row(0, 1.0), _row(2, 1.0) | {"followup_reused": None}]), "inconclusive", "uncounted", None),
    (summarise([_row(0, 0, n=15, B=16, reused=0)]), "inconclusive", "sub-block", None),
    (FollowUps((), 0), "inconclusive", "sub-block", None),
])
def test_the_warmup_ladder_gives_each_verdict_from_its_summary(summary, verdict_, case, ensure_prefix):
    d = decide(summary)
    assert (d.verdict, d.case, d.claim_verdicts.get("contract.ensure_prefix")) == (verdict_, case, ensure_prefix)
    assert bool(d.rests_on) == (verdict_ != "inconclusive")
