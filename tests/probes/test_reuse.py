"""reuse.per_request_metrics: every verdict of the rule, and llama.cpp driven into a non-happy verdict."""

from __future__ import annotations

import pytest
from doubles.trtllm_fixture import fake_trt  # noqa: F401 - the fixture
from workbench.cells.llamacpp import LlamaCppCell
from workbench.models import TOKEN_LO
from workbench.probes.reuse import classify, verdict


def test_llamacpp_has_no_reuse_counter_so_the_risk_is_not_applicable_with_logits_evidence(run_probe):
    f = run_probe("reuse.per_request_metrics", repeats=1)
    rows = f.evidence["rows"]
    assert f.verdict == "not-applicable" and f.claim_verdicts["risk.reuse_metrics"] == "not-applicable"
    assert f.metric("granularity_tokens") == 1 and "engine_reuse_exact_fraction" not in f.metrics
    assert all(r["reported_reused"] == r["expected_reused"] and r["engine_reused"] is None for r in rows)
    assert any("no engine reuse counter" in n for n in f.evidence["notes"])
    assert all(r["engine_resident_after"] == r["prompt_tokens"] for r in rows)  # read back from the engine
    assert f.metrics["logits_max_abs_diff"]["source"] == "engine"
    assert all(r["logits_max_abs_diff"] < 0.05 * r["logits_cold_std"] for r in rows)
    by_case = {r["case"]: r for r in rows}
    assert by_case["other salt"]["reported_reused"] == 0
    assert by_case["shared 3·B+1"]["expected_reused"] == 3 * 32 + 1
    assert f.metric("ttft_cold_s") > f.metric("ttft_warm_s") > 0  # to the first decoded token
    # audit #6: the exact repeat recomputed its last token on the reused KV, so its logits are its own
    assert by_case["exact repeat"]["recomputed_last_token"] == 1


def test_kv_punched_out_inside_the_engine_is_seen_by_the_read_back(run_probe, llama_api, monkeypatch):
    """A hole in the middle of the cached KV (invisible to pos_min/max) is read back from the engine's own
    cells: the cell recomputes from the hole, so its reuse falls short of the token-id expectation."""
    real = LlamaCppCell.ensure_prefix
    last = {"salt": None}

    def ensure_with_a_hole(self, prompt, *, slot=0, salt=None, retention=None):
        if slot == 0:
            if salt == last["salt"]:  # the probe request, under its setup's salt
                llama_api.llama_memory_seq_rm(self._mem, 0, 4, 20)
            last["salt"] = salt
        return real(self, prompt, slot=slot, salt=salt, retention=retention)

    monkeypatch.setattr(LlamaCppCell, "ensure_prefix", ensure_with_a_hole)
    f = run_probe("reuse.per_request_metrics", repeats=1)
    repeat = next(r for r in f.evidence["rows"] if r["case"] == "exact repeat")
    assert repeat["reported_reused"] == 4 and repeat["expected_reused"] == repeat["prompt_tokens"]


def _decode_at(ll, ctx, tokens, first_pos, seq=0):
    """Evaluate ``tokens`` into sequence ``seq`` at positions first_pos… through llama.cpp's own batch API."""
    batch = ll.llama_batch_init(len(tokens), 0, 1)
    try:
        for i, t in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = t, first_pos + i, 1, 0
            batch.seq_id[i][0] = seq
        batch.logits[len(tokens) - 1] = 1
        batch.n_tokens = len(tokens)
        assert ll.llama_decode(ctx, batch) == 0
    finally:
        ll.llama_batch_free(batch)


