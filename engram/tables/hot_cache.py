"""The HBM hot-row cache: dequantised rows kept on the device in front of any table.

``with_hot_cache(table, capacity_bytes)`` wraps a ``dram`` or ``ssd`` table (any
placement works): a lookup dedups its ids on the device, serves the rows the cache
holds and asks the wrapped table only for the rest, then caches those. Rows are stored
as the bf16 values the wrapped table returned, so results stay bit-identical. On a CPU
device the cache is simply CPU memory; lookups captured in a CUDA graph bypass it. The
wrapper reports its placement as the wrapped table's, the bytes it served under
``hbm``, and its hit ratio in ``stats()``; it passes ``prefetch`` on to the wrapped
table.
"""

from __future__ import annotations

import torch

from engram.ssd.prefetch import PrefetchHandle
from engram.ssd.set_assoc import SetAssociativeIndex
from engram.tables.base import EngramTable


class HotRowCache(EngramTable):
    def __init__(self, inner: EngramTable, capacity_bytes: int, *, ways: int = 8):
        super().__init__(inner.num_rows, inner.head_dim, inner.device, inner.row_format)
        self.inner = inner
        self.placement = inner.placement
        value_bytes = inner.head_dim * torch.finfo(torch.bfloat16).bits // 8
        # NOTE: at most one slot per row of the table, whatever the flag asked for.
        slots = min(max(1, capacity_bytes // value_bytes), inner.num_rows)
        self.index = SetAssociativeIndex(slots, ways, self.device)
        self.values = torch.empty(
            (self.index.capacity, inner.head_dim), dtype=torch.bfloat16, device=self.device
        )
        self.hits = 0
        self.misses = 0

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

    def prefetch(self, row_ids: torch.Tensor, *, urgent: bool = False) -> PrefetchHandle | None:
        return self.inner.prefetch(row_ids, urgent=urgent)

    def stats(self) -> dict[str, float]:
        return {
            **self.inner.stats(),
            "hot_cache_bytes": self.values.numel() * self.values.element_size(),
            "hot_cache_hits": self.hits,
            "hot_cache_misses": self.misses,
            "hot_cache_hit_ratio": self.hit_ratio,
        }

    def memory(self) -> dict[str, int]:
        held = dict(self.inner.memory())
        held["hbm"] = held.get("hbm", 0) + self.values.numel() * self.values.element_size()
        return held

    def close(self) -> None:
        self.inner.close()
        self.values = self.values.new_empty((0, self.head_dim))


def with_hot_cache(table: EngramTable, capacity_bytes: int) -> EngramTable:
    """``table`` behind an HBM hot-row cache of ``capacity_bytes`` (unchanged if 0, or
    if the table has no rows: a TP shard of a table smaller than the TP group)."""
    return HotRowCache(table, capacity_bytes) if capacity_bytes > 0 and table.num_rows else table
