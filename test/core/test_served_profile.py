"""The profile a server writes of what it served (``--engram-profile-out``): lookups'
row ids counted in bounded memory (``RowTally``), written in the profile format with the
served hash's identity (``ProfileUpkeep``) once the lookups settle and at close,
atomically even when the writer is killed mid-write."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from engram.errors import EngramInputError
from engram.profile import HashIdentity, ProfileUpkeep, RowProfile, RowTally, TableIdentity
from engram.profile.merge import merge_profiles

ROOT = Path(__file__).resolve().parents[2]


def _identity(rows: dict[int, int]) -> HashIdentity:
    tables = tuple(TableIdentity(layer, n, f"{layer:016x}") for layer, n in sorted(rows.items()))
    return HashIdentity("ab" * 8, 3, 4, 0, tables)


def _zipf_ids(rng: np.random.Generator, num_rows: int, size: int) -> np.ndarray:
    return (rng.zipf(1.3, size=size) - 1) % num_rows


def _true_counts(batches: list[np.ndarray], num_rows: int) -> np.ndarray:
    return np.bincount(np.concatenate(batches), minlength=num_rows) if batches else np.zeros(0)


def test_a_tally_counts_every_id_of_a_table_smaller_than_its_capacity() -> None:
    rng = np.random.default_rng()
    num_rows = int(rng.integers(100, 50_000))
    tally = RowTally(num_rows)
    batches = []
    for _ in range(int(rng.integers(20, 80))):
        ids = _zipf_ids(rng, num_rows, int(rng.integers(0, 3000))).reshape(-1, 1)
        batches.append(ids.reshape(-1))
        tally.add(torch.from_numpy(ids) if rng.random() < 0.5 else ids)
        if rng.random() < 0.3:
            tally.fold()
    rows, counts = tally.snapshot()
    truth = _true_counts(batches, num_rows)
    assert np.array_equal(rows, np.flatnonzero(truth))
    assert np.array_equal(counts, truth[rows])
    assert tally.counted == sum(b.size for b in batches) and tally.dropped == 0


def test_a_full_tally_keeps_its_most_counted_rows_exactly() -> None:
    """A map of ``capacity`` rows drops all but the most counted half when it fills: the
    hot rows (in every lookup from the first on) keep exact counts, nothing is lost
    unaccounted, and the map never passes its capacity."""
    rng = np.random.default_rng()
    num_rows, capacity = 1_000_000, 512
    hot = rng.choice(num_rows, size=40, replace=False)
    tally = RowTally(num_rows, capacity=capacity)
    batches = []
    for _ in range(60):
        ids = np.r_[np.repeat(hot, 3), rng.integers(0, num_rows, size=int(rng.integers(50, 400)))]
        batches.append(ids)
        tally.add(ids)
        tally.fold()
        assert tally.snapshot()[0].size <= capacity
    rows, counts = tally.snapshot()
    truth = np.bincount(np.concatenate(batches), minlength=num_rows)
    assert tally.dropped > 0
    assert counts.sum() + tally.dropped == truth.sum() == tally.counted
    assert np.all(counts <= truth[rows])  # a row dropped once counts again from then on
    kept = dict(zip(rows.tolist(), counts.tolist(), strict=True))
    assert all(kept[h] == truth[h] for h in hot.tolist())


def test_lookups_on_many_threads_while_folding_lose_nothing() -> None:
    rng = np.random.default_rng()
    num_rows = 20_000
    tally = RowTally(num_rows)
    per_thread = [[_zipf_ids(rng, num_rows, 500) for _ in range(200)] for _ in range(4)]
    done = threading.Event()

    def folder() -> None:
        while not done.is_set():
            tally.fold()

    def lookups(batches: list[np.ndarray]) -> None:
        for ids in batches:
            tally.add(ids)

    threads = [threading.Thread(target=lookups, args=(b,)) for b in per_thread]
    fold_thread = threading.Thread(target=folder)
    fold_thread.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    fold_thread.join()
    rows, counts = tally.snapshot()
    truth = _true_counts([ids for b in per_thread for ids in b], num_rows)
    assert np.array_equal(counts, truth[rows]) and counts.sum() == truth.sum()


def _wait_for(predicate, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_the_upkeep_writes_the_layers_rows_once_the_lookups_settle(tmp_path) -> None:
    """Two layers, one served whole, one as two TP shards (each from its ``row_start``):
    the file holds each layer's rows as rows of the whole layer, with their counts."""
    rng = np.random.default_rng()
    sizes = {3: int(rng.integers(1000, 9000)), 7: int(rng.integers(1000, 9000))}
    identity = _identity(sizes)
    path = tmp_path / "served.npz"
    upkeep = ProfileUpkeep(path, identity, top=10**6, settle_s=0.3, fold_s=0.05)
    cut = int(rng.integers(1, sizes[7]))
    tallies = {
        (3, 0): upkeep.tally(3, 0, sizes[3]),
        (7, 0): upkeep.tally(7, 0, cut),
        (7, cut): upkeep.tally(7, cut, sizes[7] - cut),
    }
    truth = {layer: np.zeros(n, dtype=np.int64) for layer, n in sizes.items()}

    def serve(rounds: int) -> None:
        for _ in range(rounds):
            (layer, start), tally = random.choice(list(tallies.items()))
            ids = _zipf_ids(rng, tally.num_rows, int(rng.integers(1, 2000)))
            tally.add(ids)
            np.add.at(truth[layer], ids + start, 1)

    def written_equals_truth() -> bool:
        if not path.exists():
            return False
        profile = RowProfile.load(path)
        return all(
            np.array_equal(profile.counts[layer], truth[layer][profile.rows[layer]])
            and profile.counts[layer].sum() == truth[layer].sum()
            for layer in sizes
        )

    serve(50)
    _wait_for(written_equals_truth)
    first = RowProfile.load(path)
    assert first.identity == identity and first.top == 10**6
    assert first.corpus == {
        "served_rows": sum(t.sum() for t in truth.values()),
        "dropped_counts": 0,
    }
    writes = upkeep.writes
    time.sleep(0.6)
    assert upkeep.writes == writes  # nothing new, nothing written
    serve(30)
    _wait_for(written_equals_truth)
    serve(10)
    upkeep.close()  # the last counts, written at once
    assert written_equals_truth()
    assert not [p for p in tmp_path.iterdir() if p.name != path.name]  # no temporary left
    with pytest.raises(EngramInputError, match=r"no table for layer 5 \(it profiles layers 3, 7\)"):
        upkeep.tally(5, 0, 10)


