"""The ssd placement and the hot-row cache on a GPU: pinned staging, async copy,
dequantisation on the device; rows bit-identical to hbm."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engram.tables import create_table
from test.ssd.helpers import random_table

ROWS, DIM = 20_000, 256


@pytest.mark.gpu
def test_ssd_lookups_on_the_gpu_match_hbm(tmp_path: Path) -> None:
    weight, scale = random_table(ROWS, DIM)
    hbm = create_table("hbm", weight, scale, device="cuda")
    ssd = create_table(
        "ssd",
        weight,
        scale,
        device="cuda",
        path=tmp_path / "t",
        ram_cache_bytes=1 << 20,
        hot_cache_bytes=1 << 20,
    )
    for _ in range(4):  # staging buffers alternate; hot and RAM caches fill up
        ids = torch.randint(0, ROWS, (64, 48), device="cuda")
        got = ssd.lookup(ids)
        assert got.device.type == "cuda"
        assert torch.equal(got, hbm.lookup(ids))
    ids = torch.randint(0, ROWS, (8, 48), device="cuda")
    handle = ssd.prefetch(ids)
    assert handle.wait(timeout=30) and handle.rows is not None and handle.rows.is_pinned()
    assert torch.equal(ssd.lookup(ids), hbm.lookup(ids))
    assert ssd.stats()["hot_cache_hits"] > 0
    ssd.close()
