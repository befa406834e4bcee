"""The RAM row cache and the HBM hot-row cache: hit/miss accounting, bounds, LRU."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import torch

from engram.rows.set_assoc import MISS, SetAssociativeIndex
from engram.ssd.row_cache import RowCache
from engram.ssd.sysmem import mincore
from engram.tables import create_table
from engram.tables.hot_cache import HotRowCache
from test.ssd.helpers import random_table

ROWS, DIM = 20_000, 256
ROW_BYTES = DIM + DIM // 32


def _distinct(n: int, exclude: torch.Tensor | None = None) -> torch.Tensor:
    ids = torch.randperm(ROWS)
    if exclude is not None:
        ids = ids[~torch.isin(ids, exclude)]
    return ids[:n]


def test_ram_cache_counts_hits_and_misses(tmp_path: Path) -> None:
    weight, scale = random_table(ROWS, DIM)
    dram = create_table("dram", weight, scale)
    table = create_table("ssd", weight, scale, path=tmp_path / "t", ram_cache_bytes=8 << 20)
    first = _distinct(500)
    assert torch.equal(table.lookup(first.repeat(3)), dram.lookup(first.repeat(3)))
    stats = table.stats()
    assert (stats["ram_cache_hits"], stats["ram_cache_misses"]) == (0, 500)  # per distinct row
    assert torch.equal(table.lookup(first), dram.lookup(first))
    new = _distinct(200, exclude=first)
    mixed = torch.cat([first[:100], new])
    assert torch.equal(table.lookup(mixed), dram.lookup(mixed))
    stats = table.stats()
    assert (stats["ram_cache_hits"], stats["ram_cache_misses"]) == (600, 700)
    assert abs(stats["ram_cache_hit_ratio"] - 600 / 1300) < 1e-12
    assert table.counters.bytes_read == {"ssd": 700 * ROW_BYTES, "dram": 600 * ROW_BYTES}
    table.close()


def test_rows_from_read_ahead_count_as_ssd_and_ram_cache_hits_as_dram(tmp_path: Path) -> None:
    weight, scale = random_table(ROWS, DIM)
    dram = create_table("dram", weight, scale)
    table = create_table("ssd", weight, scale, path=tmp_path / "t", ram_cache_bytes=8 << 20)
    cached = _distinct(300)
    table.lookup(cached)  # now in the RAM cache
    ahead = _distinct(200, exclude=cached)
    assert table.read_ahead(ahead).wait(30)
    fresh = _distinct(50, exclude=torch.cat([cached, ahead]))
    both = torch.cat([cached[:100], ahead, fresh])
    before = dict(table.counters.bytes_read)
    assert torch.equal(table.lookup(both), dram.lookup(both))
    got = {k: v - before.get(k, 0) for k, v in table.counters.bytes_read.items()}
    assert got == {"ssd": 250 * ROW_BYTES, "dram": 100 * ROW_BYTES}
    assert table.stats()["read_ahead_hits"] == 200
    table.close()


def test_ram_cache_counts_lookups_and_the_read_ahead_apart_each_row_once(tmp_path: Path) -> None:
    """hits + misses == the distinct rows lookups looked for in the RAM cache; the
    read-ahead's own probes count in neither (a served ssd table once showed more misses
    than rows requested) but in their own hits and misses, prompts' and decode steps'."""
    weight, scale = random_table(ROWS, DIM)
    dram = create_table("dram", weight, scale)
    table = create_table("ssd", weight, scale, path=tmp_path / "t", ram_cache_bytes=8 << 20)
    probed = 0  # distinct rows of the lookups that reach the RAM cache
    # a prompt read ahead at admission, then looked up exactly: all from its handle
    prompt = torch.randint(0, ROWS, (320,))
    handles = [table.read_ahead(prompt)]
    assert handles[0].wait(30)
    assert torch.equal(table.lookup(prompt), dram.lookup(prompt))
    # decode steps read one step ahead, the last one never looked up
    steps = [torch.randint(0, ROWS, (16,)) for _ in range(5)]
    for step in steps:
        handles.append(table.read_ahead(step, urgent=True))
        assert handles[-1].wait(30)
    for step in steps[:-1]:
        assert torch.equal(table.lookup(step), dram.lookup(step))
    stats = table.stats()
    assert (stats["ram_cache_hits"], stats["ram_cache_misses"]) == (0, 0)
    # the read-ahead's own probes are counted apart, prompts' and decode steps': each
    # distinct row of a fill once, a hit where an earlier fill had read it
    assert (stats["ram_cache_prompt_ahead_hits"], stats["ram_cache_prompt_ahead_misses"]) == (
        0, prompt.unique().numel(),
    )  # fmt: skip
    seen, ahead_hits, ahead_misses = set(prompt.tolist()), 0, 0
    for step in steps:
        distinct = set(step.tolist())
        ahead_hits += len(distinct & seen)
        ahead_misses += len(distinct - seen)
        seen |= distinct
    assert (stats["ram_cache_decode_ahead_hits"], stats["ram_cache_decode_ahead_misses"]) == (
        ahead_hits, ahead_misses,
    )  # fmt: skip
    # rows the read-ahead read sit in the RAM cache: a lookup mixing handle rows, those
    # and fresh rows looks for the last two kinds there, each distinct row once
    held = torch.cat([prompt, *steps]).unique()
    fresh = _distinct(150, exclude=held)
    mixed = torch.cat([prompt[:40], fresh, fresh[:30], steps[0]])
    assert torch.equal(table.lookup(mixed), dram.lookup(mixed))
    probed += fresh.numel()
    for handle in handles:  # the handles go: their rows are in the RAM cache
        handle.release()
    again = torch.cat([prompt[torch.randperm(prompt.numel())[:100]], fresh])
    assert torch.equal(table.lookup(again.repeat(2)), dram.lookup(again.repeat(2)))
    probed += again.unique().numel()
    stats = table.stats()
    assert stats["ram_cache_hits"] + stats["ram_cache_misses"] == probed
    assert stats["ram_cache_misses"] == fresh.numel()  # read once, by the mixed lookup
    counters = table.counters.stats()
    assert stats["ram_cache_hits"] + stats["ram_cache_misses"] <= counters["unique_rows"]
    assert counters["unique_rows"] <= counters["rows_requested"]
    # the disk reads are counted apart, by who read
    assert stats["lookup_rows_read"] == fresh.numel()
    assert stats["ahead_rows_read"] == held.numel()
    table.close()


SSD_STATS = {
    "ram_cache_hit_ratio", "ram_cache_hits", "ram_cache_misses", "ram_cache_bytes",
    "read_ahead_hits", "read_ahead_bytes_held", "pages_requested", "io_errors",
    "lookup_rows_read", "ahead_rows_read",
    "lookup_read_seconds", "ahead_read_seconds", "handle_wait_seconds",
    "seeded_rows", "seed_seconds",
    "ram_cache_prompt_ahead_hits", "ram_cache_prompt_ahead_misses",
    "ram_cache_decode_ahead_hits", "ram_cache_decode_ahead_misses",
}  # fmt: skip


def test_stats_are_numbers_under_the_same_keys_with_or_without_a_ram_cache(
    tmp_path: Path,
) -> None:
    """What ``/metrics`` exports: every key always there, every value a float."""
    weight, scale = random_table(ROWS, DIM)
    for ram in (0, 1 << 20):
        with create_table("ssd", weight, scale, path=tmp_path / "t", ram_cache_bytes=ram) as t:
            ids = _distinct(300)
            t.lookup(ids)
            t.lookup(ids)
            stats = t.stats()
            assert set(stats) == SSD_STATS
            assert all(isinstance(v, float) for v in stats.values())
            assert stats["ram_cache_hits"] == (300.0 if ram else 0.0)
            assert stats["io_errors"] == 0.0


def test_ram_cache_stays_within_its_bound(tmp_path: Path) -> None:
    weight, scale = random_table(ROWS, DIM)
    dram = create_table("dram", weight, scale)
    capacity = 64 * ROW_BYTES
    table = create_table("ssd", weight, scale, path=tmp_path / "t", ram_cache_bytes=capacity)
    assert table.stats()["ram_cache_bytes"] <= capacity
    ids = _distinct(1000)
    for _ in range(2):
        assert torch.equal(table.lookup(ids), dram.lookup(ids))
    assert table.stats()["ram_cache_hits"] <= 64
    table.close()


def test_set_associative_index_evicts_the_least_recently_used() -> None:
    index = SetAssociativeIndex(capacity=4, ways=4)
    base = int(torch.randint(0, 1000, ()).item())
    ids = torch.arange(base, base + 4)
    slots = index.admit(ids)
    assert sorted(slots.tolist()) == [0, 1, 2, 3]
    index.probe(ids[[0, 2, 3]])  # ids[1] is now the least recently used
    newcomer = torch.tensor([base + 100])
    assert index.admit(newcomer).tolist() == [slots[1].item()]
    probed = index.probe(torch.cat([ids, newcomer]))
    assert probed[1].item() == MISS and (probed[[0, 2, 3, 4]] >= 0).all()
    # More new rows than ways in one call: the surplus is simply not cached.
    crowd = torch.arange(base + 200, base + 210)
    assert int((index.admit(crowd) >= 0).sum()) == 4


def test_hot_cache_in_front_of_dram_and_ssd(tmp_path: Path) -> None:
    weight, scale = random_table(ROWS, DIM)
    dram = create_table("dram", weight, scale)
    ssd = create_table("ssd", weight, scale, path=tmp_path / "t", hot_cache_bytes=1 << 20)
    assert isinstance(ssd, HotRowCache) and ssd.placement == "ssd"
    hot_dram = create_table("dram", weight, scale, hot_cache_bytes=1 << 20)
    assert isinstance(hot_dram, HotRowCache) and hot_dram.placement == "dram"
    # an HBM cache in front of an hbm table would only duplicate it
    assert not isinstance(create_table("hbm", weight, scale, hot_cache_bytes=1 << 20), HotRowCache)
    ids = _distinct(300)
    for table in (ssd, hot_dram):
        assert torch.equal(table.lookup(ids.view(3, 100)), dram.lookup(ids.view(3, 100)))
        again = torch.cat([ids[:120], _distinct(30, exclude=ids)])
        assert torch.equal(table.lookup(again), dram.lookup(again))
        stats = table.stats()
        assert (stats["hot_cache_hits"], stats["hot_cache_misses"]) == (120, 330)
        assert abs(stats["hot_cache_hit_ratio"] - 120 / 450) < 1e-12
        assert table.memory()["hbm"] == stats["hot_cache_bytes"] > 0
        assert table.counters.bytes_read["hbm"] == 120 * ROW_BYTES
    # Misses went through the wrapped ssd table, which counts its own reads.
    assert ssd.inner.counters.unique_rows == 330
    assert ssd.counters.bytes_read["ssd"] == 330 * ROW_BYTES
    ssd.close()


def test_putting_cached_rows_again_keeps_one_copy() -> None:
    from engram.ssd.row_cache import RowCache

    cache = RowCache(1024 * 8, 8, ways=8)
    ids = np.unique(np.random.default_rng().integers(0, 1000, 40))
    rows = np.random.default_rng().integers(1, 255, (ids.size, 8), dtype=np.uint8)
    every = np.arange(ids.size)
    cache.put(ids, rows, every)
    cache.put(ids, rows, every)  # a second reader of the same rows
    tags = cache.tags[cache.tags >= 0]
    assert tags.size == np.unique(tags).size == ids.size
    out = np.zeros_like(rows)
    need = np.ones(ids.size, dtype=bool)
    assert cache.take(ids, need, out, np.empty(ids.size, dtype=np.int64)) == (ids.size, 0)
    assert not need.any() and np.array_equal(out, rows)


def test_ram_cache_memory_is_resident_before_the_first_row_is_admitted() -> None:
    # NOTE: a page first written on the read path is a page fault per admitted row there
    cache = RowCache(int(np.random.default_rng().integers(24, 48)) << 20, ROW_BYTES)
    for array in (cache.rows, cache.stamps, cache.tags):
        start = -(-array.ctypes.data // mmap.PAGESIZE) * mmap.PAGESIZE
        end = (array.ctypes.data + array.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
        resident = mincore(start, end - start) & 1
        assert resident.size > 100 and resident.all(), (array.shape, resident.mean())
