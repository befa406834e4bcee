"""An SSD table seeded from a ranked list of rows: its RAM cache holds the hottest rows
that fit, read from the file in the background, bit-identical to the table's rows."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from engram.errors import EngramTableError
from engram.rows.seed_rows import SeedRows, fitting
from engram.ssd.row_cache import RowCache
from engram.tables import create_table
from test.ssd.helpers import random_table

ROWS, DIM = 30_000, 64
ROW_BYTES = DIM + DIM // 32


def _ranked(n: int) -> np.ndarray:
    return np.random.default_rng().permutation(ROWS)[:n].astype(np.int64)


def _tables(tmp_path: Path, seed: SeedRows | None, cache_rows: int):
    weight, scale = random_table(ROWS, DIM)
    dram = create_table("dram", weight, scale)
    ssd = create_table(
        "ssd", weight, scale, path=tmp_path / "t", ram_cache_bytes=cache_rows * ROW_BYTES,
        seed=seed,
    )  # fmt: skip
    return dram, ssd


def test_fitting_keeps_each_sets_hottest_rows() -> None:
    n_sets, ways = 50, 4
    ranked = _ranked(2_000)
    kept = fitting(ranked, n_sets, ways)
    rank = {int(r): i for i, r in enumerate(ranked)}
    assert [rank[int(r)] for r in kept] == sorted(rank[int(r)] for r in kept)  # hottest first
    for home in range(n_sets):
        in_set = [int(r) for r in ranked if r % n_sets == home]
        assert [int(r) for r in kept if r % n_sets == home] == in_set[:ways]
    assert kept.size == n_sets * ways  # 2,000 rows overfill every set


def test_a_seeded_table_serves_its_top_rows_from_ram(tmp_path: Path) -> None:
    cache_rows = 4_000
    ranked = _ranked(ROWS)  # every row: far more than fit
    dram, ssd = _tables(tmp_path, SeedRows(ranked, "test table"), cache_rows)
    assert ssd.wait_seeded(60)
    cache = RowCache(cache_rows * ROW_BYTES, ROW_BYTES)
    fit = fitting(ranked, cache.n_sets, cache.ways)
    stats = ssd.stats()
    assert stats["seeded_rows"] == fit.size == cache.capacity  # every slot filled
    assert stats["seed_seconds"] > 0
    assert stats["lookup_rows_read"] == 0
    ids = torch.from_numpy(fit[torch.randperm(fit.size).numpy()])
    assert torch.equal(ssd.lookup(ids), dram.lookup(ids))  # bit-identical rows
    after = ssd.stats()
    assert after["lookup_rows_read"] == 0  # none read from the disk
    assert after["ram_cache_hits"] == fit.size
    # a row of the profile that did not fit its set is read from the file
    left_out = torch.from_numpy(np.setdiff1d(ranked, fit)[:10])
    assert torch.equal(ssd.lookup(left_out), dram.lookup(left_out))
    assert ssd.stats()["lookup_rows_read"] == 10
    ssd.close()


def test_seeding_fills_only_what_fits_and_unseeded_tables_read_from_disk(
    tmp_path: Path,
) -> None:
    ranked = _ranked(500)  # a short profile: fewer rows than the cache holds
    dram, ssd = _tables(tmp_path / "a", SeedRows(ranked, "short"), 8_000)
    assert ssd.wait_seeded(60)
    cache = RowCache(8_000 * ROW_BYTES, ROW_BYTES)
    assert ssd.stats()["seeded_rows"] == fitting(ranked, cache.n_sets, cache.ways).size
    ids = torch.from_numpy(fitting(ranked, cache.n_sets, cache.ways))
    weight, scale = random_table(ROWS, DIM)  # another table, not seeded
    plain = create_table("ssd", weight, scale, path=tmp_path / "b", ram_cache_bytes=8 << 20)
    assert plain.wait_seeded(0)
    assert plain.stats()["seeded_rows"] == 0
    plain.lookup(ids)
    assert plain.stats()["lookup_rows_read"] == ids.numel()
    assert torch.equal(ssd.lookup(ids), dram.lookup(ids))
    assert ssd.stats()["lookup_rows_read"] == 0
    ssd.close()
    plain.close()


def test_seeding_never_evicts_rows_lookups_admitted() -> None:
    weight, scale = random_table(ROWS, DIM)
    packed = np.concatenate([weight.numpy(), scale.numpy()], axis=1)
    cache = RowCache(64 * ROW_BYTES, ROW_BYTES)
    traffic = np.sort(_ranked(40))
    cache.put(traffic, packed[traffic], np.arange(traffic.size))

    def held() -> np.ndarray:
        out = np.empty((traffic.size, ROW_BYTES), np.uint8)
        need = np.ones(traffic.size, dtype=bool)
        cache.take(traffic, need, out, np.empty(traffic.size, np.int64), by=None)
        assert np.array_equal(out[~need], packed[traffic[~need]])
        return traffic[~need]

    before = held()
    assert before.size > 0
    ranked = np.setdiff1d(_ranked(3_000), traffic)
    ranked = ranked[np.random.default_rng().permutation(ranked.size)]
    first = cache.reserve_stamps(ranked.size)
    stamps = first + np.arange(ranked.size, dtype=np.int64)
    order = np.argsort(ranked)
    seeded = cache.seed(ranked[order], packed[ranked[order]], stamps[order])
    assert seeded == cache.capacity - before.size  # only the empty slots
    assert np.array_equal(held(), before)  # every row the lookups admitted stays


def test_the_coldest_seeded_row_of_a_set_is_evicted_first(tmp_path: Path) -> None:
    cache_rows = 64  # 8 sets of 8 ways
    ranked = _ranked(ROWS)
    dram, ssd = _tables(tmp_path, SeedRows(ranked, "lru"), cache_rows)
    assert ssd.wait_seeded(60)
    n_sets = cache_rows // RowCache.WAYS
    home = int(ranked[0]) % n_sets
    in_set = [int(r) for r in ranked if r % n_sets == home]
    seeded, newcomer = in_set[:8], in_set[8]
    assert torch.equal(ssd.lookup(torch.tensor([newcomer])), dram.lookup(torch.tensor([newcomer])))
    assert ssd.stats()["lookup_rows_read"] == 1  # admitted: one seeded row of its set goes
    read = ssd.stats()["lookup_rows_read"]
    ssd.lookup(torch.tensor(seeded[:7]))  # the seven hottest stayed
    assert ssd.stats()["lookup_rows_read"] == read
    ssd.lookup(torch.tensor(seeded[7:]))  # the coldest was evicted
    assert ssd.stats()["lookup_rows_read"] == read + 1
    ssd.close()


def test_lookups_while_seeding_get_the_tables_rows(tmp_path: Path) -> None:
    ranked = _ranked(ROWS)
    dram, ssd = _tables(tmp_path, SeedRows(ranked, "busy"), ROWS)
    rng = np.random.default_rng()
    lookups = 0
    while not ssd.wait_seeded(0) or lookups < 5:
        ids = torch.from_numpy(rng.integers(0, ROWS, rng.integers(1, 3000)))
        assert torch.equal(ssd.lookup(ids), dram.lookup(ids))
        lookups += 1
    assert 0 < ssd.stats()["seeded_rows"] <= ROWS
    everything = torch.arange(ROWS)
    assert torch.equal(ssd.lookup(everything), dram.lookup(everything))
    ssd.close()


def test_closing_a_table_while_it_seeds_stops_the_thread(tmp_path: Path) -> None:
    _, ssd = _tables(tmp_path, SeedRows(_ranked(ROWS), "closing"), ROWS)
    ssd.close()
    assert ssd.wait_seeded(0)  # ended (stopped early or done), nothing left running
    assert ssd.stats()["seeded_rows"] <= ROWS


def test_rows_outside_the_table_are_refused_in_one_line(tmp_path: Path) -> None:
    ranked = _ranked(100)
    ranked[random.randrange(100)] = ROWS + random.randrange(1, 1000)
    with pytest.raises(EngramTableError) as exc:
        _tables(tmp_path, SeedRows(ranked, "layer 7 (profile p.npz)"), 1000)
    message = str(exc.value)
    assert "\n" not in message
    assert message == (
        f"layer 7 (profile p.npz): row {int(ranked.max()):,} is outside this table's "
        f"{ROWS:,} rows (a profile of another table?)"
    )


@pytest.mark.parametrize("placement", ["dram", "ssd"])
def test_a_seeded_hot_cache_serves_its_top_rows_bit_exact(tmp_path: Path, placement) -> None:
    """The hot cache in front of a dram or ssd table (no RAM cache) starts with the
    profile's hottest rows that fit; every lookup, of those rows or of random ones,
    gives the unseeded table's bits."""
    weight, scale = random_table(ROWS, DIM)
    ranked = _ranked(ROWS)  # every row: far more than fit
    hot = {"hot_cache_bytes": random.randint(2_000, 4_000) * DIM * 2}
    ssd = {"path": tmp_path / "t"} if placement == "ssd" else {}
    seeded = create_table(placement, weight, scale, **hot, **ssd, seed=SeedRows(ranked, "t"))
    unseeded = create_table("dram", weight, scale, **hot)
    plain = create_table("dram", weight, scale)
    fit = fitting(ranked, seeded.index.n_sets, seeded.index.ways)
    stats = seeded.stats()
    assert stats["hot_cache_seeded_rows"] == fit.size == seeded.index.capacity
    assert stats["hot_cache_hits"] == stats["hot_cache_misses"] == 0  # seeding is no lookup
    assert seeded.counters.stats()["lookups"] == 0
    ids = torch.from_numpy(fit[torch.randperm(fit.size).numpy()])
    assert torch.equal(seeded.lookup(ids), plain.lookup(ids))
    stats = seeded.stats()
    assert (stats["hot_cache_hits"], stats["hot_cache_misses"]) == (fit.size, 0)
    if placement == "ssd":
        assert stats["lookup_rows_read"] == 0  # none read from the disk
    for _ in range(3):
        ids = torch.randint(0, ROWS, (random.randint(1, 5_000),))
        want = plain.lookup(ids)
        assert torch.equal(seeded.lookup(ids), want) and torch.equal(unseeded.lookup(ids), want)
    for table in (seeded, unseeded, plain):
        table.close()


