"""``direct``: read the needed blocks with ``O_DIRECT``, all in one AIO submission.

The page cache is out of play: every block comes from the disk into this reader's own
buffer, so the RAM row cache is the only cache, and a table far larger than memory
does not push everything else out of the page cache. Per read the distinct blocks of
the ids are grouped into runs (consecutive blocks; whole 1 MiB windows where a window
needs many of its blocks, as the ``mmap`` reader plans them), the runs go to the disk
in one ``io_submit`` (:mod:`engram.ssd.aio`) and the reader sleeps once until they are
in; a read larger than a buffer (``BATCH_BYTES``) goes in batches, the next batch read
while the last is checked and copied. Each copy is fresh from the disk, so every block a row is taken from is hashed
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
BATCH_BYTES = 16 << 20  # a buffer's size: 4,096 blocks of 4 KiB; two per thread


class DirectReader(RowReader):
    name = "direct"

    def __init__(
        self,
        path: Path,
        layout: DiskLayout,
        *,
        checks: BlockChecks | None = None,
        batch_bytes: int = BATCH_BYTES,
    ):
        super().__init__(path, layout, checks=checks)
        self._direct = os.open(path, os.O_RDONLY | os.O_DIRECT | os.O_CLOEXEC)
        self._batch_bytes = batch_bytes
        self._local = threading.local()
        self._contexts: list[AioContext] = []
        self._lock = threading.Lock()

    def _new_plan(self) -> ReadPlan:
        return ReadPlan(self.layout, max_run_bytes=MAX_RUN_BYTES, batch_bytes=self._batch_bytes)

    def read_rows(self, ids: np.ndarray, out: np.ndarray, at: np.ndarray = ALL_ROWS) -> None:
        if ids.size == 0:
            return
        layout = self.layout
        plan = self._plan().make(ids)
        runs = plan.runs
        self.pages_requested += int(runs[:, COUNT].sum()) * layout.pages_per_block
        batches = plan.batches.tolist()
        # NOTE: two buffers and AIO contexts: batch i + 1 is read while batch i is
        # checked and copied.
        size = plan.buffer_blocks() * layout.block_bytes
        data = [as_bytes(self._buffer(k, size)) for k in range(min(2, len(batches)))]
        contexts = [self._context(k) for k in range(len(data))]
        starts = [0, *(end_run for end_run, _, _ in batches)]
        row = block = 0
        try:
            contexts[0].start(
                self._direct, data[0].ctypes.data, runs[: starts[1]], layout.block_bytes
            )
            for index, (end_run, end_row, end_block) in enumerate(batches):
                if index + 1 < len(batches):
                    nxt = (index + 1) % 2
                    part = runs[end_run : starts[index + 2]]
                    contexts[nxt].start(
                        self._direct, data[nxt].ctypes.data, part, layout.block_bytes
                    )
                mine = index % 2
                started = time.perf_counter()
                results = contexts[mine].finish()
                self.wait_seconds += time.perf_counter() - started
                part = runs[starts[index] : end_run]
                bad = np.flatnonzero(results != part[:, COUNT] * layout.block_bytes)
                if bad.size:
                    raise self._error(part, results, bad)
                self._take(data[mine], ids, plan, block, end_block, out, at, row, end_row)
                row, block = end_row, end_block
        finally:
            for ctx in contexts:
                ctx.drain()

    def _take(
        self,
        data: np.ndarray,
        ids: np.ndarray,
        plan: ReadPlan,
        block: int,
        end_block: int,
        out: np.ndarray,
        at: np.ndarray,
        row: int,
        end_row: int,
    ) -> None:
        """Rows ``row:end_row`` of one batch from its buffer, their blocks checked."""
        if self.checks is None:
            kernels.plan.gather(data, plan.row_at, out, at, row, end_row)
            return
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

    def warm(self, ids: np.ndarray) -> None:
        """Nothing: with the page cache out of play there is nothing to warm (rows
        past the read-ahead budget are read by the lookup that needs them)."""

    def _buffer(self, index: int, nbytes: int) -> mmap.mmap:
        """This thread's page-aligned read buffer ``index``, grown to ``nbytes`` when
        needed."""
        name = f"buffer{index}"
        held = getattr(self._local, name, None)
        if held is None or len(held) < nbytes:
            # NOTE: the old buffer is unmapped once its last view is gone.
            size = max(nbytes, 1 << 20)
            held = mmap.mmap(-1, -(-size // PAGE_BYTES) * PAGE_BYTES)
            setattr(self._local, name, held)
        return held

    def _context(self, index: int) -> AioContext:
        name = f"context{index}"
        ctx = getattr(self._local, name, None)
        if ctx is None:
            ctx = AioContext(QUEUE_DEPTH)
            setattr(self._local, name, ctx)
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
