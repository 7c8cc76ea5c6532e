"""What the CPU can do, and what follows for llama.cpp: its build flags (CUDA where a GPU and nvcc are here) and the
AMX workaround; and which cores this process may use (:func:`usable`), which every "all cores" default means.

On Intel CPUs with AMX, llama.cpp's AMX weight buffers (an "extra buffer type") crash at the first
decode of a Q4_1 model (upstream llama.cpp #20824). Two defences, both decided here from facts given
as input so that tests can state every case:

- **Build** (``cmake_args``): ``make setup`` builds llama-cpp-python with the instruction sets this CPU
  has, named one by one, and AMX left out. It keeps the fast CPU repack path (measured on an AMX Xeon:
  ≈93 tok/s decode against ≈70 with extra buffers off; see the benchmark table in docs/cpu.md).
- **Load** (``extra_buffers``): whatever build is installed, a model is loaded without extra buffer
  types when the build has AMX compiled in *and* the CPU has AMX. Both the cell and the benchmark's raw
  arm use this decision.
- **GPU** (``cuda_args``): where NVML reports a GPU and nvcc is here, the same build adds ggml's CUDA backend for
  that GPU's compute capability, so the loop's llama.cpp arms can hold every layer on it (the claim's "llama.cpp
  CUDA cell"); anywhere else nothing is added, and the CPU build is what it was.

Standard library only: the Makefile runs this file as a script before the package is installed.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

#: ggml's CMake options for x86 and the /proc/cpuinfo flags each one needs (ggml/src/ggml-cpu/CMakeLists.txt:
#: GGML_AVX512 adds -mavx512f -mavx512cd -mavx512vl -mavx512dq -mavx512bw).
GGML_X86_OPTIONS: dict[str, tuple[str, ...]] = {
    "GGML_SSE42": ("sse4_2",),
    "GGML_AVX": ("avx",),
    "GGML_AVX2": ("avx2",),
    "GGML_FMA": ("fma",),
    "GGML_F16C": ("f16c",),
    "GGML_BMI2": ("bmi2",),
    "GGML_AVX_VNNI": ("avx_vnni",),
    "GGML_AVX512": ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"),
    "GGML_AVX512_VBMI": ("avx512vbmi",),
    "GGML_AVX512_VNNI": ("avx512_vnni",),
    "GGML_AVX512_BF16": ("avx512_bf16",),
}
#: Never built in, whatever the CPU has: the code path of llama.cpp #20824.
GGML_AMX_OPTIONS = ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16")
AMX_FLAGS = ("amx_tile", "amx_int8", "amx_bf16")
#: The flags ``doctor`` shows: the ones that decide llama.cpp's speed and the AMX workaround.
SHOWN_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", *AMX_FLAGS)
UPSTREAM_ISSUE = "llama.cpp #20824"


def usable() -> tuple[int, ...] | None:
    """The CPUs this process may run on (its affinity: a lane of ``workbench run`` narrows it, and every process it
    starts inherits that); None where the platform cannot say (no ``os.sched_getaffinity``)."""
    getter = getattr(os, "sched_getaffinity", None)
    return tuple(sorted(getter(0))) if getter else None


def cores(cpus: Sequence[int] | None = None, topology: Path = Path("/sys/devices/system/cpu")
          ) -> tuple[tuple[int, ...], ...] | None:
    """``cpus`` (default :func:`usable`) grouped by physical core: the hyperthreads of one core (its
    ``topology/thread_siblings_list``) share its execution units, so two timed jobs on siblings share a core. A CPU
    whose topology cannot be read is a core of its own. None where :func:`usable` is."""
    cpus = usable() if cpus is None else tuple(cpus)
    if cpus is None:
        return None
    groups: dict[tuple[int, ...], list[int]] = {}
    for c in cpus:
        try:
            siblings = _cpu_list((topology / f"cpu{c}" / "topology" / "thread_siblings_list").read_text())
        except (OSError, ValueError):
            siblings = (c,)
        groups.setdefault(siblings, []).append(c)
    return tuple(sorted(tuple(g) for g in groups.values()))


def _cpu_list(text: str) -> tuple[int, ...]:
    """A kernel CPU list (``0-3,8``) as numbers."""
    out: list[int] = []
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return tuple(out)


def spans(cpus: Sequence[int]) -> str:
    """Core numbers as ``0-3,6`` (a kernel CPU list, as :func:`_cpu_list` reads one)."""
    out: list[str] = []
    for c in sorted(cpus):
        if out and out[-1].split("-")[-1] == str(c - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{c}"
        else:
            out.append(str(c))
    return ",".join(out)


def usable_count() -> int:
    """What a default of "all cores" means (llama.cpp's threads, the loop's arms): the cores this process may use,
    not the machine's: two threads pinned to one core would take turns on it."""
    cpus = usable()
    return len(cpus) if cpus else (os.cpu_count() or 1)


def flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The CPU's feature flags (``/proc/cpuinfo``'s first ``flags`` line); empty where there is none."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return frozenset()
    m = re.search(r"^flags\s*:(.*)$", cpuinfo, re.MULTILINE)
    return frozenset(m.group(1).split()) if m else frozenset()


def has_amx(cpu_flags: frozenset[str]) -> bool:
    return any(f in cpu_flags for f in AMX_FLAGS)


def cmake_args(cpu_flags: frozenset[str], machine: str) -> str:
    """CMAKE_ARGS for building llama.cpp on this CPU: each x86 instruction set on or off, AMX off.

    Off x86 (or with no flags to read) ggml's own native detection stays in force, and only AMX,
    which exists on x86 alone, is moot.
    """
    if machine.lower() not in {"x86_64", "amd64"} or not cpu_flags:
        return ""
    opts = ["-DGGML_NATIVE=OFF"]
    opts += [f"-D{opt}={'ON' if all(f in cpu_flags for f in need) else 'OFF'}"
             for opt, need in GGML_X86_OPTIONS.items()]
    opts += [f"-D{opt}=OFF" for opt in GGML_AMX_OPTIONS]
    return " ".join(opts)


#: Where nvcc is looked for off PATH: the CUDA toolkit's default prefix (CMake's FindCUDAToolkit looks there too).
NVCC_DEFAULT = "/usr/local/cuda/bin/nvcc"


def cuda_args(capabilities: Iterable[str], nvcc: str | None) -> str:
    """CMAKE_ARGS that add ggml's CUDA backend, for the GPUs' compute capabilities ("9.0" → sm_90) with that nvcc;
    empty without a GPU or without nvcc (the CPU build, unchanged)."""
    archs = sorted({c.replace(".", "") for c in capabilities})
    if not archs or nvcc is None:
        return ""
    return f"-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES={';'.join(archs)} -DCMAKE_CUDA_COMPILER={nvcc}"


def find_nvcc() -> str | None:
    """nvcc on PATH, else in the CUDA toolkit's default prefix; None where there is none."""
    return shutil.which("nvcc") or (NVCC_DEFAULT if os.access(NVCC_DEFAULT, os.X_OK) else None)


@dataclass(frozen=True)
class ExtraBuffers:
    """Whether llama.cpp may load weights into extra buffer types, and why."""

    use: bool
    reason: str


def build_has_amx(system_info: str) -> bool:
    """llama.cpp's ``llama_print_system_info()`` says ``AMX_INT8 = 1`` when the AMX path is compiled in."""
    return re.search(r"\bAMX_INT8\s*=\s*1\b", system_info) is not None


def extra_buffers(cpu_flags: frozenset[str], system_info: str, override: bool | None = None) -> ExtraBuffers:
    """The decision for one load. ``override`` (the cell option ``extra_buffers``) wins when given."""
    if override is not None:
        return ExtraBuffers(override, f"set by the cell option extra_buffers={str(override).lower()}")
    if has_amx(cpu_flags) and build_has_amx(system_info):
        return ExtraBuffers(False, f"off: this CPU has AMX and llama.cpp was built with it, whose weight buffers "
                                   f"crash at the first decode ({UPSTREAM_ISSUE})")
    if has_amx(cpu_flags):
        return ExtraBuffers(True, "on: this CPU has AMX, but llama.cpp was built without it (safe)")
    return ExtraBuffers(True, "on: no AMX on this CPU")


if __name__ == "__main__":  # used by the Makefile before the package is installed
    if sys.argv[1:] != ["cmake-args"]:
        sys.exit("usage: python cpu.py cmake-args")
    import nvml  # run as a script, this file's folder is the first on sys.path; nvml is standard library only

    gpu = nvml.read()
    nvcc = find_nvcc()
    if gpu["available"] and nvcc is None:
        print(f"a GPU ({', '.join(d['name'] for d in gpu['devices'])}) but no nvcc on PATH or at {NVCC_DEFAULT}: "
              "llama.cpp is built for the CPU only; install the CUDA toolkit for its CUDA build", file=sys.stderr)
    caps = [d["compute_capability"] for d in gpu["devices"]]
    print(" ".join(a for a in (cmake_args(flags(), platform.machine()), cuda_args(caps, nvcc)) if a))
