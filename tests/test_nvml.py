"""The GPU is read from NVML, the driver's own library, whatever is on PATH (a double of libnvidia-ml here)."""

from __future__ import annotations

import pytest

from workbench import nvml

from doubles.fake_nvml import DRIVER_NOT_LOADED, H100, FakeNvml


def _missing():
    raise OSError("libnvidia-ml.so.1: cannot open shared object file: No such file or directory")


@pytest.mark.parametrize("load, available, reason", [
    (lambda: FakeNvml(), True, None),
    (lambda: FakeNvml(devices=()), False, "NVML reports no GPU"),
    (lambda: FakeNvml(init=DRIVER_NOT_LOADED), False, "no NVIDIA GPU: NVML unavailable (nvmlInit_v2: Driver Not Loaded)"),
    (_missing, False, "cannot load libnvidia-ml.so.1"),
])
def test_read_says_what_nvml_says(load, available, reason):
    got = nvml.read(load)
    assert got["available"] is available and got["source"] == "nvml"
    assert (got["reason"] is None) if reason is None else (reason in got["reason"])


def test_a_gpu_is_read_with_its_compute_capability_and_nvml_is_shut_down():
    lib = FakeNvml(devices=(H100, ("NVIDIA L4", 24 << 30, 23 << 30, (8, 9))))
    got = nvml.read(lambda: lib)
    assert [d["name"] for d in got["devices"]] == ["NVIDIA H100 80GB HBM3", "NVIDIA L4"]
    assert [d["compute_capability"] for d in got["devices"]] == ["9.0", "8.9"]
    assert got["devices"][0]["memory_total_bytes"] == 80 << 30 and got["driver"] == "580.65.06" and got["cuda"] == "13.0"
    assert not lib.open


def test_the_fingerprint_reads_nvml_not_nvidia_smi(monkeypatch, tmp_path):
    """An ``nvidia-smi`` on PATH that lists a GPU does not make one: the fingerprint is NVML's answer alone."""
    from workbench import environment

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '0, NVIDIA H100, 81559, 81000, 580.00'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setattr(nvml, "_load", _missing)
    environment.gpus.cache_clear()
    try:
        g = environment.gpus()
        assert g["source"] == "nvml" and not g["available"] and "cannot load libnvidia-ml" in g["reason"]
    finally:
        environment.gpus.cache_clear()
