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
    ({"bench_edited_engine_computed": 40, "bench_edited_output_equals_cold": True}, "confirmed"),
    ({"bench_edited_engine_computed": 0, "bench_edited_output_equals_cold": True}, "refuted"),
    ({"bench_edited_engine_computed": 40, "bench_edited_output_equals_cold": False}, "refuted"),
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
