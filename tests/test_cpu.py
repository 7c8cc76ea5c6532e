"""The AMX workaround applies exactly where it should, and llama.cpp's build flags follow the CPU."""

from __future__ import annotations

import platform
import runpy
import shutil
import sys

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


NVCC = "/usr/local/cuda/bin/nvcc"
CUDA_H100 = f"-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER={NVCC}"


@pytest.mark.parametrize("capabilities, nvcc, want", [
    ((), None, ""),                      # no GPU, no nvcc: the CPU build
    ((), NVCC, ""),                      # nvcc but no GPU (this project's machines): the CPU build, unchanged
    (("9.0",), None, ""),                # a GPU but no nvcc: nothing to build CUDA with
    (("9.0",), NVCC, CUDA_H100),         # H100 / H200: sm_90
    (("9.0", "9.0"), NVCC, CUDA_H100),   # two of them: one architecture
    (("8.9", "9.0"), NVCC, CUDA_H100.replace("=90", "=89;90")),  # an L4 beside an H100: both
])
def test_cuda_args_follow_the_gpu_and_nvcc(capabilities, nvcc, want):
    assert cpu.cuda_args(capabilities, nvcc) == want


def test_the_makefile_line_is_the_cpu_build_alone_without_a_gpu(monkeypatch, capsys):
    """``python cpu.py cmake-args``, as the Makefile runs it: where NVML reports no GPU (nvcc present or not) the line
    is the CPU build's, byte for byte; where it reports an H100 and nvcc is here, CUDA for sm_90 is added."""
    from workbench import nvml

    monkeypatch.setattr(sys, "argv", ["cpu.py", "cmake-args"])
    monkeypatch.setitem(sys.modules, "nvml", nvml)  # what the script imports from its own folder
    monkeypatch.setattr(shutil, "which", lambda name: NVCC)
    cpu_line = cpu.cmake_args(cpu.flags(), platform.machine())
    for gpu, want in (({"available": False, "devices": []}, cpu_line),
                      ({"available": True, "devices": [{"name": "H100", "compute_capability": "9.0"}]},
                       " ".join(a for a in (cpu_line, CUDA_H100) if a))):
        monkeypatch.setattr(nvml, "read", lambda gpu=gpu: gpu)
        runpy.run_path(cpu.__file__, run_name="__main__")
        assert capsys.readouterr().out == want + "\n"


def test_all_cores_means_the_cores_this_process_may_use(monkeypatch):
    """A lane of ``workbench run`` pins its processes: a default of "all cores" must not put two threads on one."""
    monkeypatch.setattr(cpu.os, "sched_getaffinity", lambda pid: {5, 3}, raising=False)
    assert cpu.usable() == (3, 5) and cpu.usable_count() == 2
    monkeypatch.delattr(cpu.os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(cpu.os, "cpu_count", lambda: 8)
    assert cpu.usable() is None and cpu.usable_count() == 8
