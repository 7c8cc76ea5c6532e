"""surface.cpp_entrypoint: the C/C++ entry point, read from the installed package."""

from __future__ import annotations


def test_cpp_entrypoint_on_llamacpp_is_a_reference(run_probe):
    f = run_probe("surface.cpp_entrypoint")
    assert f.verdict == "not-applicable" and f.metric("symbols_missing") == 0
