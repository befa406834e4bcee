"""The bounded RAM cache of hot rows in front of an SSD table (``ram_cache_bytes``).

Holds packed FP8 rows (``row_bytes`` each) in plain host memory; lookups copy hits into
the bounce buffer and insert what they read from the file. Hits and misses are counted
per distinct row of a lookup.
"""

from __future__ import annotations

import threading

import numpy as np
import torch

from engram.ssd.set_assoc import SetAssociativeIndex


class RowCache:
    WAYS = 8

    def __init__(self, capacity_bytes: int, row_bytes: int, *, ways: int = WAYS):
        self.index = SetAssociativeIndex(max(1, capacity_bytes // row_bytes), ways)
        # NOTE: zeros, not empty: the pages are touched now, once, instead of one page
        # fault per row the first time each slot is filled, on the read path.
        self.rows = torch.zeros((self.index.capacity, row_bytes), dtype=torch.uint8, device="cpu")
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        return self.rows.numel()

    @property
    def hit_ratio(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def take(self, ids: np.ndarray, out: torch.Tensor) -> np.ndarray:
        """Copy cached rows of distinct ``ids`` into ``out``; return the hit mask."""
        with self._lock:
            slots = self.index.probe(torch.from_numpy(ids))
            hit = slots >= 0
            if bool(hit.any()):
                out[hit] = self.rows[slots[hit]]
            n_hit = int(hit.sum())
            self.hits += n_hit
            self.misses += len(ids) - n_hit
        return hit.numpy()

    def put(self, ids: np.ndarray, rows: torch.Tensor) -> None:
        """Insert rows of distinct ``ids`` that are not in the cache."""
        with self._lock:
            ids_t = torch.from_numpy(ids)
            # NOTE: the prefetch thread and a lookup may both have read the same row;
            # admitting it twice would give one set two ways with the same tag.
            new = self.index.probe(ids_t) < 0
            slots = self.index.admit(ids_t[new])
            kept = slots >= 0
            self.rows[slots[kept]] = rows[new][kept]

    def stats(self) -> dict[str, float]:
        return {
            "ram_cache_bytes": self.nbytes,
            "ram_cache_hits": self.hits,
            "ram_cache_misses": self.misses,
            "ram_cache_hit_ratio": self.hit_ratio,
        }
