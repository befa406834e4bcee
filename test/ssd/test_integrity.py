"""A damaged row is never served, wherever the damage is: every block of an SSD table is
checked against its hash in the manifest the first time it is read from disk. A
mismatch fails that lookup naming the table and chunk, counts as an I/O error and
marks the table so that the next start converts it again."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from engram.errors import EngramTableError
from engram.ssd.ensure import decide, ensure_table
from engram.ssd.faults import EngramChecksumError
from engram.ssd.layout import DiskLayout
from engram.ssd.manifest import TableManifest
from engram.ssd.sources import TensorRows
from engram.tables import create_table
from test.ssd.helpers import random_table

ROWS, DIM = 40_000, 64  # 62 rows per 4 KiB block, 646 blocks
CHUNK = 16 << 10  # 4 blocks per chunk: 162 chunks


def damage_chunks(path: Path, chunks: list[int]) -> None:
    """Overwrite ``chunks`` of the table at ``path`` with fresh random bytes, keeping the
    file's mtime (damage on the device, not a write by a program)."""
    manifest = TableManifest.load(path)
    layout = manifest.layout
    data = path / manifest.data_file
    stamp = data.stat()
    with open(data, "r+b") as f:
        for chunk in chunks:
            length = layout.chunk_span(chunk)[2]
            os.pwrite(f.fileno(), os.urandom(length), chunk * layout.chunk_bytes)
    os.utime(data, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))


def middle_chunks(layout: DiskLayout, count: int) -> list[int]:
    """``count`` random chunks that are neither the first nor the last."""
    return sorted(random.sample(range(1, layout.num_chunks - 1), count))


def rows_of(layout: DiskLayout, chunks: list[int]) -> np.ndarray:
    return np.concatenate(
        [np.arange(*(lambda s: (s[0], s[0] + s[1]))(layout.chunk_span(c))) for c in chunks]
    )


@pytest.fixture
def table_dir(tmp_path: Path) -> tuple[Path, TensorRows, torch.Tensor, torch.Tensor]:
    weight, scale = random_table(ROWS, DIM)
    source = TensorRows(weight, scale)
    ensure_table(tmp_path / "t", source, chunk_bytes=CHUNK)
    return tmp_path / "t", source, weight, scale


@pytest.mark.parametrize("read", ["mmap", "pread", "direct"])
def test_a_lookup_touching_damaged_chunks_fails_naming_them(table_dir, read: str) -> None:
    path, source, weight, scale = table_dir
    layout = TableManifest.load(path).layout
    damaged = middle_chunks(layout, 5)
    damage_chunks(path, damaged)
    # The open's quick check reads the first and last chunk only: the damage is not seen.
    assert decide(path, source, CHUNK).reuse
    dram = create_table("dram", weight, scale)
    bad_rows = rows_of(layout, damaged)
    clean = np.setdiff1d(np.arange(ROWS), bad_rows)
    with create_table("ssd", None, None, path=path, read=read) as table:
        ids = torch.from_numpy(np.random.default_rng().choice(clean, (32, 48)))
        assert torch.equal(table.lookup(ids), dram.lookup(ids))
        for attempt in (1, 2):  # a failed check is not remembered as passed
            chunk = random.choice(damaged)
            ids = torch.from_numpy(np.random.default_rng().choice(clean, (16, 48)))
            ids[3, 7] = int(rows_of(layout, [chunk])[5])
            with pytest.raises(EngramChecksumError) as caught:
                table.lookup(ids)
            assert isinstance(caught.value, EngramTableError)
            message = str(caught.value)
            assert f"SSD table {path}" in message and f"chunk {chunk} " in message
            assert "\n" not in message
            assert table.stats()["io_errors"] == attempt
        ids = torch.from_numpy(np.random.default_rng().choice(clean, (32, 48)))
        assert torch.equal(table.lookup(ids), dram.lookup(ids))  # the rest keeps serving
    # Marked: the next start converts it again, and then serves every row.
    decision = decide(path, source, CHUNK)
    assert not decision.reuse and "damaged" in decision.why, decision.why
    with pytest.raises(EngramTableError, match="damaged"):
        create_table("ssd", None, None, path=path)  # no rows to convert from: refused
    ensure_table(path, source, chunk_bytes=CHUNK)
    assert decide(path, source, CHUNK).reuse
    with create_table("ssd", None, None, path=path, read=read) as table:
        ids = torch.from_numpy(bad_rows[np.random.default_rng().integers(0, bad_rows.size, 999)])
        assert torch.equal(table.lookup(ids), dram.lookup(ids))


def test_damage_after_the_table_opened_is_caught(table_dir) -> None:
    path, _, weight, scale = table_dir
    layout = TableManifest.load(path).layout
    with create_table("ssd", None, None, path=path, ram_cache_bytes=1 << 20) as table:
        damaged = middle_chunks(layout, 3)
        damage_chunks(path, damaged)
        table.drop_page_cache()  # the damaged bytes now come from the file
        ids = torch.from_numpy(rows_of(layout, damaged)[::37].copy())
        with pytest.raises(EngramChecksumError, match=f"chunk {damaged[0]} "):
            table.lookup(ids)
        # Nothing of the failed lookup reached the RAM cache: it fails again.
        with pytest.raises(EngramChecksumError):
            table.lookup(ids)
        assert table.stats()["io_errors"] == 2


def test_read_ahead_never_hands_out_damaged_rows(table_dir) -> None:
    path, _, _, _ = table_dir
    layout = TableManifest.load(path).layout
    damaged = middle_chunks(layout, 2)
    damage_chunks(path, damaged)
    with create_table("ssd", None, None, path=path) as table:
        ids = torch.from_numpy(rows_of(layout, damaged)[::11].copy())
        handle = table.read_ahead(ids)
        assert not handle.wait(60)  # the read-ahead failed the check
        with pytest.raises(EngramChecksumError):
            table.lookup(ids)
        assert table.stats()["io_errors"] == 1  # the lookup's failure, counted once


@pytest.mark.parametrize("read", ["mmap", "pread"])
def test_a_block_is_checked_once_while_it_stays_cached(table_dir, read: str) -> None:
    path, _, weight, scale = table_dir
    layout = TableManifest.load(path).layout
    with create_table("ssd", None, None, path=path, read=read) as table:
        # Rows outside the first and last chunk (the open checked those).
        ids = torch.randint(layout.chunk_rows, ROWS - 2 * layout.chunk_rows, (8, 48))
        blocks = np.unique(ids.numpy() // layout.rows_per_block).size
        opened = table.blocks_checked
        table.lookup(ids)
        assert table.blocks_checked == opened + blocks
        table.lookup(ids)
        table.lookup(ids[:3])
        assert table.blocks_checked == opened + blocks  # a checked block costs nothing more
        table.drop_page_cache()  # read from the disk again: checked again
        table.lookup(ids)
        assert table.blocks_checked == opened + 2 * blocks
