"""The ``ssd`` placement: bit-identical lookups, writing/reusing/rewriting table files,
bad files named, a file changing under a live table."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

from engram.errors import EngramTableError
from engram.ssd.layout import PAGE_BYTES, DiskLayout
from engram.ssd.readers import reader_names
from engram.tables import create_table
from test.ssd.helpers import random_table

ROWS, DIM = 20_000, 256


@pytest.fixture
def table_rows() -> tuple[torch.Tensor, torch.Tensor]:
    return random_table(ROWS, DIM)


@pytest.mark.parametrize("read", reader_names())
@pytest.mark.parametrize("ram_cache_bytes", [0, 256 << 10], ids=["no-cache", "ram-cache"])
def test_lookups_match_hbm_and_dram(
    tmp_path: Path, table_rows: tuple[torch.Tensor, torch.Tensor], read: str, ram_cache_bytes: int
) -> None:
    weight, scale = table_rows
    hbm = create_table("hbm", weight, scale, device="cpu")
    dram = create_table("dram", weight, scale, device="cpu")
    ssd = create_table(
        "ssd",
        weight,
        scale,
        device="cpu",
        path=tmp_path / "t",
        head_dim=DIM,
        read=read,
        ram_cache_bytes=ram_cache_bytes,
    )
    hot = torch.randint(0, ROWS, (40,))
    for _ in range(3):
        ssd.drop_page_cache()  # NOTE: cold reads too: several read batches per lookup
        random_ids = torch.randint(0, ROWS, (64, 48))
        repeated = hot[torch.randint(0, hot.numel(), (7, 3, 48))]
        edges = torch.tensor([[0, ROWS - 1, 0, 14, 15, ROWS - 1]])
        for ids in (random_ids, repeated, edges):
            got = ssd.lookup(ids)
            assert got.shape == (*ids.shape, DIM) and got.dtype == torch.bfloat16
            assert torch.equal(got, dram.lookup(ids))
            assert torch.equal(got, hbm.lookup(ids))
    assert ssd.counters.lookups == 9
    ssd.close()


def test_write_once_then_reuse_open_or_convert_again(
    tmp_path: Path, table_rows: tuple[torch.Tensor, torch.Tensor]
) -> None:
    weight, scale = table_rows
    path = tmp_path / "t"
    create_table("ssd", weight, scale, path=path, head_dim=DIM).close()
    data = path / "rows.bin"
    stamp = (data.stat().st_ino, data.stat().st_mtime_ns)
    assert data.stat().st_size == DiskLayout(ROWS, DIM).file_bytes
    assert data.stat().st_size % PAGE_BYTES == 0
    assert sorted(os.listdir(tmp_path)) == ["t"]  # published by rename, no leftovers
    create_table("ssd", weight, scale, path=path, head_dim=DIM).close()  # same rows: reused
    assert (data.stat().st_ino, data.stat().st_mtime_ns) == stamp
    ids = torch.randint(0, ROWS, (500,))
    with create_table("ssd", None, None, path=path, head_dim=DIM) as opened:
        assert torch.equal(opened.lookup(ids), create_table("dram", weight, scale).lookup(ids))
    # Other rows (same shape, then another shape) replace the table.
    other_weight, other_scale = random_table(ROWS, DIM)
    for w, s in ((other_weight, other_scale), (weight[:100], scale[:100])):
        with create_table("ssd", w, s, path=path) as table:
            some = torch.randint(0, w.shape[0], (300,))
            assert torch.equal(table.lookup(some), create_table("dram", w, s).lookup(some))
        assert sorted(os.listdir(tmp_path)) == ["t"]


def test_bad_directories_and_spec_mismatches_are_named(
    tmp_path: Path, table_rows: tuple[torch.Tensor, torch.Tensor]
) -> None:
    weight, scale = table_rows
    with pytest.raises(EngramTableError, match=r"SSD table directory .*missing.* does not exist"):
        create_table("ssd", None, None, path=tmp_path / "missing")
    with pytest.raises(EngramTableError, match="needs path="):
        create_table("ssd", weight, scale)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("mine")
    with pytest.raises(EngramTableError, match="is not an SSD table .* refusing to overwrite"):
        create_table("ssd", weight, scale, path=tmp_path / "junk")
    path = tmp_path / "t"
    create_table("ssd", weight, scale, path=path).close()
    with pytest.raises(EngramTableError, match="rows are 256 but the spec expects 128"):
        create_table("ssd", None, None, path=path, head_dim=128)
    with pytest.raises(
        EngramTableError, match="table weight must be uint8 or float8_e4m3fn, got torch.float32"
    ):
        create_table("ssd", weight.float(), scale, path=path)
    with pytest.raises(EngramTableError, match="unknown option"):
        create_table("ssd", None, None, path=path, ram_cache_gb=1)
    with pytest.raises(EngramTableError, match="unknown SSD read strategy 'uring'"):
        create_table("ssd", None, None, path=path, read="uring")

    manifest = (path / "manifest.json").read_text()
    (path / "manifest.json").write_text(manifest.replace('"float8_e4m3fn"', '"bfloat16"'))
    with pytest.raises(EngramTableError, match="table dtypes are bfloat16/float8_e8m0fnu"):
        create_table("ssd", None, None, path=path)
    (path / "manifest.json").write_text(manifest)
    data = path / "rows.bin"
    size = data.stat().st_size
    os.truncate(data, size - PAGE_BYTES)
    with pytest.raises(
        EngramTableError, match=rf"{data} is truncated: {size - PAGE_BYTES:,} bytes"
    ):
        create_table("ssd", None, None, path=path)
    data.unlink()
    with pytest.raises(EngramTableError, match=f"data file {data} is missing"):
        create_table("ssd", None, None, path=path)
    (path / "manifest.json").unlink()
    with pytest.raises(EngramTableError, match="has no manifest.json"):
        create_table("ssd", None, None, path=path)


@pytest.mark.parametrize("read", reader_names())
def test_a_file_changing_under_a_live_table_is_a_permanent_fault(
    tmp_path: Path, table_rows: tuple[torch.Tensor, torch.Tensor], read: str
) -> None:
    weight, scale = table_rows
    path = tmp_path / "t"
    ids = torch.randint(0, ROWS, (300,))
    table = create_table("ssd", weight, scale, path=path, read=read)
    table.lookup(ids)
    data = path / "rows.bin"
    os.truncate(data, data.stat().st_size // 2)
    for _ in range(2):  # and it stays faulted
        with pytest.raises(EngramTableError, match=rf"{data} changed size from [\d,]+ to [\d,]+"):
            table.lookup(ids)
    table.close()

    path2 = tmp_path / "t2"
    table = create_table("ssd", weight, scale, path=path2, read=read)
    table.lookup(ids)
    time.sleep(0.05)  # a new mtime even on filesystems with coarse timestamps
    with open(path2 / "rows.bin", "r+b") as f:
        os.pwrite(f.fileno(), b"\x00" * 64, 4096)
    with pytest.raises(EngramTableError, match="was modified in place while the table was serving"):
        table.lookup(ids)
    table.close()
