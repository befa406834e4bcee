"""The RAM row cache in front of an ssd table's file, as a lookup and the read-ahead
thread ask it: rows the cache holds first, the rest from the file and then admitted.

Each thread (a lookup's, the read-ahead's) works in its own scratch arrays, grown as
needed and reused: ``need`` flags (set: the row is still to be found), the positions the
cache missed, and the ids read from the file. Read time and rows read are counted apart
by who read: a lookup itself (``lookup``) or the read-ahead thread (``ahead``).
"""

from __future__ import annotations

import threading
import time

import numpy as np

from engram.ssd.readers import ALL_ROWS
from engram.ssd.row_cache import RowCache
from engram.tables.ssd.table_file import TableFile


class RamFront:
    """``cache`` (``None``: no RAM cache) in front of ``file``."""

    def __init__(self, cache: RowCache | None, file: TableFile):
        self.cache = cache
        self.file = file
        self._scratch = threading.local()
        # NOTE: seconds, cumulative: disk reads a lookup made itself ("lookup") or the
        # read-ahead thread made ("ahead").
        self.read_seconds = {"lookup": 0.0, "ahead": 0.0}
        self.rows_read = {"lookup": 0, "ahead": 0}  # NOTE: rows asked of the file, the same way

    def need(self, n: int) -> np.ndarray:
        """This thread's ``need`` flags for ``n`` rows, all set."""
        held = getattr(self._scratch, "need", None)
        if held is None or held.size < n:
            held = self._scratch.need = np.empty(max(n, 1024), dtype=bool)
            self._scratch.missed = np.empty(held.size, dtype=np.int64)
            self._scratch.ids = np.empty(held.size, dtype=np.int64)
        need = held[:n]
        need[:] = True
        return need

    def from_cache(
        self, ids: np.ndarray, out: np.ndarray, need: np.ndarray, *, by: str = "lookup"
    ) -> tuple[int, np.ndarray]:
        """Rows of sorted distinct ``ids`` still ``need``-ed (:meth:`need`'s flags) that
        the RAM cache holds into ``out``, their ``need`` cleared. Returns (hits, positions
        in ``ids`` of the rows still needed, ``ALL_ROWS`` for all of them). ``by``: whose
        hits and misses they count as (``engram.ssd.row_cache.PROBERS``)."""
        if self.cache is not None:
            scratch = self._scratch
            hits, missed = self.cache.take(ids, need, out, scratch.missed[: ids.size], by=by)
            return hits, scratch.missed[:missed]
        if need.all():
            return 0, ALL_ROWS
        return 0, np.flatnonzero(need)  # NOTE: only after read-ahead handles gave rows

    def from_file(
        self, ids: np.ndarray, out: np.ndarray, at: np.ndarray, *, by: str = "lookup"
    ) -> None:
        """The rows of ``ids[at]`` (all of them for ``ALL_ROWS``) from the file into
        ``out`` (row ``i`` for ``ids[i]``; read time counted under ``by``), admitted to
        the RAM cache."""
        miss = ids if at is ALL_ROWS else np.take(ids, at, out=self._scratch.ids[: at.size])
        if miss.size == 0:
            return
        started = time.perf_counter()
        self.file.read(miss, out, at)
        self.read_seconds[by] += time.perf_counter() - started
        self.rows_read[by] += miss.size
        if self.cache is not None:
            self.cache.put(miss, out, at)

    def warm(self, ids: np.ndarray) -> None:
        """Bring the pages of ``ids``' rows into the page cache (the read-ahead's reads
        past its budget), timed as the read-ahead's."""
        started = time.perf_counter()
        self.file.reader.warm(ids)
        self.read_seconds["ahead"] += time.perf_counter() - started