def test_kv_swapped_inside_the_engine_shows_as_reuse_that_changes_the_output(run_probe, llama_api, monkeypatch):
    """Other tokens' KV at the same positions leaves no hole for a read-back to see; the logits see it."""
    real = LlamaCppCell.ensure_prefix
    last = {"salt": None}

    def ensure_with_swapped_kv(self, prompt, *, slot=0, salt=None, retention=None):
        if slot == 0:
            held = list(self._seqs[0].tokens)
            if salt == last["salt"] and len(held) > 20:  # the probe request: the held KV, other tokens at 4..19
                llama_api.llama_memory_seq_rm(self._mem, 0, 4, -1)
                _decode_at(llama_api, self._ctx, [TOKEN_LO + 7] * 16 + held[20:], first_pos=4)
            last["salt"] = salt
        return real(self, prompt, slot=slot, salt=salt, retention=retention)

    monkeypatch.setattr(LlamaCppCell, "ensure_prefix", ensure_with_swapped_kv)
    f = run_probe("reuse.per_request_metrics", repeats=1)
    assert f.verdict == "refuted" and f.claim_verdicts["risk.reuse_metrics"] == "not-applicable"
    assert "changed the output" in f.summary and f.metrics["logits_max_abs_diff"]["source"] == "engine"


# --------------------------------------------------------------------------- the rule, row by row


def _row(case="exact repeat", expected=129, reported=129, engine=129, granularity=1, diff=0.001, std=1.0, holds=True,
         source="num_cached_tokens"):
    """A row as the probe writes it; ``source`` is the request's ``PrefixStatus.source`` (an engine counter)."""
    return {"repeat": 0, "case": case, "prompt_tokens": 129, "expected_reused": expected, "reported_reused": reported,
            "reuse_source": source, "engine_reused": engine, "granularity": granularity, "logits_max_abs_diff": diff, "logits_cold_std": std,
            "engine_resident_after": 129 if holds else 100, "engine_holds_prompt": holds, "ttft_s": 0.001,
            "reported_vs_expected": classify(expected, reported, 129, granularity),
            "engine_vs_expected": classify(expected, engine, 129, granularity)}


COLD = _row("cold", 0, 0, 0)


def test_rule_confirms_exact_engine_checked_reuse():
    assert verdict([COLD, _row()], ["num_cached_tokens"], "e", None, 0.05).verdict == "confirmed"


def test_rule_refutes_without_per_request_counters():
    no = [_row("cold", 0, None, None, source="none"), _row(reported=None, engine=None, source="none")]
    assert verdict(no, [], "e", None, 0.05).verdict == "refuted"


def test_an_engine_without_a_reuse_counter_is_not_applicable_resting_on_logits():
    """llama.cpp has no reuse counter; its n_p_eval was passed off as the engine's reuse and refuted the risk."""
    no = [_row("cold", 0, 0, None, source="cell"), _row(engine=None, source="cell")]
    out = verdict(no, ["n_p_eval"], "llamacpp", "no counter in llama.h", 0.05)
    assert out.verdict == "not-applicable" and out.claim_verdicts["risk.reuse_metrics"] == "not-applicable"
    assert [s.metric for s in out.rests_on] == ["logits_max_abs_diff"]
    assert "engine_reuse_exact_fraction" not in out.metrics
    wrong = verdict([no[0], no[1] | {"logits_max_abs_diff": 0.9}], ["n_p_eval"], "llamacpp", "no counter", 0.05)
    assert wrong.verdict == "refuted" and wrong.claim_verdicts["risk.reuse_metrics"] == "not-applicable"


def test_rule_refutes_reuse_that_changes_the_logits():
    o = verdict([COLD, _row(diff=0.9)], ["num_cached_tokens"], "e", None, 0.05)
    assert o.verdict == "refuted" and o.metrics["logits_max_abs_diff"] == 0.9


