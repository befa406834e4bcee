"""Seeding an SSD table's RAM row cache from a frequency profile, in the background.

A profile (:mod:`engram.profile`) ranks a table's rows by how often a corpus looks them
up (:class:`~engram.rows.seed_rows.SeedRows`). When the table opens, a thread picks the
hottest rows that fit the cache (:func:`~engram.rows.seed_rows.fitting`: the cache is set-associative, so at most ``ways`` rows of one set,
the hottest of them), reads them in file order (sorted ids, :data:`SEED_BATCH_ROWS` at a
time, through the table's reader: every block is checked as on any read) and puts them
into empty slots of the cache (:meth:`RowCache.seed`) while the table serves lookups.
The hottest rows get the newest stamps, so the LRU evicts the coldest seeded rows first.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import numpy as np

from engram.errors import EngramTableError
from engram.files import MIB
from engram.rows.seed_rows import SEED_BATCH_ROWS, SeedRows, fitting
from engram.ssd.row_cache import RowCache
from engram.tables.options import TableOptions
from engram.tables.ssd.ram_front import RamFront

logger = logging.getLogger(__name__)


def start_seeding(
    options: TableOptions, front: RamFront, num_rows: int, row_bytes: int
) -> Seeder | None:
    """The thread seeding ``front``'s RAM cache with ``options.seed`` (checked), or
    ``None``: no seed, or no RAM cache to seed (the hot cache seeds itself)."""
    seed = options.seed
    if seed is None:
        return None
    seed.check(num_rows)
    if front.cache is None:
        if not options.hot_cache_capacity:
            logger.warning("%s: not seeded: the table has no RAM cache or hot cache", seed.name)
        return None
    return Seeder(seed, front.cache, front.file.read, row_bytes)


def seed_plan(ranked: np.ndarray, cache: RowCache) -> tuple[np.ndarray, np.ndarray]:
    """What seeding ``cache`` with ``ranked`` (distinct rows, hottest first) writes: the
    rows that fit (:func:`fitting`) in file order, and the stamp of each (reserved from
    the cache's clock), for :meth:`RowCache.seed` in any slices of that order."""
    chosen = fitting(ranked, cache.n_sets, cache.ways)
    first = cache.reserve_stamps(chosen.size)
    # NOTE: the hottest row gets the newest stamp, so the LRU evicts the coldest first.
    stamps = first + np.arange(chosen.size - 1, -1, -1, dtype=np.int64)
    order = np.argsort(chosen)  # file order
    return chosen[order], stamps[order]


class Seeder:
    """One thread that seeds ``cache`` with ``seed``'s rows, read by ``read(ids, out)``
    (sorted distinct ids into uint8 rows ``out``). ``rows`` and ``seconds`` grow as it
    goes; :meth:`wait` until done, :meth:`stop` to end it early."""

    def __init__(
        self,
        seed: SeedRows,
        cache: RowCache,
        read: Callable[[np.ndarray, np.ndarray], None],
        row_bytes: int,
    ):
        self.rows = 0  # rows put into the cache
        self.seconds = 0.0  # since the thread started, until it ended
        self._seed, self._cache, self._read, self._row_bytes = seed, cache, read, row_bytes
        self._stopping = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engram-seed", daemon=True)
        self._thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until seeding ended; True if it did."""
        return self._done.wait(timeout)

    def stop(self) -> None:
        """End seeding after the batch it is reading (the table is closing)."""
        self._stopping.set()
        self._thread.join()

    def _run(self) -> None:
        started = time.perf_counter()
        try:
            self._fill(started)
        except EngramTableError as err:  # NOTE: an I/O error, a failed block, a changed file
            # a lookup that needs these rows reads (and reports) them itself
            logger.warning("%s: seeding the RAM cache stopped: %s", self._seed.name, err)
        finally:
            self.seconds = time.perf_counter() - started
            self._done.set()
        logger.info(
            "%s: seeded %d rows (%.1f MiB) into the ssd RAM cache in %.2f s",
            self._seed.name,
            self.rows,
            self.rows * self._row_bytes / MIB,
            self.seconds,
        )

    def _fill(self, started: float) -> None:
        ids, stamps = seed_plan(self._seed.ids, self._cache)
        out = np.empty((min(SEED_BATCH_ROWS, max(ids.size, 1)), self._row_bytes), np.uint8)
        for start in range(0, ids.size, SEED_BATCH_ROWS):
            if self._stopping.is_set():
                return
            part = ids[start : start + SEED_BATCH_ROWS]
            self._read(part, out[: part.size])
            self.rows += self._cache.seed(part, out[: part.size], stamps[start : start + part.size])
            self.seconds = time.perf_counter() - started
