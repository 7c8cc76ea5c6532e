"""Metric declarations: one unit (an enum with conversion) and one source per metric, one way to render."""

from __future__ import annotations

import math

import pytest

from workbench import metrics
from workbench.metrics import Unit


def test_every_unit_has_a_formatter():
    for unit in Unit:
        assert isinstance(unit.format(1), str) and unit.format(1)


def test_units_convert_to_display_units():
    assert Unit.SECONDS.convert(0.25, "ms") == 250
    assert Unit.BYTES.convert(3 * 2**20, "MiB") == 3
    assert Unit.RATIO.convert(0.5, "%") == 50
    with pytest.raises(ValueError, match="cannot convert s to 'MiB'"):
        Unit.SECONDS.convert(1, "MiB")


def test_every_metric_declares_its_source_and_renders():
    for tag, m in metrics.METRICS.items():
        assert m.source in metrics.SOURCES and isinstance(m.unit, Unit) and m.description
        assert metrics.render(tag, 1) != "—"
        assert metrics.render(tag, None) == metrics.render(tag, math.nan) == "—"


def test_rendering_reads_the_same_everywhere():
    assert metrics.render("ttft_cold_s", 0.0123) == "12.3 ms"
    assert metrics.render("ttft_cold_s", 2.5) == "2.5 s"
    assert metrics.render("kv_bytes_per_token", 256) == "256 B"
    assert metrics.render("state_bytes", 3 * 2**20) == "3.00 MiB"
    assert metrics.render("reuse_fraction", 0.5) == "50.0%"
    assert metrics.render("restored_identical", True) == "yes"


def test_only_finite_engine_read_numbers_can_carry_a_verdict():
    values = {"reused_tokens": 3, "engine_resident_tokens": 10, "ttft_cold_s": 0.1, "logits_max_abs_diff": float("nan"),
              "restored_identical": True}
    S = metrics.Support
    assert metrics.unfit_to_rest_on(values, [S("engine_resident_tokens", ">", 0), S("restored_identical", "==", True)]) == []
    assert metrics.unfit_to_rest_on(values, [S("reused_tokens", ">", 0), S("ttft_cold_s", ">", 0),
                                             S("logits_max_abs_diff", "<", 1), S("state_bytes", ">", 0),
                                             S("engine_resident_tokens", "<", 10)]) == [
        "reused_tokens is cell-sourced", "ttft_cold_s is timed-sourced", "logits_max_abs_diff is nan, not a finite reading",
        "state_bytes was not measured", "engine_resident_tokens is 10, which does not support it (needs < 10)"]
    assert metrics.unfit_to_rest_on(values, [S("reused_tokens", ">", 0)], {"reused_tokens": "engine"}) == []


def test_timings_echoes_and_cell_arithmetic_are_not_labelled_engine():
    for tag in ("ttft_cold_s", "ttft_warm_s", "round_s"):
        assert metrics.get(tag).source == "timed"
    for tag in ("engine_refusals", "export_unit_tokens", "silent_evictions"):
        assert metrics.get(tag).source != "engine"
