"""The rows a cache starts with: a frequency profile's hottest rows of one table, and
which of them a set-associative cache holds at once (the ssd RAM cache and the HBM hot
cache are both seeded from them)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engram.errors import EngramTableError

# NOTE: rows per read and per cache call: 16 k rows are 4.1 MiB of 264-byte rows, long
# runs for the reader, and the cache's lock is held for one copy of them (~1 ms).
SEED_BATCH_ROWS = 16_384


@dataclass(frozen=True, eq=False)
class SeedRows:
    """The rows to seed a table's cache with: ``ids`` (int64, distinct, rows of this
    table), hottest first; ``name`` says whose they are in the log (layer, profile)."""

    ids: np.ndarray
    name: str

    def check(self, num_rows: int) -> None:
        """Raise naming the profile when ``ids`` are not 1-D int64 rows of a table of
        ``num_rows`` rows."""
        ids = self.ids
        if ids.ndim != 1 or ids.dtype != np.int64:
            raise EngramTableError(f"{self.name}: seed rows must be 1-D int64, got {ids.dtype}")
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= num_rows):
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise EngramTableError(
                f"{self.name}: row {bad:,} is outside this table's {num_rows:,} rows "
                "(a profile of another table?)"
            )


def fitting(ranked: np.ndarray, n_sets: int, ways: int) -> np.ndarray:
    """The rows of ``ranked`` (distinct, hottest first) a cache of ``n_sets`` sets of
    ``ways`` slots holds at once: per set, its ``ways`` hottest. Hottest first."""
    ranked = np.asarray(ranked, dtype=np.int64)
    sets = ranked % n_sets
    order = np.argsort(sets, kind="stable")  # NOTE: stable: each set's rows stay ranked
    by_set = sets[order]
    starts = np.flatnonzero(np.r_[True, by_set[1:] != by_set[:-1]])
    place = np.arange(ranked.size) - np.repeat(starts, np.diff(np.r_[starts, ranked.size]))
    keep = np.zeros(ranked.size, dtype=bool)
    keep[order] = place < ways
    return ranked[keep]