def test_rule_reads_logits_differences_against_the_engines_own_cold_to_cold_noise():
    """SmolLM2 on llama.cpp: two cold computations of one prompt at other KV cells differ by up to ~0.7, which
    the probe's defaults once read as reuse changing the output on every request."""
    noisy = [COLD | {"logits_layout_floor": 0.6, "logits_cold_std": 2.0},
             _row(diff=0.7, std=2.0) | {"logits_layout_floor": 0.5}, _row(diff=0.2, std=2.0) | {"logits_layout_floor": 0.55}]
    o = verdict(noisy, ["num_cached_tokens"], "e", None, 0.05, 2.0)
    assert o.verdict == "confirmed" and o.metrics["logits_layout_floor"] == 0.55  # the median
    assert "noise floor" in " ".join(o.notes) and "0.55" in o.summary
    beyond = [noisy[0], _row(diff=1.3, std=2.0) | {"logits_layout_floor": 0.5}, noisy[2]]
    assert verdict(beyond, ["num_cached_tokens"], "e", None, 0.05, 2.0).verdict == "refuted"
    assert verdict(noisy, ["num_cached_tokens"], "e", None, 0.05, 1.0).verdict == "refuted"  # margin 1: 0.7 > 0.55


def test_one_bad_control_cannot_hide_a_fault_under_the_floor():
    """A corrupted cold run once raised the bar for every row (the floor was the run's maximum), so swapped KV
    (Δ 4) read as confirmed; now the floor is the median and the odd cold run itself makes the check inconclusive."""
    rows = [COLD | {"logits_layout_floor": 2.5, "logits_cold_std": 2.0},
            _row(diff=4.0, std=2.0) | {"logits_layout_floor": 0.3}, _row(diff=0.1, std=2.0) | {"logits_layout_floor": 0.3}]
    assert verdict(rows, ["num_cached_tokens"], "e", None, 0.05, 2.0).verdict == "refuted"  # Δ 4 > 2 × 0.3
    odd = verdict([rows[0], rows[2], rows[2]], ["num_cached_tokens"], "e", None, 0.05, 2.0)
    assert odd.verdict == "inconclusive" and "disagree" in " ".join(odd.notes)


def test_a_floor_above_half_the_logits_spread_leaves_nothing_to_judge():
    """A fault in the probe's own slot corrupts the reused request and its control alike: the floor grows with
    it, and past half the logits' spread the check says it cannot judge rather than confirm."""
    rows = [COLD | {"logits_layout_floor": 3.0}, _row(diff=3.5) | {"logits_layout_floor": 3.2}]
    o = verdict(rows, ["n_p_eval"], "llamacpp", "no counter", 0.05, 2.0)
    assert o.verdict == "inconclusive" and "cannot judge" in o.summary


def test_rule_is_partial_when_channels_disagree():
    assert verdict([COLD, _row(engine=100)], ["num_cached_tokens"], "e", None, 0.05).verdict == "partial"
    assert verdict([COLD, _row(holds=False)], ["num_cached_tokens"], "e", None, 0.05).verdict == "partial"  # engine lost it


def test_rule_is_partial_for_block_granular_counts():
    rows = [COLD | {"granularity": 32}, _row(expected=97, reported=96, engine=96, granularity=32)]
    assert verdict(rows, ["num_reused_blocks"], "e", None, 0.05).verdict == "partial"


def test_rule_on_cell_bookkeeping_alone_is_at_most_inconclusive():
    from workbench.probes import at_most_inconclusive_without_engine

    rows = [COLD | {"logits_max_abs_diff": None}, _row(diff=None)]
    o = verdict(rows, ["num_cached_tokens"], "e", None, 0.05)
    o.metrics = {k: v for k, v in o.metrics.items() if k.startswith(("reuse_exact", "max_reuse", "granularity"))}
    out = at_most_inconclusive_without_engine(o)
    assert out.verdict == "inconclusive" and "engine_reuse_exact_fraction was not measured" in out.summary
    assert out.claim_verdicts["risk.reuse_metrics"] == "inconclusive"


