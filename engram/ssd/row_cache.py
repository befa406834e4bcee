"""The bounded RAM cache of hot rows in front of an SSD table (``ram_cache_bytes``).

Holds rows (``row_bytes`` opaque bytes each) in plain host memory in a ``WAYS``-way
set-associative layout with LRU replacement inside each set
(:mod:`engram.ssd.kernels.cache`). A lookup makes one pass that copies its hits out
(:meth:`RowCache.take`) and, once the rest is read from the file, one pass that admits
them (:meth:`RowCache.put`). A seed profile fills empty slots ahead of traffic
(:meth:`RowCache.seed`, :mod:`engram.tables.ssd.seeding`). Hits and misses are counted per
distinct row of a probe, apart by who probed (:data:`PROBERS`): a lookup, or a read-ahead
fill of a prompt (at admission) or of a decode step. The hits and misses of a table's
lookups add up to the rows they looked up here; a read-ahead fill probes before it reads
from the disk, and a lookup then takes those rows from its handle without asking the
cache again (or, if the handle is still reading, asks for them too).
"""

from __future__ import annotations

import threading

import numpy as np

from engram.errors import EngramTableError
from engram.ssd import kernels
from engram.ssd.kernels.constants import MISS

# who probes the cache, counted apart (``RowCache.take``'s ``by``): a table's lookups, its
# read-ahead of a prompt at admission, its read-ahead of a decode step (urgent handles)
PROBERS = ("lookup", "prompt_ahead", "decode_ahead")


class RowCache:
    WAYS = 8

    def __init__(self, capacity_bytes: int, row_bytes: int, *, ways: int = WAYS):
        capacity = capacity_bytes // row_bytes
        if capacity < 1:
            raise EngramTableError(f"a row cache needs room for at least one row, got {capacity}")
        self.ways = min(ways, capacity)
        n_sets = capacity // self.ways
        self.tags = np.full((n_sets, self.ways), MISS, dtype=np.int64)
        # NOTE: np.full, not np.zeros: a large np.zeros is calloc'd pages that the kernel
        # maps on first write, so every first fill of a slot took a page fault on the read
        # path (~12 us per admitted row in a fresh server, more than its disk read's CPU);
        # np.full writes every page now, once, at start.
        self.stamps = np.full((n_sets, self.ways), 0, dtype=np.int64)
        self.rows = np.full((n_sets * self.ways, row_bytes), 0, dtype=np.uint8)
        self.probes = {by: [0, 0] for by in PROBERS}  # hits, misses
        self._clock = 1  # NOTE: advanced by each call's row count; empty slots keep 0
        self._lock = threading.Lock()

    @property
    def capacity(self) -> int:
        return self.rows.shape[0]

    @property
    def n_sets(self) -> int:
        return self.tags.shape[0]

    @property
    def nbytes(self) -> int:
        return self.rows.nbytes

    @property
    def hits(self) -> int:
        """Distinct rows of lookups the cache held."""
        return self.probes["lookup"][0]

    @property
    def misses(self) -> int:
        """Distinct rows of lookups the cache did not hold."""
        return self.probes["lookup"][1]

    @property
    def hit_ratio(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def take(
        self,
        ids: np.ndarray,
        need: np.ndarray,
        out: np.ndarray,
        missed: np.ndarray,
        *,
        by: str | None = "lookup",
    ) -> tuple[int, int]:
        """Copy the cached rows of distinct ``ids`` still ``need``-ed into ``out`` (row
        ``i`` for ``ids[i]``) and clear their ``need``; the positions of the others go
        to ``missed`` (room for ``len(ids)``). Returns (hits, misses), added to the
        counts of ``by`` (one of :data:`PROBERS`; ``None``: counted nowhere)."""
        with self._lock:
            hits, misses = kernels.cache.take(
                self.tags, self.stamps, self._clock, self.rows, ids, need, out, missed
            )
            self._clock += ids.size
            if by is not None:
                counts = self.probes[by]
                counts[0] += hits
                counts[1] += misses
        return hits, misses

    def put(self, ids: np.ndarray, source: np.ndarray, at: np.ndarray) -> None:
        """Admit the rows of distinct ``ids`` (``source[at[j]]`` for ``ids[j]``)."""
        with self._lock:
            kernels.cache.admit(self.tags, self.stamps, self._clock, self.rows, ids, source, at)
            self._clock += ids.size

    def reserve_stamps(self, n: int) -> int:
        """The first of ``n`` clock values no other call will stamp (for :meth:`seed`)."""
        with self._lock:
            first = self._clock
            self._clock += n
        return first

    def seed(self, ids: np.ndarray, rows: np.ndarray, stamps: np.ndarray) -> int:
        """Cache the rows of distinct ``ids`` (``rows[j]`` for ``ids[j]``, stamped
        ``stamps[j]``, from :meth:`reserve_stamps`) in empty slots only: a row lookups
        admitted is never evicted for one. Returns the rows cached."""
        with self._lock:
            return kernels.cache.seed(self.tags, self.stamps, self.rows, ids, rows, stamps)

    def stats(self) -> dict[str, float]:
        out = {
            "ram_cache_bytes": self.nbytes,
            "ram_cache_hits": self.hits,
            "ram_cache_misses": self.misses,
            "ram_cache_hit_ratio": self.hit_ratio,
        }
        for by in PROBERS[1:]:
            out[f"ram_cache_{by}_hits"], out[f"ram_cache_{by}_misses"] = self.probes[by]
        return out
