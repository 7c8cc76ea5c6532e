"""The contract's own rules: how a prompt is read, identity digests, and the observer specs."""

from __future__ import annotations

import pytest

from workbench import contract
from workbench.contract import Manifest, common_prefix, split_prompt


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


def test_a_manifest_digest_changes_with_any_adapter():
    assert Manifest("m", ()).digest != Manifest("m", ("a",)).digest
    assert Manifest("m", ("a",)).digest == Manifest("m", ("a",)).digest


def test_every_observer_is_a_runtime_checkable_protocol_with_methods_or_a_declared_data_channel():
    for name, spec in contract.OBSERVERS.items():
        assert getattr(spec, "_is_runtime_protocol", False), name
        methods = contract._protocol_methods(spec)
        assert methods or name == "request_counters", name


def test_one_normalised_engine_reuse_field_whatever_the_engine_calls_it():
    """vLLM's cell (src/workbench/cells/vllm.py) reports num_cached_tokens as source="num_cached_tokens",
    TensorRT-LLM's as "perf_metrics"; llama.cpp's count is the cell's own common prefix."""
    from workbench.contract import PrefixStatus

    def status(source):
        return PrefixStatus(slot=0, prompt_tokens=65, reused_tokens=64, computed_tokens=1, source=source)

    assert status("num_cached_tokens").engine_reused_tokens == 64
    assert status("perf_metrics").engine_reused_tokens == 64
    for own in ("cell", "bookkeeping", "restore", "none"):
        assert status(own).engine_reused_tokens is None
