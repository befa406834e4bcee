"""The HBM hot-row cache: dequantised rows kept on the device in front of any table.

``with_hot_cache(table, capacity_bytes)`` wraps a ``dram`` or ``ssd`` table (any
placement works): a lookup dedups its ids on the device, serves the rows the cache
holds and asks the wrapped table only for the rest, then caches those. Rows are stored
as the bf16 values the wrapped table returned, so results stay bit-identical. On a CPU
device the cache is simply CPU memory; lookups captured in a CUDA graph bypass it. The
wrapper reports its placement as the wrapped table's, the bytes it served under
``hbm``, and its hit ratio in ``stats()``; it passes ``read_ahead`` on to the wrapped
table.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import torch

from engram.errors import EngramTableError
from engram.files import MIB
from engram.rows.read_ahead import ReadAheadHandle
from engram.rows.seed_rows import SEED_BATCH_ROWS, SeedRows, fitting
from engram.rows.set_assoc import SetAssociativeIndex
from engram.tables.base import EngramTable

logger = logging.getLogger(__name__)


class HotRowCache(EngramTable):
    def __init__(self, inner: EngramTable, capacity_bytes: int, *, ways: int = 8):
        super().__init__(inner.num_rows, inner.head_dim, inner.device, inner.row_format)
        self.inner = inner
        self.declaration, self.placement = inner.declaration, inner.placement
        value_bytes = inner.head_dim * torch.finfo(torch.bfloat16).bits // 8
        # NOTE: at most one slot per row of the table, whatever the flag asked for.
        slots = min(max(1, capacity_bytes // value_bytes), inner.num_rows)
        self.index = SetAssociativeIndex(slots, ways, self.device)
        self.values = torch.empty(
            (self.index.capacity, inner.head_dim), dtype=torch.bfloat16, device=self.device
        )
        self.hits = 0
        self.misses = 0
        self.seeded_rows = 0

    @property
    def hit_ratio(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def _gather(self, ids: torch.Tensor) -> tuple[torch.Tensor, int, dict[str, int]]:
        if ids.is_cuda and torch.cuda.is_current_stream_capturing():
            # NOTE: the cache's dedup and probe need the host (sizes, masks), which a
            # CUDA graph cannot capture; captured lookups read the wrapped table (dram
            # and hbm lookups are capture-safe kernels), eager ones use the cache. The
            # ids go as a fresh int64 tensor, like the eager misses, so the wrapped
            # table launches the kernel variant it warmed up.
            return self.inner._gather(ids.to(torch.int64, copy=True))
        ids = ids.to(self.device, torch.int64)
        unique, inverse = torch.unique(ids, return_inverse=True)
        slots = self.index.probe(unique)
        hit = slots >= 0
        out = torch.empty((unique.numel(), self.head_dim), dtype=torch.bfloat16, device=self.device)
        out[hit] = self.values[slots[hit]]
        missing = unique[~hit]
        n_hit = unique.numel() - missing.numel()
        tier_bytes = {"hbm": n_hit * self.row_bytes}
        if missing.numel():
            before = self.inner.counters.stats()["bytes_read"]
            fetched = self.inner.lookup(missing)
            after = self.inner.counters.stats()["bytes_read"]
            for tier, n in after.items():
                tier_bytes[tier] = tier_bytes.get(tier, 0) + n - before.get(tier, 0)
            out[~hit] = fetched
            new = self.index.admit(missing)
            kept = new >= 0
            self.values[new[kept]] = fetched[kept]
        self.hits += n_hit
        self.misses += missing.numel()
        return out[inverse], unique.numel(), tier_bytes

    def seed(self, seed: SeedRows) -> None:
        """Fill the empty cache with ``seed``'s hottest rows that fit (each set's ``ways``
        hottest), read from the wrapped table outside its counts."""
        ids = np.asarray(seed.ids)
        if ids.dtype != np.int64 or ids.ndim != 1:
            raise EngramTableError(f"{seed.name}: seed rows must be 1-D int64, got {ids.dtype}")
        if ids.size and not 0 <= int(ids.min()) <= int(ids.max()) < self.num_rows:
            raise EngramTableError(
                f"{seed.name}: seed rows outside this table's {self.num_rows:,} rows"
            )
        started = time.perf_counter()
        chosen = fitting(ids, self.index.n_sets, self.index.ways)  # hottest first
        rows = torch.from_numpy(chosen).to(self.device)
        slots = torch.empty_like(rows)
        # NOTE: no set gets more than ``ways`` rows (``fitting``) and the cache is empty:
        # every row gets a slot. Read in row order (the file's, for ssd).
        order = np.argsort(chosen)
        for start in range(0, chosen.size, SEED_BATCH_ROWS):
            at = torch.from_numpy(order[start : start + SEED_BATCH_ROWS]).to(self.device)
            part = rows[at]
            slots[at] = self.index.admit(part)
            self.values[slots[at]] = self.inner.rows(part)
        # NOTE: the hottest newest, so the LRU evicts the coldest seeded rows first.
        self.index.use_in_order(slots.flip(0))
        self.seeded_rows = chosen.size
        logger.info(
            "%s: seeded %d rows (%.1f MiB) into the hot cache in %.2f s",
            seed.name,
            chosen.size,
            chosen.size * self.values.shape[1] * self.values.element_size() / MIB,
            time.perf_counter() - started,
        )

    def read_ahead(self, row_ids: torch.Tensor, *, urgent: bool = False) -> ReadAheadHandle | None:
        return self.inner.read_ahead(row_ids, urgent=urgent)

    def stats(self) -> dict[str, float]:
        return {
            **self.inner.stats(),
            "hot_cache_bytes": self.values.numel() * self.values.element_size(),
            "hot_cache_hits": self.hits,
            "hot_cache_misses": self.misses,
            "hot_cache_hit_ratio": self.hit_ratio,
            "hot_cache_seeded_rows": self.seeded_rows,
        }

    def memory(self) -> dict[str, int]:
        held = dict(self.inner.memory())
        held["hbm"] = held.get("hbm", 0) + self.values.numel() * self.values.element_size()
        return held

    def close(self) -> None:
        self.inner.close()
        self.values = self.values.new_empty((0, self.head_dim))


def with_hot_cache(
    table: EngramTable, capacity_bytes: int, seed: SeedRows | None = None
) -> EngramTable:
    """``table`` behind an HBM hot-row cache of ``capacity_bytes`` (unchanged if 0, or
    if the table has no rows: a TP shard of a table smaller than the TP group), seeded
    with ``seed``'s hottest rows."""
    if capacity_bytes <= 0 or not table.num_rows:
        return table
    cache = HotRowCache(table, capacity_bytes)
    if seed is not None:
        cache.seed(seed)
    return cache
