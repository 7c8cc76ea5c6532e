"""NVIDIA GPUs as the driver states them: NVML (``libnvidia-ml.so.1``, installed with the driver) over ctypes.

The one reader of the GPU: the fingerprint every finding carries (:func:`workbench.environment.gpus`), the
``--on-target`` check (:mod:`workbench.loop.target`) and llama.cpp's CUDA build (:mod:`workbench.cpu`) all ask it.
It asks the driver itself, not whether a program such as ``nvidia-smi`` is on PATH, and needs no Python package.
Standard library only: the Makefile runs ``cpu.py``, which imports it, before the package is installed.
"""

from __future__ import annotations

import ctypes
from typing import Any, Callable

LIBRARY = "libnvidia-ml.so.1"
_NAME_BYTES = 96  # NVML_DEVICE_NAME_V2_BUFFER_SIZE (nvml.h)
_DRIVER_BYTES = 80  # NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE (nvml.h)


class NvmlError(Exception):
    """An NVML call that did not return NVML_SUCCESS, with the driver's own words (``nvmlErrorString``)."""


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]  # nvmlMemory_t


def _load() -> Any:
    lib = ctypes.CDLL(LIBRARY)
    lib.nvmlErrorString.restype = ctypes.c_char_p  # const char*; every other NVML function returns nvmlReturn_t
    return lib


def read(load: Callable[[], Any] | None = None) -> dict:
    """The GPUs NVML reports: ``available``, ``source`` ("nvml"), ``devices`` (name, memory, compute capability),
    ``driver``, ``cuda``, and ``reason`` (why none, in NVML's words) where there is none."""
    try:
        lib = (load or _load)()
    except OSError as e:
        return _none(f"NVML unavailable: cannot load {LIBRARY} ({e}); is the NVIDIA driver installed?")

    def call(fn: str, *args: Any) -> None:
        ret = getattr(lib, fn)(*args)
        if ret != 0:
            raise NvmlError(f"{fn}: {(lib.nvmlErrorString(ret) or b'error %d' % ret).decode(errors='replace')}")

    try:
        call("nvmlInit_v2")
    except NvmlError as e:
        return _none(f"NVML unavailable ({e})")
    try:
        count, version, cuda = ctypes.c_uint(), ctypes.create_string_buffer(_DRIVER_BYTES), ctypes.c_int()
        call("nvmlDeviceGetCount_v2", ctypes.byref(count))
        call("nvmlSystemGetDriverVersion", version, ctypes.c_uint(_DRIVER_BYTES))
        call("nvmlSystemGetCudaDriverVersion_v2", ctypes.byref(cuda))
        devices = [_device(call, i) for i in range(count.value)]
    except NvmlError as e:
        return _none(f"NVML answered with an error ({e})")
    finally:
        lib.nvmlShutdown()
    return {"available": bool(devices), "source": "nvml", "devices": devices, "driver": version.value.decode(),
            "cuda": f"{cuda.value // 1000}.{cuda.value % 1000 // 10}", "reason": None if devices else "NVML reports no GPU"}


def _device(call: Callable[..., None], index: int) -> dict:
    handle, name, mem = ctypes.c_void_p(), ctypes.create_string_buffer(_NAME_BYTES), _Memory()
    major, minor = ctypes.c_int(), ctypes.c_int()
    call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(handle))
    call("nvmlDeviceGetName", handle, name, ctypes.c_uint(_NAME_BYTES))
    call("nvmlDeviceGetMemoryInfo", handle, ctypes.byref(mem))
    call("nvmlDeviceGetCudaComputeCapability", handle, ctypes.byref(major), ctypes.byref(minor))
    return {"index": index, "name": name.value.decode(errors="replace"), "memory_total_bytes": int(mem.total),
            "memory_free_bytes": int(mem.free), "compute_capability": f"{major.value}.{minor.value}"}


def _none(reason: str) -> dict:
    return {"available": False, "source": "nvml", "devices": [], "driver": None, "cuda": None,
            "reason": f"no NVIDIA GPU: {reason}"}


__all__ = ["LIBRARY", "NvmlError", "read"]
