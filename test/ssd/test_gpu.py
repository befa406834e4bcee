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
    handle = ssd.read_ahead(ids)
    assert handle.wait(timeout=30) and handle.rows is not None and handle.rows.is_pinned()
    assert torch.equal(ssd.lookup(ids), hbm.lookup(ids))
    assert ssd.stats()["hot_cache_hits"] > 0
    ssd.close()


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["e4m3-tensor-scale", "bf16"])
def test_qwen_ple_row_formats_on_the_gpu_match_the_cpu(tmp_path: Path, name: str) -> None:
    """Qwen3.8-Flash-Next's PLE rows (fp8 with one bf16 scale per table, or bf16) served by
    an ssd table on the GPU (hot cache in front) are the CPU table's rows, bit for bit."""
    from engram.row_formats import Bf16Rows, E4m3TensorScaleRows
    from engram.ssd.sources import TensorRows
    from engram.tables import TableOptions, open_table

    count = int(torch.randint(5_000, 20_000, ()))
    if name == "bf16":
        fmt = Bf16Rows(160, 0x3F80)
        weight = (torch.randn(count, 160) * 5).to(torch.bfloat16)
    else:
        fmt = E4m3TensorScaleRows(160, int(torch.randint(0x3C00, 0x4100, ())))
        weight = torch.randint(0, 256, (count, 160), dtype=torch.uint8)
    source = TensorRows(weight, None, row_format=fmt)
    common = {"head_dim": 160, "num_rows": count, "path": tmp_path / "t", "source": source}
    with (
        open_table(TableOptions("ssd", device="cpu", **common)) as cpu,
        open_table(TableOptions("ssd", device="cuda", hot_cache_bytes=1 << 18, **common)) as gpu,
    ):
        for _ in range(3):  # from the disk, then the RAM and hot caches
            ids = torch.randint(0, count, (48, 16))
            got = gpu.lookup(ids.cuda())
            assert got.device.type == "cuda"
            assert torch.equal(got.cpu().view(torch.int16), cpu.lookup(ids).view(torch.int16))
