"""``direct``: read the needed blocks with ``O_DIRECT``, all in one AIO submission.

The page cache is out of play: every block comes from the disk into this reader's own
buffer, so the RAM row cache is the only cache, and a table far larger than memory
does not push everything else out of the page cache. Per read the distinct blocks of
the ids are grouped into runs (consecutive blocks; whole 1 MiB windows where a window
needs many of its blocks, as the ``mmap`` reader plans them), the runs go to the disk
in one ``io_submit`` (:mod:`engram.ssd.aio`) and the reader sleeps once until they are
in. Each copy is fresh from the disk, so every block read is hashed against its
expected hash before any row is gathered out of it (no block stays "checked").
Buffers are kept per thread (the lookup and the read-ahead thread read at once).
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
from pathlib import Path

import numpy as np
import torch

from engram.ssd.aio import AioContext
from engram.ssd.block_hashes import BlockChecks
from engram.ssd.faults import PageReadError
from engram.ssd.layout import PAGE_BYTES, DiskLayout
from engram.ssd.readers.base import RowReader, expand_runs, plan_runs, row_window, split_runs

QUEUE_DEPTH = 1024
MAX_RUN_BYTES = 128 << 10
BATCH_BLOCKS = 8192  # blocks per submission: 32 MiB of 4 KiB blocks


class DirectReader(RowReader):
    name = "direct"

    def __init__(self, path: Path, layout: DiskLayout, *, checks: BlockChecks | None = None):
        super().__init__(path, layout, checks=checks)
        self._direct = os.open(path, os.O_RDONLY | os.O_DIRECT | os.O_CLOEXEC)
        self._run_blocks = max(1, MAX_RUN_BYTES // layout.block_bytes)
        self._local = threading.local()
        self._contexts: list[AioContext] = []
        self._lock = threading.Lock()

    def read_rows(self, ids: np.ndarray, out: torch.Tensor) -> None:
        if ids.size == 0:
            return
        layout = self.layout
        blocks = ids // layout.rows_per_block
        runs = split_runs(plan_runs(np.unique(blocks), layout), self._run_blocks)
        self.pages_requested += int(runs[:, 1].sum()) * layout.pages_per_block
        # NOTE: batches of at most BATCH_BLOCKS blocks bound the buffer; the ids of a
        # batch are a slice of the sorted ids.
        batch = (np.cumsum(runs[:, 1]) - runs[:, 1]) // BATCH_BLOCKS
        for part in np.split(runs, np.flatnonzero(np.diff(batch)) + 1):
            end = part[-1, 0] + part[-1, 1]
            lo, hi = np.searchsorted(blocks, [part[0, 0], end])
            self._read_batch(part, ids[lo:hi], blocks[lo:hi], out[lo:hi])

    def _read_batch(
        self, runs: np.ndarray, ids: np.ndarray, blocks: np.ndarray, out: torch.Tensor
    ) -> None:
        layout = self.layout
        step = np.int64(layout.block_bytes)
        counts = runs[:, 1]
        slots = np.cumsum(counts) - counts  # first buffer block of each run
        buffer = self._buffer(int(counts.sum()) * layout.block_bytes)
        base = np.frombuffer(buffer, dtype=np.uint8).ctypes.data
        results = self._context().read(
            self._direct,
            (base + slots * step).astype(np.uint64),
            (counts * step).astype(np.uint64),
            runs[:, 0] * step,
        )
        bad = np.flatnonzero(results != counts * step)
        if bad.size:
            raise self._error(runs, results, bad)
        read = expand_runs(runs)  # every block in the buffer, in buffer order
        if self.checks is not None:
            offsets = np.arange(read.size, dtype=np.int64) * step
            self.checks.check(memoryview(buffer), read, offsets, remember=False)
        rows = ids % layout.rows_per_block
        where = np.searchsorted(read, blocks) * step + rows * layout.row_bytes
        window = row_window(torch.frombuffer(buffer, dtype=torch.uint8), layout.row_bytes)
        torch.index_select(window, 0, torch.from_numpy(where), out=out)

    def warm(self, ids: np.ndarray) -> None:
        """Nothing: with the page cache out of play there is nothing to warm (rows
        past the read-ahead budget are read by the lookup that needs them)."""

    def _buffer(self, nbytes: int) -> mmap.mmap:
        """This thread's page-aligned read buffer, grown to ``nbytes`` when needed."""
        held = getattr(self._local, "buffer", None)
        if held is None or len(held) < nbytes:
            if held is not None:
                held.close()
            size = max(nbytes, 1 << 20)
            held = self._local.buffer = mmap.mmap(-1, -(-size // PAGE_BYTES) * PAGE_BYTES)
        return held

    def _context(self) -> AioContext:
        ctx = getattr(self._local, "context", None)
        if ctx is None:
            ctx = self._local.context = AioContext(QUEUE_DEPTH)
            with self._lock:
                self._contexts.append(ctx)
        return ctx

    def _error(self, runs: np.ndarray, results: np.ndarray, bad: np.ndarray) -> PageReadError:
        first, count = (int(v) for v in runs[bad[0]])
        got = int(results[bad[0]])
        per = self.layout.pages_per_block
        if got < 0:
            return PageReadError(-got, self.path, first * per, count * per, "reading")
        how = f"(short read: {got} of {count * self.layout.block_bytes} bytes)"
        return PageReadError(errno.EIO, self.path, first * per, count * per, how)

    def close(self) -> None:
        with self._lock:
            contexts, self._contexts = self._contexts, []
        for ctx in contexts:
            ctx.close()
        if self._direct >= 0:
            os.close(self._direct)
            self._direct = -1
        super().close()
