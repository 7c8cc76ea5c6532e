"""connector.export_granularity: sub-range export, shifted import by tokens and logits, every verdict."""

from __future__ import annotations

from doubles.trtllm_fixture import fake_trt, model_dir  # noqa: F401 - the fixture
from workbench.cells.llamacpp import LlamaCppCell
from workbench.engine import common_prefix
from workbench.probes.connector import Params, export_verdict

PARAMS = dict(prefix_tokens=48, shift=11, continuation=4)


def test_llamacpp_exports_sub_ranges_with_positions(run_probe):
    f = run_probe("connector.export_granularity", **PARAMS)
    assert f.verdict == "confirmed"
    assert f.metric("subrange_export") is True and f.metric("export_unit_tokens") == 24  # the trimmed copy
    assert f.metric("restored_identical") is True and f.metric("shifted_import_exact") is True
    assert f.claim_verdicts["contract.snapshot"] == "refuted"  # the row says KV blobs are not exportable


def test_a_shifted_import_whose_positions_the_engine_moves_again_is_not_exact(run_probe, llama_api, monkeypatch):
    real = LlamaCppCell.import_state

    def import_then_misplace(self, blob, tokens, *, slot=0, position_shift=0):
        real(self, blob, tokens, slot=slot, position_shift=position_shift)
        if position_shift:
            llama_api.llama_memory_seq_add(self._mem, slot, 0, 20, 5)  # the first 20 positions land elsewhere

    monkeypatch.setattr(LlamaCppCell, "import_state", import_then_misplace)
    f = run_probe("connector.export_granularity", **PARAMS)
    assert f.verdict == "partial" and f.metric("shifted_import_exact") is False
    assert f.metric("shifted_logits_max_abs_diff") > 0.01


def _rows(restored=True, shifted=True, sub_bytes=6000, resident=24, cells=24):
    tokens = [1, 2, 3, 4]
    return [{"arm": "original", "state_bytes": 12000, "tokens": tokens, "identical": True},
            {"arm": "import at 0", "state_bytes": 12000, "tokens": tokens if restored else [9], "identical": restored},
            {"arm": "shifted", "state_bytes": 12000, "tokens": tokens if shifted else [1, 9], "identical": shifted,
             "logits_max_abs_diff": 0.0 if shifted else 2.0},
            {"arm": "sub-range", "state_bytes": sub_bytes, "tokens": None, "identical": None,
             "resident_after_import": resident, "engine_cells_after_import": cells, "kept_tokens": 24}]


def test_rule_returns_each_of_its_verdicts():
    p = Params(**PARAMS)
    assert export_verdict(_rows(), p, "e", 256).verdict == "confirmed"
    assert export_verdict(_rows(shifted=False), p, "e", 256).verdict == "partial"  # inexact import differs
    assert export_verdict(_rows(sub_bytes=12000), p, "e", 256).verdict == "partial"
    assert export_verdict(_rows(shifted=False, sub_bytes=12000), p, "e", 256).verdict == "partial"
    refuted = export_verdict(_rows(restored=False), p, "e", 256)
    assert refuted.verdict == "refuted" and refuted.claim_verdicts["contract.snapshot"] == "confirmed"


def test_identical_greedy_tokens_with_logits_that_moved_are_not_an_exact_import():
    """The shifted logits Δ was computed but unused: only the greedy tokens decided "exact"."""
    rows = _rows()
    rows[2] = rows[2] | {"logits_max_abs_diff": 2.0}  # same greedy tokens, logits moved
    out = export_verdict(rows, Params(**PARAMS), "e", 256)
    assert out.verdict == "partial" and out.metrics["shifted_import_exact"] is False


def test_a_sub_range_import_holding_more_cells_than_kept_is_not_a_sub_range():
    """The run read back is capped at the tokens the cell gave; the engine's cell count is not."""
    assert export_verdict(_rows(cells=48), Params(**PARAMS), "e", 256).verdict == "partial"


def _offers(*pairs):
    return [{"method": "get_num_new_matched_tokens", "num_computed_tokens": n, "shared_tokens": shared}
            for n, shared in pairs]


