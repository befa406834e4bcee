"""``direct``: read the needed blocks with ``O_DIRECT``, all in one AIO submission.

The page cache is out of play: every block comes from the disk into this reader's own
buffer, so the RAM row cache is the only cache, and a table far larger than memory
does not push everything else out of the page cache. Per read the distinct blocks of
the ids are grouped into runs (consecutive blocks; whole 1 MiB windows where a window
needs many of its blocks, as the ``mmap`` reader plans them), the runs go to the disk
in one ``io_submit`` (:mod:`engram.ssd.aio`) and the reader sleeps once until they are
in. Each copy is fresh from the disk, so every block a row is taken from is hashed
against its expected hash before any row is gathered out of it (no block stays
"checked"; blocks read only because their window was read whole are not looked at).
Buffers and plans are kept per thread (the lookup and the read-ahead thread read at
once) and reused.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
import time
from pathlib import Path

import numpy as np

from engram.ssd import kernels
from engram.ssd.aio import AioContext
from engram.ssd.block_hashes import BlockChecks, as_bytes
from engram.ssd.faults import PageReadError
from engram.ssd.layout import PAGE_BYTES, DiskLayout
from engram.ssd.readers.base import ALL_ROWS, RowReader
from engram.ssd.readers.planning import COUNT, FIRST, ReadPlan

QUEUE_DEPTH = 1024
MAX_RUN_BYTES = 128 << 10
BATCH_BYTES = 32 << 20  # a buffer's size: 8,192 blocks of 4 KiB


class DirectReader(RowReader):
    name = "direct"

    def __init__(self, path: Path, layout: DiskLayout, *, checks: BlockChecks | None = None):
        super().__init__(path, layout, checks=checks)
        self._direct = os.open(path, os.O_RDONLY | os.O_DIRECT | os.O_CLOEXEC)
        self._local = threading.local()
        self._contexts: list[AioContext] = []
        self._lock = threading.Lock()

    def _new_plan(self) -> ReadPlan:
        return ReadPlan(self.layout, max_run_bytes=MAX_RUN_BYTES, batch_bytes=BATCH_BYTES)

    def read_rows(self, ids: np.ndarray, out: np.ndarray, at: np.ndarray = ALL_ROWS) -> None:
        if ids.size == 0:
            return
        layout = self.layout
        plan = self._plan().make(ids)
        runs = plan.runs
        self.pages_requested += int(runs[:, COUNT].sum()) * layout.pages_per_block
        data = as_bytes(self._buffer(plan.buffer_blocks() * layout.block_bytes))
        run = row = block = 0
        for end_run, end_row, end_block in plan.batches.tolist():
            part = runs[run:end_run]
            started = time.perf_counter()
            results = self._context().read_runs(
                self._direct, data.ctypes.data, part, layout.block_bytes
            )
            self.wait_seconds += time.perf_counter() - started
            bad = np.flatnonzero(results != part[:, COUNT] * layout.block_bytes)
            if bad.size:
                raise self._error(part, results, bad)
            if self.checks is None:
                kernels.plan.gather(data, plan.row_at, out, at, row, end_row)
            else:
                # NOTE: a private copy, fresh from the disk: checked every time.
                self.checks.check_and_gather(
                    data,
                    ids,
                    plan.row_at,
                    plan.block_at[block:end_block],
                    out,
                    at,
                    row,
                    end_row,
                    remember=False,
                )
            run, row, block = end_run, end_row, end_block

    def warm(self, ids: np.ndarray) -> None:
        """Nothing: with the page cache out of play there is nothing to warm (rows
        past the read-ahead budget are read by the lookup that needs them)."""

    def _buffer(self, nbytes: int) -> mmap.mmap:
        """This thread's page-aligned read buffer, grown to ``nbytes`` when needed."""
        held = getattr(self._local, "buffer", None)
        if held is None or len(held) < nbytes:
            # NOTE: the old buffer is unmapped once its last view is gone.
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
        first, count = int(runs[bad[0], FIRST]), int(runs[bad[0], COUNT])
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
