"""The benchmark compares like with like: every arm gets the same extra-buffer setting as the cell."""

from __future__ import annotations

import pytest

from conftest import TINY
from test_cpu import BUILD_AMX, SPR
from workbench import cpu
from workbench.cells.llamacpp import bench


@pytest.fixture
def loads(monkeypatch):
    """Every llama.cpp model load's ``use_extra_bufts``, read off the params handed to the engine."""
    import llama_cpp

    seen: list[bool] = []
    real = llama_cpp.llama_model_load_from_file

    def load(path, params):
        seen.append(bool(params.use_extra_bufts))
        return real(path, params)

    monkeypatch.setattr(llama_cpp, "llama_model_load_from_file", load)
    return seen


@pytest.fixture
def amx_machine(monkeypatch):
    """This process believes it runs an AMX build on an AMX CPU (the facts of llama.cpp #20824)."""
    import llama_cpp

    monkeypatch.setattr(cpu, "flags", lambda cpuinfo=None: SPR)
    monkeypatch.setattr(llama_cpp, "llama_print_system_info", lambda: BUILD_AMX.encode())


def test_on_an_amx_machine_cell_and_raw_arm_both_load_without_extra_buffers(amx_machine, loads):
    res = bench.run(TINY, prompt_tokens=32, decode_tokens=4, rounds=1)
    assert loads == [False, False]  # the cell, then the raw arm; the high-level Llama cannot be told, so it is out
    assert set(res.seconds) == {"cell", "raw"} and res.extra_buffers is False
    assert "20824" in res.extra_buffers_reason and "amx_int8" in res.cpu_flags


def test_elsewhere_a_fourth_arm_measures_what_the_workaround_would_cost(loads, monkeypatch):
    monkeypatch.setattr(cpu, "flags", lambda cpuinfo=None: frozenset({"avx2"}))
    res = bench.run(TINY, prompt_tokens=32, decode_tokens=4, rounds=1)
    assert loads[:2] == [True, True] and loads[-1] is False  # cell, raw, (Llama), then the cell with them off
    assert set(res.seconds) == {"cell", "raw", "llama", "cell_xb_off"}
    assert "cell_xb_off / cell" in bench.render(res)