def test_classify_names_block_and_last_token_disagreements():
    assert classify(100, 100, 120, 1) == "exact"
    assert classify(120, 119, 120, 1) == "last-token rule"
    assert classify(97, 96, 120, 32) == "block rounding"
    assert classify(97, 40, 120, 32) == "mismatch"
    assert classify(97, None, 120, 32) == "no channel"


def test_the_no_counter_refutation_stands_on_the_engines_missing_counts():
    """A TensorRT-LLM without perf metrics returns no count on any request: the branch named no metric, so the
    guard always downgraded it and the risk could never be confirmed."""
    from workbench.probes import at_most_inconclusive_without_engine

    no = [_row("cold", 0, None, None, source="none"), _row(reported=None, engine=None, source="none")]
    o = verdict(no, [], "e", None, 0.05)
    out = at_most_inconclusive_without_engine(o)
    assert out.verdict == "refuted" and out.claim_verdicts["risk.reuse_metrics"] == "confirmed"
    assert o.metrics["engine_counted_requests"] == 0
    assert o.metrics["reuse_exact_fraction"] is None and o.metrics["max_reuse_error_tokens"] is None  # not 0
    assert any("missing, not 0" in n for n in o.notes)


def test_on_vllm_the_reported_reuse_is_engine_sourced_on_llamacpp_the_cells():
    from workbench import findings

    o = verdict([COLD, _row()], ["num_cached_tokens"], "vllm", None, 0.05)
    assert findings.metric_values(o.metrics, o.sources)["reuse_exact_fraction"]["source"] == "engine"
    llama = verdict([_row("cold", 0, 0, None, source="cell"), _row(engine=None, source="cell")], ["n_p_eval"],
                    "llamacpp", "no counter", 0.05)
    assert findings.metric_values(llama.metrics, llama.sources)["reuse_exact_fraction"]["source"] == "cell"


def test_each_reuse_verdict_is_downgraded_beside_engine_values_that_contradict_it():
    from dataclasses import replace

    from workbench.probes import at_most_inconclusive_without_engine as guard

    cases = [  # (rows, tampered metric, a value that says otherwise)
        ([COLD, _row()], "engine_reuse_exact_fraction", 0.5),  # confirmed: exact on every request
        ([COLD, _row()], "logits_max_abs_diff", 5.0),  # confirmed: and the logits agreed
        ([COLD, _row(diff=0.9)], "logits_max_abs_diff", 0.0),  # refuted: reuse changed the output
        ([COLD, _row(engine=100)], "engine_reuse_exact_fraction", 1.0),  # partial: the engine disagreed
        ([_row("cold", 0, None, None, source="none"), _row(reported=None, engine=None, source="none")],
         "engine_counted_requests", 2),  # refuted: no count came back
    ]
    for rows, tag, value in cases:
        o = verdict(rows, ["num_cached_tokens"], "e", None, 0.05)
        assert guard(o).verdict == o.verdict != "inconclusive", (o.verdict, tag)
        lie = guard(replace(o, metrics=o.metrics | {tag: value}))
        assert lie.verdict == "inconclusive" and f"{tag} is {value!r}" in lie.summary, (o.verdict, tag)


def test_tensorrt_llm_without_perf_metrics_refutes_the_counter_and_the_refutation_stands(fake_trt, tmp_path,
                                                                                                 monkeypatch):
    """The double returns no ``request_perf_metrics`` (as 1.2 does without ``return_perf_metrics``): every count
    is missing, never 0, and the refutation rests on the engine having counted none of the requests."""
    from doubles.trtllm_fixture import model_dir
    from workbench import probes

    real = fake_trt.llmapi.llm.LLM._steps
    monkeypatch.setattr(fake_trt.llmapi.llm.LLM, "_steps", lambda self, out, sp, perf, streaming:
                        real(self, out, sp, None, streaming))
    f = probes.run("reuse.per_request_metrics", engine="trtllm", isolated=False, params={"repeats": 1},
                   model=str(model_dir(tmp_path, vocab_size=32000)),
                   cell_options={"dummy_weights": True, "tokens_per_block": 16})
    assert f.verdict == "refuted" and f.claim_verdicts["risk.reuse_metrics"] == "confirmed", f.summary
    assert f.metrics["engine_counted_requests"] == {"value": 0, "unit": "count", "source": "engine"}
    assert f.metrics["reuse_exact_fraction"]["value"] is None
    assert all(r["reported_reused"] is None and r["reuse_source"] == "none" for r in f.evidence["rows"])


