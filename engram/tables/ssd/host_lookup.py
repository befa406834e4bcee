"""The host half of an ssd table's lookups: a lookup's distinct rows gathered into a
bounce buffer, from read-ahead handles done reading, then the RAM row cache, then
handles still reading, then the data file; then copied to the device (asynchronously
from pinned memory on a GPU) and dequantised there. Lookups of one table run one at a
time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np
import torch

from engram.rows.read_ahead import ReadAhead
from engram.ssd.bounce_buffers import BounceBuffers
from engram.ssd.faults import EngramIOError
from engram.ssd.readers import ALL_ROWS
from engram.tables.ssd.ram_front import RamFront

Fetched = tuple[np.ndarray, np.ndarray, torch.Tensor, int | None]


class HostLookup:
    """Lookups of rows of ``row_bytes`` through ``front`` and ``ahead``, landing on
    ``device``; ``check_ids`` refuses row ids outside the table."""

    def __init__(
        self,
        front: RamFront,
        ahead: ReadAhead,
        row_bytes: int,
        device: torch.device,
        check_ids: Callable[[torch.Tensor], None],
    ):
        self.front, self.ahead, self._check_ids = front, ahead, check_ids
        self.bounce = BounceBuffers(row_bytes, device)
        self._lock = threading.RLock()
        self.io_errors = 0  # lookups failed by an I/O error
        # NOTE: seconds, cumulative, lookups waited on read-ahead handles; with the read
        # seconds of lookups and of the read-ahead: the read time read-ahead did not hide.
        self.handle_wait_seconds = 0.0
        self._cache_hits = 0  # RAM cache hits of the current fetch

    def fetch(self, ids: torch.Tensor) -> Fetched:
        """(distinct ids, inverse, their packed rows, bounce index or ``None`` for a
        read-ahead handle's rows). Valid until the next fetch."""
        with self._lock:
            try:
                return self._fetch(ids)
            except EngramIOError:
                self.io_errors += 1  # NOTE: failed lookups; a failed read-ahead is re-read
                raise

    def gather(
        self, ids: torch.Tensor, dequantize: Callable[[torch.Tensor], torch.Tensor]
    ) -> tuple[np.ndarray, np.ndarray, torch.Tensor, int]:
        """(distinct ids, inverse, their dequantised rows on the device, how many of them
        came from the RAM cache)."""
        with self._lock:
            unique, inverse, rows, index = self.fetch(ids)
            # NOTE: on a CPU device the packed rows are the bounce buffer itself;
            # dequantising makes a new tensor, so the buffer is free for the next lookup.
            values = dequantize(self.bounce.to_device(index, rows))
            return unique, inverse, values, self._cache_hits

    def _fetch(self, ids: torch.Tensor) -> Fetched:
        self.front.file.check()
        flat_ids = ids.reshape(-1).to("cpu", torch.int64)
        if ids.is_cuda:
            # NOTE: base.lookup checks host ids but skips GPU ids (a sync); these reach
            # the host anyway, and a bad id would become a bad file offset.
            self._check_ids(flat_ids)
        flat = flat_ids.numpy()
        self._cache_hits = 0
        started = time.perf_counter()
        exact = self.ahead.exact(flat)
        if exact is not None:
            self.handle_wait_seconds += time.perf_counter() - started
            return (*exact, None)
        unique, inverse = np.unique(flat, return_inverse=True)
        index, rows = self.bounce.acquire(unique.size)
        out, need = rows.numpy(), self.front.need(unique.size)
        started = time.perf_counter()
        reading = self.ahead.take_read(unique, out, need)
        self.handle_wait_seconds += time.perf_counter() - started
        self._cache_hits, at = self.front.from_cache(unique, out, need)
        if reading and (at is ALL_ROWS or at.size):
            # NOTE: only now, after the RAM cache: a handle still reading admits its
            # rows to the cache as it goes, so waiting for it first made lookups wait for
            # rows the cache already held (in a replay, all of them).
            started = time.perf_counter()
            if self.ahead.take_reading(reading, unique, out, need):
                at = np.flatnonzero(need)  # NOTE: allocates only when such handles gave rows
            self.handle_wait_seconds += time.perf_counter() - started
        self.front.from_file(unique, out, at)
        return unique, inverse, rows, index
