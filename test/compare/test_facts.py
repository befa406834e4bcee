"""SKU and vendor from GPU and CPU names, the spec's override, and this host's CPU as
the hardware of a CPU sweep."""

from __future__ import annotations

import os

import pytest
from sglang_engram.compare import facts


@pytest.mark.parametrize(
    ("name", "sku", "vendor"),
    [
        ("NVIDIA H100 80GB HBM3", "H100", "nvidia"),
        ("NVIDIA H200", "H200", "nvidia"),
        ("NVIDIA GB200", "GB200", "nvidia"),  # not B200
        ("NVIDIA B300 SXM6 AC", "B300", "nvidia"),
        ("AMD Instinct MI300X", "MI300X", "amd"),
        ("Card Series: AMD Instinct MI355X OAM", "MI355X", "amd"),
        ("NVIDIA H20", None, None),  # not H200
        ("Tesla T4", None, None),
    ],
)
def test_sku_from_name(name: str, sku: str | None, vendor: str | None) -> None:
    assert facts.sku_from_name(name) == sku
    if sku:
        assert facts.vendor_of(sku) == vendor


def test_override_wins_and_unknown_gpus_are_named() -> None:
    assert facts.detect_sku("MI325X") == "MI325X"
    assert facts.vendor_of("MI999X") == "amd" and facts.vendor_of("X1") == "nvidia"
    name = facts.local_gpu_name()
    if name is None or facts.sku_from_name(name) is None:
        with pytest.raises(facts.UnknownGpu, match="sku:"):
            facts.detect_sku(None)
    else:
        assert facts.detect_sku(None) == facts.sku_from_name(name)


@pytest.mark.parametrize(
    ("name", "sku"),
    [
        ("Intel(R) Xeon(R) Platinum 8488C", "Intel Xeon Platinum 8488C"),
        ("AMD EPYC 7763 64-Core Processor", "AMD EPYC 7763"),
        ("Intel(R) Core(TM) i7-9750H CPU @ 2.60GHz", "Intel Core i7-9750H"),
        ("AMD EPYC", "AMD EPYC"),
        ("", "CPU"),
    ],
)
def test_sku_from_cpu_name(name: str, sku: str) -> None:
    assert facts.sku_from_cpu_name(name) == sku


def test_cpu_hardware_is_this_host() -> None:
    hw = facts.cpu_hardware(None)
    assert (hw.device, hw.vendor, hw.num_gpus, hw.num_devices) == ("cpu", "cpu", 0, 1)
    assert hw.sku == facts.sku_from_cpu_name(facts.local_cpu_name()) and hw.sku
    assert hw.cpu_cores == len(os.sched_getaffinity(0))
    remote = facts.cpu_hardware("Some CPU", hosts=2, local=False)
    assert (remote.sku, remote.num_devices, remote.cpu_cores) == ("Some CPU", 2, None)
