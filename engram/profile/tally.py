"""Counting the row ids a served table looks up, in bounded memory.

A lookup hands its ids to :meth:`RowTally.add`: one copy onto a queue, nothing else on
the lookup's path. :meth:`RowTally.fold` (the profile writer's thread, about once a
second) counts the queued ids (``np.unique``) into a sorted map of row id -> count.

NOTE: the map, not a dense array over the table's rows: a DeepSeek-V4.1 table has 384 M
rows (1.5 GiB of uint32 counts per table, per process), a profile keeps the top 1 M. The
map holds at most ``capacity`` rows (16 bytes each: 64 MiB at the default 4 M); when a
fold would pass that it drops all but the ``capacity // 2`` most counted (their counts
add to ``dropped``), so a row first seen after a drop counts from then on. Under the
steep Zipf law n-gram rows follow, the rows that make a profile's top N are looked up
far more often than the rows a drop removes, and a table smaller than ``capacity``
(every table of the tiny models) is counted exactly.
"""

from __future__ import annotations

import threading
from collections import deque

import numpy as np
import torch

from engram.profile.ranking import top_rows

DEFAULT_CAPACITY = 4 << 20


class RowTally:
    """How often each row of a ``num_rows``-row table was looked up."""

    def __init__(self, num_rows: int, capacity: int = DEFAULT_CAPACITY):
        self.num_rows = num_rows
        self.capacity = max(2, min(capacity, num_rows))
        self.counted = 0  # ids folded in, all told
        self.dropped = 0  # counts dropped with the rows a full map let go
        self._rows = np.empty(0, dtype=np.int64)  # sorted
        self._counts = np.empty(0, dtype=np.int64)
        # NOTE: a deque: append and popleft are atomic, so lookups never wait on a fold
        # (nor on a signal handler that writes the profile while a lookup is interrupted).
        self._queue: deque[np.ndarray] = deque()
        self._fold_lock = threading.Lock()

    def add(self, ids: torch.Tensor | np.ndarray) -> None:
        """Queue the row ids one lookup read (any shape; host or device)."""
        if isinstance(ids, torch.Tensor):
            ids = ids.reshape(-1).to("cpu", torch.int64, copy=True).numpy()
        else:
            ids = np.array(ids, dtype=np.int64).reshape(-1)
        if ids.size:
            self._queue.append(ids)

    def fold(self) -> int:
        """Count the queued ids into the map; returns how many there were."""
        with self._fold_lock:
            taken = []
            while self._queue:
                taken.append(self._queue.popleft())
            if not taken:
                return 0
            ids, times = np.unique(np.concatenate(taken), return_counts=True)
            at = np.searchsorted(self._rows, ids)
            known = at < self._rows.size
            known[known] = self._rows[at[known]] == ids[known]
            self._counts[at[known]] += times[known]
            new = ~known
            # NOTE: ``at`` are places in the old map, ``ids`` ascending: inserted sorted
            self._rows = np.insert(self._rows, at[new], ids[new])
            self._counts = np.insert(self._counts, at[new], times[new])
            if self._rows.size > self.capacity:
                self._drop_coldest()
            n = int(times.sum())
            self.counted += n
            return n

    def snapshot(self) -> tuple[np.ndarray, np.ndarray]:
        """(row ids, counts) of every row in the map, by row id (the queue folded first)."""
        self.fold()
        with self._fold_lock:
            return self._rows.copy(), self._counts.copy()

    def _drop_coldest(self) -> None:
        keep_rows, keep_counts = top_rows(self._rows, self._counts, self.capacity // 2)
        self.dropped += int(self._counts.sum() - keep_counts.sum())
        order = np.argsort(keep_rows)
        self._rows, self._counts = keep_rows[order], keep_counts[order]
