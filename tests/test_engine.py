"""The engine layer's own rules: how a prompt is read and the observer specs (the cache identity is modeld's:
tests/transport/test_manifest.py)."""

from __future__ import annotations

import pytest

from workbench import engine
from workbench.engine import common_prefix, split_prompt


def test_a_prompt_is_text_tokens_or_messages():
    assert split_prompt("hi", 10) == ("text", "hi")
    assert split_prompt([1, 2], 10) == ("tokens", [1, 2])
    assert split_prompt([{"role": "user", "content": "x"}], 10)[0] == "messages"
    with pytest.raises(ValueError, match="out of range"):
        split_prompt([1, 99], 10)
    with pytest.raises(TypeError):
        split_prompt([1, "a"], 10)


def test_common_prefix_is_the_longest_shared_start():
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix([], [1]) == 0


def test_the_engine_layer_holds_no_cache_identity_of_its_own():
    """The old sorted-adapter manifest digest is gone: a cell's identity is modeld's (transport.manifest.Variant)."""
    assert not hasattr(engine, "Manifest") and not hasattr(engine, "digest")


def test_every_observer_is_a_runtime_checkable_protocol_with_methods_or_a_declared_data_channel():
    for name, spec in engine.OBSERVERS.items():
        assert getattr(spec, "_is_runtime_protocol", False), name
        methods = engine._protocol_methods(spec)
        assert methods or name == "request_counters", name


def test_one_normalised_engine_reuse_field_whatever_the_engine_calls_it():
    """vLLM's cell (src/workbench/cells/vllm/cell.py) reports num_cached_tokens as source="num_cached_tokens",
    TensorRT-LLM's as "perf_metrics"; llama.cpp's count is the cell's own common prefix."""
    from workbench.engine import PrefixStatus

    def status(source):
        return PrefixStatus(slot=0, prompt_tokens=65, reused_tokens=64, computed_tokens=1, source=source)

    assert status("num_cached_tokens").engine_reused_tokens == 64
    assert status("perf_metrics").engine_reused_tokens == 64
    for own in ("cell", "bookkeeping", "restore", "none"):
        assert status(own).engine_reused_tokens is None


def test_verdicts_and_event_kinds_are_closed_vocabularies_that_read_as_their_strings():
    from workbench.engine import EventKind, KvEvent, Verdict

    assert Verdict.NOT_RUN == "not-run" and f"{Verdict.NOT_RUN}" == str(Verdict.NOT_RUN) == "not-run"
    assert {"not-run": 1}.get(Verdict.NOT_RUN) == 1 and {Verdict.REFUTED: 2}["refuted"] == 2
    assert KvEvent("cleared").kind == EventKind.CLEARED  # vLLM's AllBlocksCleared
    with pytest.raises(ValueError, match="stored"):
        KvEvent("evicted")


def test_a_misspelt_verdict_fails_where_the_rule_returns_it():
    from workbench.probes import Outcome

    assert Outcome("not-applicable", "s").verdict == "not-applicable"
    with pytest.raises(ValueError, match="not-applicable"):
        Outcome("not applicable", "s")
    with pytest.raises(ValueError, match="risk.x"):
        Outcome("refuted", "s", claim_verdicts={"risk.x": "confirm"})


def test_the_finding_schema_reads_its_verdicts_and_sources_from_their_one_home():
    from workbench import findings, metrics
    from workbench.engine import Verdict

    doc = findings.schema()
    assert doc["$defs"]["verdict"]["enum"] == [v.value for v in Verdict]
    assert doc["properties"]["metrics"]["additionalProperties"]["properties"]["source"]["enum"] == list(metrics.SOURCES)


def test_a_description_says_an_observer_is_on_or_can_be_turned_on_never_both():
    def described(**kw):
        return engine.Description("e", "1", "m", "d", engine.KvGeometry(1, 1, 1, 2.0), 8, 8, 32, 1, 1, **kw)

    off = described(observers=("request_counters",), switchable={"connector": "connector=True"})
    assert off.offers("connector") and "connector" not in off.observers and not off.offers("kv_events")
    with pytest.raises(ValueError, match="announced as on and as switchable"):
        described(observers=("connector",), switchable={"connector": "connector=True"})
