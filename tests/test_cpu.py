"""The AMX workaround applies exactly where it should, and llama.cpp's build flags follow the CPU."""

from __future__ import annotations

import pytest

from workbench import cpu

SPR = frozenset("sse4_2 avx avx2 fma f16c bmi2 avx_vnni avx512f avx512cd avx512vl avx512dq avx512bw avx512vbmi "
                "avx512_vnni avx512_bf16 amx_tile amx_int8 amx_bf16".split())  # Sapphire Rapids
ZEN3 = frozenset("sse4_2 avx avx2 fma f16c bmi2".split())  # AVX2, no AVX-512, no AMX
BUILD_AMX = "CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | REPACK = 1 |"
BUILD_NO_AMX = "CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | REPACK = 1 |"


def test_flags_are_read_from_the_first_flags_line():
    info = "processor\t: 0\nflags\t\t: fpu avx2 amx_int8\nprocessor\t: 1\nflags\t\t: fpu\n"
    assert cpu.flags(info) == {"fpu", "avx2", "amx_int8"}
    assert cpu.flags("no flags here") == frozenset()


@pytest.mark.parametrize("flags, system_info, use", [
    (SPR, BUILD_AMX, False),      # the crash of llama.cpp #20824: AMX CPU and AMX build
    (SPR, BUILD_NO_AMX, True),    # AMX CPU, but the build leaves AMX out (what make setup builds)
    (ZEN3, BUILD_NO_AMX, True),
    (ZEN3, BUILD_AMX, True),      # an AMX build on a CPU without AMX never takes the AMX path
    (frozenset(), BUILD_AMX, True),
])
def test_extra_buffers_are_off_exactly_on_amx_cpus_with_an_amx_build(flags, system_info, use):
    d = cpu.extra_buffers(flags, system_info)
    assert d.use is use
    assert ("20824" in d.reason) is (not use)


def test_the_cell_option_overrides_the_decision():
    assert cpu.extra_buffers(SPR, BUILD_AMX, override=True).use is True
    assert "cell option" in cpu.extra_buffers(ZEN3, "", override=False).reason


def test_cmake_args_name_each_instruction_set_and_never_amx():
    args = cpu.cmake_args(SPR, "x86_64").split()
    assert "-DGGML_NATIVE=OFF" in args and "-DGGML_AVX512=ON" in args and "-DGGML_AVX512_BF16=ON" in args
    assert {"-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"} <= set(args)
    assert not [a for a in args if "AMX" in a and a.endswith("=ON")]


def test_cmake_args_never_ask_for_an_instruction_set_the_cpu_lacks():
    args = cpu.cmake_args(ZEN3, "x86_64").split()
    assert "-DGGML_AVX2=ON" in args
    assert "-DGGML_AVX512=OFF" in args and "-DGGML_AVX512_VNNI=OFF" in args and "-DGGML_AVX_VNNI=OFF" in args
    partial = ZEN3 | {"avx512f"}  # AVX-512 needs F, CD, VL, DQ and BW together
    assert "-DGGML_AVX512=OFF" in cpu.cmake_args(partial, "x86_64").split()


def test_cmake_args_leave_other_machines_to_ggml():
    assert cpu.cmake_args(SPR, "aarch64") == ""
    assert cpu.cmake_args(frozenset(), "x86_64") == ""
