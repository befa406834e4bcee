"""The SSD tier's compiled kernels against plain references: XXH3 against the xxhash
package, read plans against reading the file by hand, the RAM cache's LRU against a
model of it; and that a table's lookups compile nothing once it is open."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import xxhash
from engram_testing.plain import row_offsets

from engram.rows.read_ahead import ReadAheadHandle
from engram.ssd import kernels
from engram.ssd.block_hashes import chunk_hashes
from engram.ssd.integrity import verify_table
from engram.ssd.kernels.constants import COUNT, END_BLOCK, END_ROW, END_RUN, FIRST, SLOT
from engram.ssd.layout import DiskLayout
from engram.ssd.manifest import TableManifest
from engram.ssd.readers import reader_names
from engram.ssd.readers.direct import DirectReader
from engram.ssd.readers.mapped import MappedReader
from engram.ssd.readers.planning import ReadPlan
from engram.ssd.row_cache import RowCache
from engram.tables import create_table
from test.ssd.helpers import random_table


def test_block_hashes_equal_the_xxhash_package() -> None:
    rng = np.random.default_rng()
    data = np.frombuffer(rng.bytes(64 << 10), dtype=np.uint8)
    for length in (1, 17, 240, 241, 1024, 4096, 8192, 12288):
        offsets = np.sort(rng.choice(data.size - length, 16, replace=False))  # any alignment
        got = np.empty(offsets.size, dtype=np.uint64)
        kernels.xxh3.hash_blocks(data, offsets, length, got)
        want = [xxhash.xxh3_64_intdigest(data[o : o + length].tobytes()) for o in offsets]
        assert got.tolist() == want, length
    chunk = rng.bytes(4096 * 5)
    want = [xxhash.xxh3_64_intdigest(chunk[i : i + 4096]) for i in range(0, len(chunk), 4096)]
    assert chunk_hashes(chunk, 4096).tolist() == want


def _read_by_plan(
    plan: ReadPlan, layout: DiskLayout, file: np.ndarray, ids: np.ndarray
) -> np.ndarray:
    """Rows of ``ids`` as a reader following ``plan`` gets them (``in_file`` False)."""
    out = np.zeros((ids.size, layout.row_bytes), dtype=np.uint8)
    bb = layout.block_bytes
    run = row = block = 0
    for end_run, end_row, end_block in plan.batches.tolist():
        runs = plan.runs[run:end_run]
        buffer = np.zeros(plan.buffer_blocks() * bb, dtype=np.uint8)
        for first, count, slot in runs.tolist():
            buffer[slot * bb : (slot + count) * bb] = file[first * bb : (first + count) * bb]
        for b, at in zip(plan.blocks[block:end_block], plan.block_at[block:end_block], strict=True):
            assert np.array_equal(buffer[at : at + bb], file[b * bb : (b + 1) * bb])
        kernels.plan.gather(buffer, plan.row_at, out, np.zeros(0, dtype=np.int64), row, end_row)
        run, row, block = end_run, end_row, end_block
    assert (row, block) == (ids.size, plan.k)
    return out


@pytest.mark.parametrize("head_dim", [256, 64, 1024])
def test_read_plans_find_every_row(head_dim: int) -> None:
    rng = np.random.default_rng()
    layout = DiskLayout(int(rng.integers(20_000, 60_000)), head_dim)
    file = np.frombuffer(rng.bytes(layout.file_bytes), dtype=np.uint8)
    rows = file.reshape(layout.num_blocks, layout.block_bytes)[
        :, : layout.rows_per_block * layout.row_bytes
    ].reshape(-1, layout.row_bytes)[: layout.num_rows]
    for _ in range(6):
        n = int(rng.integers(1, 5_000))
        ids = np.unique(rng.integers(0, layout.num_rows, n))
        if rng.random() < 0.5:  # a dense stretch: whole windows get read
            start = int(rng.integers(0, layout.num_rows - 3000))
            ids = np.union1d(ids, np.arange(start, start + 3000))
        plan = ReadPlan(
            layout,
            max_run_bytes=int(rng.choice([1, 4, 32])) * layout.block_bytes,
            batch_bytes=int(rng.choice([1, 3, 64, 1 << 20])) * layout.block_bytes,
            windows=bool(rng.random() < 0.7),
        ).make(ids)
        assert np.array_equal(plan.blocks, np.unique(ids // layout.rows_per_block))
        assert (plan.runs[:, COUNT] <= plan.max_run).all()
        starts = plan.runs[:, FIRST]
        assert (np.diff(starts) > 0).all() and (
            starts[1:] >= starts[:-1] + plan.runs[:-1, COUNT]
        ).all()
        assert plan.batches[-1, END_RUN] == plan.r and (np.diff(plan.batches[:, END_RUN]) > 0).all()
        ends = starts + plan.runs[:, COUNT]
        # Runs touch only where one is full; without windows they cover just the blocks.
        assert ((starts[1:] > ends[:-1]) | (plan.runs[:-1, COUNT] == plan.max_run)).all()
        if not plan.window:
            covered = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends, strict=True)])
            assert np.array_equal(covered, plan.blocks)
        assert (plan.runs[:, SLOT] + plan.runs[:, COUNT] <= plan.batch_blocks + plan.max_run).all()
        assert np.array_equal(_read_by_plan(plan, layout, file, ids), rows[ids])


def test_a_plan_skips_blocks_in_memory_and_can_give_file_offsets() -> None:
    rng = np.random.default_rng()
    layout = DiskLayout(50_000, 256)
    ids = np.unique(rng.integers(0, layout.num_rows, 2_000))
    skip = rng.random(layout.num_blocks) < 0.5
    plan = ReadPlan(
        layout,
        max_run_bytes=8 * layout.block_bytes,
        batch_bytes=64 * layout.block_bytes,
        in_file=True,
    )
    plan.make(ids, skip)
    read = np.zeros(layout.num_blocks, dtype=bool)
    kernels.plan.mark_runs(read, plan.runs)
    needed = np.unique(ids // layout.rows_per_block)
    assert read[needed[~skip[needed]]].all()  # every block not in memory is read
    assert not read[needed[skip[needed]]].any() or plan.window  # whole windows may cover some
    assert np.array_equal(plan.row_at, row_offsets(layout, ids))
    assert plan.b > 1 and plan.batches[-1, END_ROW] == ids.size
    assert plan.buffer_blocks() <= 64 + 8
    assert plan.batches[-1, END_BLOCK] == needed.size


@pytest.mark.parametrize("reader_class", [MappedReader, DirectReader])
def test_a_cold_read_in_many_slices_gives_every_row_checked(tmp_path: Path, reader_class) -> None:
    """Readers wait for a large read a slice (mmap) or batch (direct) at a time, with the
    next ones in flight meanwhile: with 16 KiB slices a read of thousands of rows takes
    dozens of them."""
    weight, scale = random_table(30_000, 256)
    create_table("ssd", weight, scale, path=tmp_path / "t").close()
    manifest = TableManifest.load(tmp_path / "t")
    layout = manifest.layout
    checks = verify_table(tmp_path / "t", manifest)
    small = 4 * layout.block_bytes
    size = {"slice_bytes": small} if reader_class is MappedReader else {"batch_bytes": small}
    reader = reader_class(tmp_path / "t" / "rows.bin", layout, checks=checks, **size)
    file = np.fromfile(tmp_path / "t" / "rows.bin", dtype=np.uint8)
    rows = file.reshape(layout.num_blocks, -1)[:, : layout.rows_per_block * layout.row_bytes]
    rows = rows.reshape(-1, layout.row_bytes)
    reader.drop_page_cache()
    ids = np.unique(np.random.default_rng().integers(0, 30_000, 5_000))
    out = np.zeros((ids.size, layout.row_bytes), dtype=np.uint8)
    at = np.random.default_rng().permutation(ids.size)  # rows to places of the caller's
    before = checks.checked
    reader.read_rows(ids, out, at)
    assert reader._plan().b > 30
    assert np.array_equal(out[at], rows[ids])
    assert checks.checked - before == np.unique(ids // layout.rows_per_block).size
    reader.close()


def test_ram_cache_is_lru_within_each_set() -> None:
    rng = np.random.default_rng()
    ways, n_sets = 4, 8
    cache = RowCache(ways * n_sets * 3, 3, ways=ways)
    model: list[list[int]] = [[] for _ in range(n_sets)]  # per set, least recent first
    for _ in range(200):
        ids = np.unique(rng.integers(0, 100, int(rng.integers(1, 40))))
        rows = (ids[:, None] * np.array([1, 7, 13]) % 251).astype(np.uint8)
        out = np.zeros_like(rows)
        need = np.ones(ids.size, dtype=bool)
        missed = np.empty(ids.size, dtype=np.int64)
        n_hit, n_missed = cache.take(ids, need, out, missed)
        hit = [int(i) for i in ids if i in model[i % n_sets]]
        assert sorted(ids[~need].tolist()) == sorted(hit)
        assert np.array_equal(out[~need], rows[~need])
        assert (n_hit, n_missed) == (len(hit), ids.size - len(hit))
        for i in hit:  # hits become the most recently used
            model[i % n_sets].remove(i)
            model[i % n_sets].append(i)
        at = missed[:n_missed]
        cache.put(ids[at], rows, at)
        fresh: dict[int, int] = {}
        for i in ids[at].tolist():
            s = model[i % n_sets]
            if fresh.get(i % n_sets, 0) == ways:
                continue  # the set was filled in this call: the surplus is not cached
            fresh[i % n_sets] = fresh.get(i % n_sets, 0) + 1
            if len(s) == ways:
                s.pop(0)
            s.append(i)
    assert cache.hits > 0 and cache.misses > 0


def test_a_handles_filter_never_hides_a_row_it_holds() -> None:
    """Taking rows from a handle through its bit filter gives exactly what a plain
    membership test gives, with ids it holds, ids it does not and rows no longer needed."""
    rng = np.random.default_rng()
    for _ in range(20):
        held = np.unique(rng.integers(0, 1 << 40, int(rng.integers(30, 5_000))))
        handle = ReadAheadHandle(held, keep_rows=True, row_bytes=3)
        handle._set_ids(held, np.arange(held.size))
        rows = rng.integers(0, 256, (held.size, 3), dtype=np.uint8)
        others = rng.integers(0, 1 << 40, int(rng.integers(1, 20_000)))
        ids = np.unique(np.concatenate([rng.choice(held, held.size // 3), others]))
        need = rng.random(ids.size) < 0.8
        want_taken = need & np.isin(ids, held)
        filt = (handle.bits, handle.shift)
        assert kernels.cache.any_held(held, *filt, ids, need) == want_taken.any()
        out = np.zeros((ids.size, 3), dtype=np.uint8)
        still = need.copy()
        taken = kernels.cache.take_held(held, *filt, rows, ids, still, out)
        assert taken == want_taken.sum() > 0
        assert np.array_equal(still, need & ~want_taken)
        assert np.array_equal(out[want_taken], rows[np.searchsorted(held, ids[want_taken])])
        assert not out[~want_taken].any()


def test_every_kernel_has_its_one_signature_and_lookups_match_them(tmp_path: Path) -> None:
    """Kernels compile only their declared signature (a call with other types raises
    TypeError): lookups through every reader, with and without the RAM cache, with
    read-ahead handles and cold reads pass only the types declared."""
    weight, scale = random_table(5_000, 256)
    dram = create_table("dram", weight, scale)
    for read in reader_names():
        for ram in (0, 1 << 20):
            with create_table(
                "ssd", weight, scale, path=tmp_path / "t", read=read, ram_cache_bytes=ram
            ) as table:
                ids = torch.randint(0, 5_000, (64, 48))
                assert table.read_ahead(ids[:8]).wait(30)
                assert torch.equal(table.lookup(ids), dram.lookup(ids))
                table.drop_page_cache()
                assert torch.equal(table.lookup(ids[8:]), dram.lookup(ids[8:]))
    for module in kernels.SUBMODULES:
        for name, obj in vars(getattr(kernels, module)).items():
            if hasattr(obj, "signatures") and not name.startswith("_"):
                assert len(obj.signatures) == 1, f"{module}.{name}: {obj.signatures}"