def test_nan_logits_are_never_evidence():
    """A model with NaN weights gave "every reused request computed the same logits as a cold recompute (max |Δ|
    nan)": NaN compared as a pass."""
    nan = float("nan")
    no = [COLD | {"engine_reused": None, "engine_vs_expected": "no channel"},
          _row(engine=None, diff=nan, std=nan) | {"engine_vs_expected": "no channel"}]
    out = verdict(no, ["n_p_eval"], "llamacpp", "no counter in llama.h", 0.05)
    assert out.verdict == "inconclusive" and "not finite" in out.summary
    assert "same logits" not in out.summary
    counted = verdict([COLD, _row(diff=nan)], ["num_cached_tokens"], "e", None, 0.05)
    assert counted.verdict == "inconclusive" and counted.claim_verdicts["risk.reuse_metrics"] == "inconclusive"
    inf_floor = verdict([COLD, _row() | {"logits_layout_floor": float("inf")}], ["num_cached_tokens"], "e", None, 0.05)
    assert inf_floor.verdict == "inconclusive"


# --------------------------------------------------------------------------- the decision ladder, as a table


def _reconciled(**kw):
    from workbench.probes.reuse import Reconciliation

    base = dict(engine="vllm", fields=("num_cached_tokens",), rows=6, exact=6, counted=6, engine_exact=6, reported=6,
                mismatched=(), disagreeing=(), lost=(), diffs=(0.01,) * 6, floor=0.01, odd=(), too_noisy=False,
                wrong=(), wrong_bar=None, clean_bar=0.05, nonfinite=0, granularity=1, cold=(0.2,), warm=(0.1,),
                source="engine")
    return Reconciliation(**(base | kw))


ROW = {"case": "cold"}


@pytest.mark.parametrize("summary, verdict_, risk", [
    (_reconciled(), "confirmed", "refuted"),  # the engine's own counter exact per token, output unchanged
    (_reconciled(granularity=16, exact=4, engine_exact=4), "partial", "partial"),  # block rounding
    (_reconciled(disagreeing=(ROW,)), "partial", "partial"),
    (_reconciled(lost=(ROW,)), "partial", "partial"),
    (_reconciled(counted=0, engine_exact=0), "refuted", "confirmed"),  # no counter at all
    (_reconciled(wrong=(ROW,), wrong_bar=0.05), "refuted", "confirmed"),  # the reused KV changed the output
    (_reconciled(wrong=(ROW,), wrong_bar=0.05, no_counter="none"), "refuted", "not-applicable"),
    (_reconciled(counted=0, no_counter="llama.cpp counts what the cell sent"), "not-applicable", "not-applicable"),
    (_reconciled(nonfinite=1), "inconclusive", "inconclusive"),  # NaN is no evidence either way
    (_reconciled(too_noisy=True), "inconclusive", "inconclusive"),
    (_reconciled(odd=(ROW,)), "inconclusive", "inconclusive"),  # cold runs disagree, nothing judged
    (_reconciled(odd=(ROW,), wrong=(ROW,), wrong_bar=0.05), "refuted", "confirmed"),  # a wrong output still counts
])
def test_the_reuse_ladder_gives_each_verdict_from_its_summary(summary, verdict_, risk):
    from workbench.probes.reuse import decide

    d = decide(summary)
    assert d.verdict == verdict_ and d.claim_verdicts["risk.reuse_metrics"] == risk, d.case