def test_a_hot_cache_seed_outside_the_table_is_refused() -> None:
    weight, scale = random_table(ROWS, DIM)
    with pytest.raises(EngramTableError, match=f"bad: seed rows outside this table's {ROWS:,}"):
        create_table(
            "dram", weight, scale, hot_cache_bytes=1 << 20,
            seed=SeedRows(np.array([5, ROWS], dtype=np.int64), "bad"),
        )  # fmt: skip


def test_the_coldest_seeded_row_of_a_hot_cache_set_is_evicted_first() -> None:
    weight, scale = random_table(ROWS, DIM)
    # one set of 8 ways; the coldest row is the largest id, the way admit gives last
    ranked = np.sort(_ranked(8))
    table = create_table(
        "dram", weight, scale, hot_cache_bytes=8 * DIM * 2, seed=SeedRows(ranked, "one set")
    )
    assert (table.index.n_sets, table.stats()["hot_cache_seeded_rows"]) == (1, 8)
    other = np.setdiff1d(np.arange(ROWS), ranked)[:1]
    table.lookup(torch.from_numpy(other))  # a miss, admitted in place of the coldest
    table.lookup(torch.from_numpy(ranked[:7]))
    table.lookup(torch.from_numpy(ranked[7:]))
    assert (table.stats()["hot_cache_hits"], table.stats()["hot_cache_misses"]) == (7, 2)
