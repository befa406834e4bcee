"""Which cache slot holds which row id, for the HBM hot-row cache.

A ``ways``-way set-associative index with LRU replacement inside each set, kept in
torch tensors on the cache's own device so a GPU cache is probed without leaving the
GPU (the RAM row cache keeps the same layout on the host and is probed by compiled
loops instead: :mod:`engram.ssd.row_cache`). Row ``r`` may live only in set ``r % n_sets``; a probe compares the ``ways`` tags
of that set. Engram row ids are hashes, so consecutive sets see unrelated rows.
"""

from __future__ import annotations

import torch

from engram.errors import EngramTableError

MISS = -1


class SetAssociativeIndex:
    def __init__(self, capacity: int, ways: int = 8, device: torch.device | str = "cpu"):
        if capacity < 1:
            raise EngramTableError(f"a row cache needs room for at least one row, got {capacity}")
        self.ways = min(ways, capacity)
        self.n_sets = capacity // self.ways
        self.capacity = self.n_sets * self.ways
        self._tags = torch.full((self.n_sets, self.ways), MISS, dtype=torch.int64, device=device)
        self._stamps = torch.zeros((self.n_sets, self.ways), dtype=torch.int64, device=device)
        self._clock = 0

    def probe(self, ids: torch.Tensor) -> torch.Tensor:
        """Slot of each distinct id, or ``MISS``; hits become most recently used."""
        sets = ids % self.n_sets
        match = self._tags[sets] == ids.unsqueeze(1)
        hit = match.any(dim=1)
        slots = torch.where(hit, sets * self.ways + match.to(torch.int8).argmax(dim=1), MISS)
        self._clock += 1
        self._stamps.view(-1)[slots[hit]] = self._clock
        return slots

    def admit(self, ids: torch.Tensor) -> torch.Tensor:
        """Slots for distinct ids not in the cache (``MISS`` where a set already got
        ``ways`` new rows in this call); each evicts its set's least recently used row."""
        sets = ids % self.n_sets
        order = torch.argsort(sets, stable=True)
        sorted_sets = sets[order]
        first_of_set = torch.searchsorted(sorted_sets, sorted_sets)
        rank = torch.arange(ids.numel(), device=ids.device) - first_of_set
        fits = rank < self.ways
        oldest_first = torch.argsort(self._stamps[sorted_sets[fits]], dim=1)
        ways = oldest_first.gather(1, rank[fits].unsqueeze(1)).squeeze(1)
        sorted_slots = torch.full_like(ids, MISS)
        sorted_slots[fits] = sorted_sets[fits] * self.ways + ways
        self._clock += 1
        taken = sorted_slots[fits]
        self._tags.view(-1)[taken] = ids[order][fits]
        self._stamps.view(-1)[taken] = self._clock
        slots = torch.empty_like(sorted_slots)
        slots[order] = sorted_slots
        return slots

    def use_in_order(self, slots: torch.Tensor) -> None:
        """Make ``slots`` the most recently used, each newer than the one before it."""
        self._stamps.view(-1)[slots] = (
            self._clock + 1 + torch.arange(slots.numel(), device=slots.device)
        )
        self._clock += slots.numel()