def test_connector_rule_returns_each_of_its_verdicts():
    from workbench.probes.connector import connector_verdict

    whole = connector_verdict(_offers((0, 0), (0, 0)), 32, {}, [])
    assert whole.verdict == "refuted" and whole.claim_verdicts["contract.snapshot"] == "refuted"
    shifted = connector_verdict(_offers((0, 0), (64, 0)), 32, {}, [])  # KV matched behind the lead-in
    assert shifted.verdict == "partial"
    unknown = connector_verdict(_offers((0, None)), 32, {}, [])  # an offer to a request the probe did not send
    assert unknown.verdict == "inconclusive" and not unknown.claim_verdicts


def test_a_match_inside_a_block_is_partial_block_reuse_not_a_shifted_offer():
    """TensorRT-LLM 1.2 partial reuse (on by default) hands the connector a device match that ends inside a block
    at the same positions (kvCacheManager.cpp loadOrAllocateBlocks); it was read as a shifted offer (partial)."""
    from workbench.probes.connector import connector_verdict

    out = connector_verdict(_offers((0, 0), (37, 40)), 32, {}, [])
    assert out.verdict == "refuted" and any("partial-block reuse" in n for n in out.notes)
    assert "partial-block reuse" in out.summary


def test_the_connector_rule_reports_no_hard_coded_shifted_import_and_rests_on_the_engines_calls():
    from workbench.probes.connector import connector_verdict

    out = connector_verdict(_offers((0, 0), (64, 64)), 32, {"export_unit_tokens": 32}, [])
    assert "shifted_import_exact" not in out.metrics and [s.metric for s in out.rests_on] == ["connector_calls"]
    assert out.metrics["connector_calls"] == 2


def test_the_connector_probe_reads_partial_block_reuse_from_the_trtllm_double(fake_trt, tmp_path):
    """The double models 1.2's partial reuse; a lead-in that shares the prefix's first tokens is matched inside a
    block at the same positions, which is no shifted offer. The double never yields a finding: only the rule is
    read here."""
    import numpy as np

    from workbench.cells.trtllm import cell as trtllm_cell
    from workbench.probes.connector import _call_row, connector_verdict

    with trtllm_cell.TrtLlmCell.open(str(model_dir(tmp_path)), connector="record") as c:
        d = c.describe()
        prefix = np.random.default_rng(0).integers(3, 128, size=96).tolist()  # the double's vocabulary is 128
        shifted = prefix[:40] + prefix  # the lead-in repeats the prefix's first 40 tokens
        c.ensure_prefix(prefix, salt="s")
        c.ensure_prefix(shifted, salt="s")
        rows = [_call_row(x, {len(prefix): 0, len(shifted): common_prefix(shifted, prefix)}) for x in c.connector_log()]
    offers = [r["num_computed_tokens"] for r in rows if r["method"] == "get_num_new_matched_tokens"]
    assert offers == [0, 40]  # one full block and 8 tokens of the next: not block-aligned
    out = connector_verdict(rows, d.block_tokens, {}, [])
    assert out.verdict == "refuted" and "partial-block reuse" in out.summary


def test_each_export_verdict_is_downgraded_beside_engine_readings_that_contradict_it():
    from dataclasses import replace

    from workbench.probes import at_most_inconclusive_without_engine as guard

    p = Params(**PARAMS)
    cases = [(_rows(), "shifted_import_exact", False), (_rows(), "subrange_export", False),
             (_rows(shifted=False), "restored_identical", False), (_rows(sub_bytes=12000), "shifted_import_exact", False),
             (_rows(shifted=False, sub_bytes=12000), "shifted_import_exact", True),
             (_rows(restored=False), "restored_identical", True)]
    for rows, tag, value in cases:
        o = export_verdict(rows, p, "e", 256)
        assert guard(o).verdict == o.verdict, (o.verdict, tag)
        assert guard(replace(o, metrics=o.metrics | {tag: value})).verdict == "inconclusive", (o.verdict, tag)