def test_the_ranks_files_merge_into_the_whole_layers_profile(tmp_path) -> None:
    """Each TP rank writes its own shard's rows (its own file); merged, they are the
    profile one process serving the whole table writes."""
    rng = np.random.default_rng()
    rows = int(rng.integers(2000, 9000))
    identity = _identity({1: rows})
    cut = int(rng.integers(1, rows))
    whole = ProfileUpkeep(tmp_path / "whole.npz", identity, top=300)
    ranks = [ProfileUpkeep(tmp_path / f"p.tp{r}of2.npz", identity, top=10**6) for r in range(2)]
    tallies = [ranks[0].tally(1, 0, cut), ranks[1].tally(1, cut, rows - cut)]
    whole_tally = whole.tally(1, 0, rows)
    for _ in range(40):
        ids = _zipf_ids(rng, rows, int(rng.integers(1, 3000)))
        whole_tally.add(ids)
        for rank, (start, stop) in enumerate([(0, cut), (cut, rows)]):
            tallies[rank].add(ids[(ids >= start) & (ids < stop)] - start)
    for upkeep in (whole, *ranks):
        upkeep.close()
    merged = merge_profiles([tmp_path / "p.tp0of2.npz", tmp_path / "p.tp1of2.npz"], top=300)
    expected = RowProfile.load(tmp_path / "whole.npz")
    assert np.array_equal(merged.rows[1], expected.rows[1])
    assert np.array_equal(merged.counts[1], expected.counts[1])


_WRITER = """
import sys, numpy as np
from engram.profile import HashIdentity, RowProfile, TableIdentity
identity = HashIdentity("ab" * 8, 3, 4, 0, (TableIdentity(0, 1 << 22, "0" * 16),))
rng = np.random.default_rng()
for version in range(1, 10**6):
    rows = rng.choice(1 << 22, size=400_000, replace=False)
    counts = np.full(rows.size, version)
    RowProfile(identity, rows.size, {0: rows}, {0: counts}, {"version": version}).save(sys.argv[1])
    print(version, flush=True)
"""


def test_a_writer_killed_mid_write_leaves_a_whole_profile(tmp_path) -> None:
    """A process writing 6 MB profiles over one file, SIGKILLed at random moments: the
    file always loads, as one version whole (every count that version's)."""
    path = tmp_path / "p.npz"
    for _ in range(3):
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        proc.stdout.readline()  # one version written
        time.sleep(random.uniform(0.0, 0.5))
        proc.kill()
        proc.wait()
        profile = RowProfile.load(path)
        version = profile.corpus["version"]
        assert np.all(profile.counts[0] == version) and profile.rows[0].size == 400_000
