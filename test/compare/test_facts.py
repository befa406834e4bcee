"""SKU and vendor from GPU names, and the spec's override."""

from __future__ import annotations

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
