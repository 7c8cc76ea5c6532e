"""A double of NVML's C library (``libnvidia-ml.so.1``) as :mod:`workbench.nvml` calls it over ctypes.

Each function takes the arguments the C function takes and writes through its pointers what the driver would; the
signatures, buffer sizes and return codes are those of NVIDIA's ``nvml.h`` (NVML_SUCCESS 0,
NVML_ERROR_DRIVER_NOT_LOADED 9, ``nvmlMemory_t`` = total, free, used as unsigned long long). ``devices`` is what the
driver would report: (name, total bytes, free bytes, (major, minor) compute capability).
"""

from __future__ import annotations

SUCCESS, DRIVER_NOT_LOADED = 0, 9
H100 = ("NVIDIA H100 80GB HBM3", 80 << 30, 79 << 30, (9, 0))


class FakeNvml:
    def __init__(self, devices=(H100,), *, init=SUCCESS, driver="580.65.06", cuda=13000):
        self.devices, self.init, self.driver, self.cuda = list(devices), init, driver, cuda
        self.open = False

    def nvmlInit_v2(self):
        self.open = self.init == SUCCESS
        return self.init

    def nvmlShutdown(self):
        self.open = False
        return SUCCESS

    def nvmlErrorString(self, ret):  # nvml.h: const char* nvmlErrorString(nvmlReturn_t)
        return {DRIVER_NOT_LOADED: b"Driver Not Loaded"}.get(ret, b"Unknown Error")

    def nvmlDeviceGetCount_v2(self, count):
        count._obj.value = len(self.devices)
        return SUCCESS

    def nvmlSystemGetDriverVersion(self, buf, size):
        buf.value = self.driver.encode()
        return SUCCESS

    def nvmlSystemGetCudaDriverVersion_v2(self, version):
        version._obj.value = self.cuda  # 1000 × major + 10 × minor
        return SUCCESS

    def nvmlDeviceGetHandleByIndex_v2(self, index, handle):
        handle._obj.value = 0x1000 + index.value  # an opaque nvmlDevice_t
        return SUCCESS

    def _device(self, handle):
        return self.devices[handle.value - 0x1000]

    def nvmlDeviceGetName(self, handle, buf, size):
        buf.value = self._device(handle)[0].encode()
        return SUCCESS

    def nvmlDeviceGetMemoryInfo(self, handle, memory):
        _, total, free, _ = self._device(handle)
        memory._obj.total, memory._obj.free, memory._obj.used = total, free, total - free
        return SUCCESS

    def nvmlDeviceGetCudaComputeCapability(self, handle, major, minor):
        major._obj.value, minor._obj.value = self._device(handle)[3]
        return SUCCESS
