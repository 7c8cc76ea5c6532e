"""reuse.per_request_metrics: every verdict of the rule, and llama.cpp driven into a non-happy verdict."""

from __future__ import annotations

from workbench.cells.llamacpp import LlamaCppCell
from workbench.probes.reuse import classify, verdict


def test_llamacpp_reuse_is_exact_per_token_and_checked_against_the_engine(run_probe):
    f = run_probe("reuse.per_request_metrics", repeats=1)
    rows = f.evidence["rows"]
    assert f.verdict == "confirmed" and f.metric("granularity_tokens") == 1
    assert all(r["reported_reused"] == r["expected_reused"] == r["engine_reused"] for r in rows)
    assert all(r["engine_resident_after"] == r["prompt_tokens"] for r in rows)  # read back from the engine
    assert f.metrics["logits_max_abs_diff"]["source"] == "engine"
    assert all(r["logits_max_abs_diff"] < 0.05 * r["logits_cold_std"] for r in rows)
    by_case = {r["case"]: r for r in rows}
    assert by_case["other salt"]["reported_reused"] == 0
    assert by_case["shared 3·B+1"]["expected_reused"] == 3 * 32 + 1
    assert f.metric("ttft_cold_s") > f.metric("ttft_warm_s") > 0  # to the first decoded token


def test_kv_punched_out_inside_the_engine_shows_as_reuse_that_changes_the_output(run_probe, llama_api, monkeypatch):
    """A hole in the middle of the cached KV is invisible to the cell and to pos_min/max; the logits see it."""
    real = LlamaCppCell.ensure_prefix
    calls = {"n": 0}

    def ensure_with_a_hole(self, prompt, *, slot=0, salt=None, retention=None):
        if slot == 0:
            calls["n"] += 1
            if calls["n"] % 2 == 0:  # the probe request, right after its setup
                llama_api.llama_memory_seq_rm(self._mem, 0, 4, 20)
        return real(self, prompt, slot=slot, salt=salt, retention=retention)

    monkeypatch.setattr(LlamaCppCell, "ensure_prefix", ensure_with_a_hole)
    f = run_probe("reuse.per_request_metrics", repeats=1)
    assert f.verdict == "refuted" and f.claim_verdicts["risk.reuse_metrics"] == "confirmed"
    assert "changed the output" in f.summary


# --------------------------------------------------------------------------- the rule, row by row


def _row(case="exact repeat", expected=129, reported=129, engine=129, granularity=1, diff=0.001, std=1.0):
    return {"repeat": 0, "case": case, "prompt_tokens": 129, "expected_reused": expected, "reported_reused": reported,
            "engine_reused": engine, "granularity": granularity, "logits_max_abs_diff": diff, "logits_cold_std": std,
            "engine_resident_after": 129 if engine is not None else 100, "ttft_s": 0.001,
            "reported_vs_expected": classify(expected, reported, 129, granularity),
            "engine_vs_expected": classify(expected, engine, 129, granularity)}


COLD = _row("cold", 0, 0, 0)


def test_rule_confirms_exact_engine_checked_reuse():
    assert verdict([COLD, _row()], ["n_p_eval"], "e", True, 0.05).verdict == "confirmed"


def test_rule_refutes_without_per_request_counters():
    assert verdict([COLD, _row(engine=None)], [], "e", False, 0.05).verdict == "refuted"


def test_rule_refutes_reuse_that_changes_the_logits():
    o = verdict([COLD, _row(diff=0.9)], ["n_p_eval"], "e", True, 0.05)
    assert o.verdict == "refuted" and o.metrics["logits_max_abs_diff"] == 0.9


def test_rule_is_partial_when_channels_disagree():
    assert verdict([COLD, _row(engine=100)], ["n_p_eval"], "e", True, 0.05).verdict == "partial"
    assert verdict([COLD, _row(engine=None)], ["n_p_eval"], "e", True, 0.05).verdict == "partial"  # engine lost it


def test_rule_is_partial_for_block_granular_counts():
    rows = [COLD | {"granularity": 32}, _row(expected=97, reported=96, engine=96, granularity=32)]
    assert verdict(rows, ["num_reused_blocks"], "e", True, 0.05).verdict == "partial"


def test_rule_on_cell_bookkeeping_alone_is_at_most_inconclusive():
    from workbench.probes import at_most_inconclusive_without_engine

    rows = [COLD | {"logits_max_abs_diff": None}, _row(diff=None) | {"engine_vs_expected": "no channel"}]
    o = verdict(rows, ["n_p_eval"], "e", True, 0.05)
    o.metrics = {k: v for k, v in o.metrics.items() if k.startswith(("reuse_exact", "max_reuse", "granularity"))}
    out = at_most_inconclusive_without_engine(o)
    assert out.verdict == "inconclusive" and "none was read from the engine" in out.summary
    assert out.claim_verdicts["risk.reuse_metrics"] == "inconclusive"


def test_classify_names_block_and_last_token_disagreements():
    assert classify(100, 100, 120, 1) == "exact"
    assert classify(120, 119, 120, 1) == "last-token rule"
    assert classify(97, 96, 120, 32) == "block rounding"
    assert classify(97, 40, 120, 32) == "mismatch"
    assert classify(97, None, 120, 32) == "no channel"
