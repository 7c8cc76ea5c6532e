"""contract.benchreport: its two rules as tables, and contenox's report run through the contract on the contract's own
in-memory Service (``runtime/transport/memory.go``: the report's shape and sections, no engine)."""

from __future__ import annotations

import pytest

from workbench import metrics
from workbench.probes import benchreport as pb
from workbench.transport import benchreport as br
from workbench.transport import gojson
from workbench.transport.contract import Config, OpenSessionRequest
from workbench.transport.manifest import ManifestIdentity
from workbench.transport.memory import MemoryService


@pytest.mark.parametrize("values, want", [
    ({"bench_output_equals_cold": True, "bench_warm_engine_reused": 120}, "confirmed"),
    ({"bench_output_equals_cold": False, "bench_warm_engine_reused": 120}, "refuted"),
    ({"bench_output_equals_cold": True, "bench_warm_engine_reused": 0}, "inconclusive"),
    ({"bench_output_equals_cold": True}, "inconclusive"),
])
def test_warm_equals_cold(values, want):
    assert pb.decide_warm(values).verdict == want


@pytest.mark.parametrize("values, want", [
    ({"bench_edited_engine_computed": 40, "bench_edited_output_equals_cold": True, "bench_warm_engine_reused": 120},
     "confirmed"),
    ({"bench_edited_engine_computed": 0, "bench_edited_output_equals_cold": True}, "refuted"),
    ({"bench_edited_engine_computed": 40, "bench_edited_output_equals_cold": False}, "refuted"),
    # no room to differ (issue 48): an engine that reused nothing of the unedited prefix computes the edited one anyway
    ({"bench_edited_engine_computed": 40, "bench_edited_output_equals_cold": True, "bench_warm_engine_reused": 0},
     "inconclusive"),
    ({"bench_edited_engine_computed": 40, "bench_edited_output_equals_cold": True}, "inconclusive"),
    ({}, "inconclusive"),
])
def test_edited_miss(values, want):
    d = pb.decide_edited(values)
    assert d.verdict == want
    if d.rests_on:
        assert metrics.undeclared(pb.BenchReport.rests, "bench.edited_miss", d.verdict, d.rests_on) is None


class MemoryHarness:
    def __init__(self):
        self.svc = MemoryService()

    def open_session(self):
        return self.svc.open_session(OpenSessionRequest(config=Config(num_ctx=200)))

    def turn(self, stable, suffix):
        return pb.Harness(None, ManifestIdentity(backend="x")).turn(stable, suffix)


def test_the_report_is_run_gos_shape_section_by_section():
    """run.go on memory.go: warm same prefix reused whole, the edited stable segment missed, the curve one point per
    suffix, the over-context prefix refused; the report marshals with report.go's keys."""
    sc = br.Scenario(stable="stable text", suffix="hi", changed_suffix="hey", edited_stable="stable TEXT",
                     suffix_curve=("", "x" * 20), max_decode=3, over_context="y" * 300)
    r, turns = br.run(MemoryHarness(), sc, br.Report(model="m", backend="none", mode="live_prefix_reuse"))
    assert r.warm_same_prefix.hit_rate == 1.0 and r.edited_stable_segment.actual_cache_miss
    assert r.warm_changed_suffix.output_equals_cold and [c.suffix_tokens for c in r.suffix_ttft_curve] == [0, 20]
    assert r.failure_cases.over_context and r.failure_cases.cancel_decode
    doc = gojson.marshal(r).decode()
    for key in ("cold_full_prefill", "warm_same_prefix", "warm_changed_suffix", "edited_stable_segment", "decode",
                "suffix_ttft_curve", "failure_cases", "output_equals_cold", "expected_cache_miss", "prompt_tps"):
        assert f'"{key}"' in doc
    assert [t.label for t in turns][:3] == ["cold", "warm same prefix", "warm changed suffix"]


def test_the_rules_give_their_verdicts_again_from_the_rows_a_finding_records():
    """Issue 48: a finding's verdicts and numbers re-derive from its own rows. The report's sections (Go's JSON) and
    its turns' engine counts, as the rows record them, give the same readings, verdicts and figures."""
    import json

    sc = br.Scenario(stable="stable text", suffix="hi", changed_suffix="hey", edited_stable="stable TEXT",
                     suffix_curve=("", "x" * 20), max_decode=3, over_context="y" * 300)
    r, turns = br.run(MemoryHarness(), sc, br.Report(model="m", backend="none", mode="live_prefix_reuse"))
    for t in turns:  # memory.go keeps no engine: counts as an engine's evidence would give them
        t.engine = {"EnsurePrefix.engine_reused_tokens": t.prefix.reused_tokens,
                    "EnsurePrefix.engine_computed_tokens": t.prefix.prefilled_tokens}
    live = pb.verdict(r, turns, [], pb.Params())
    rows = json.loads(json.dumps(live.rows))
    again = pb.BenchReport().from_evidence({"rows": rows}, pb.Params())
    assert (again.verdict, again.claim_verdicts, again.metrics) == (live.verdict, live.claim_verdicts, live.metrics)
    back = pb.report_of(rows)[0]  # every section as recorded (the report's header is the finding's own fields)
    assert all(getattr(back, k) == getattr(r, k) for k in ("cold_full_prefill", "warm_same_prefix", "warm_changed_suffix",
                                                          "edited_stable_segment", "decode", "suffix_ttft_curve",
                                                          "failure_cases"))
    forged = [x | {"engine_computed_tokens": 0} if x.get("turn") == "edited stable segment" else x for x in rows]
    assert pb.BenchReport().from_evidence({"rows": forged}, pb.Params()).claim_verdicts["bench.edited_miss"] == "refuted"
