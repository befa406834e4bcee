"""``pread``: read the needed blocks with ``preadv`` from a thread pool.

Runs of consecutive blocks (at most ``MAX_RUN_BLOCKS`` each) are read in batches of at
most ``BATCH_BYTES``, each batch's runs spread over the pool's threads into one buffer;
the blocks not yet checked are hashed once the batch is in (a block stays checked until
the table drops its pages: this reader cannot see the kernel evict one), and the rows
gathered from it. Nothing is mapped, so an I/O error or a short read (a
shrunken file) is an ordinary error of the lookup. Page-cache hits still cost a system
call and a copy of a whole block per block, which is why warm lookups are slower than
``mmap``.
"""

from __future__ import annotations

import errno
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from engram.ssd import kernels
from engram.ssd.block_hashes import BlockChecks
from engram.ssd.faults import PageReadError
from engram.ssd.layout import DiskLayout
from engram.ssd.readers.base import ALL_ROWS, RowReader
from engram.ssd.readers.planning import COUNT, FIRST, SLOT, ReadPlan

DEFAULT_THREADS = 16
MAX_RUN_BLOCKS = 32
BATCH_BYTES = 32 << 20


class PreadReader(RowReader):
    name = "pread"

    def __init__(
        self,
        path: Path,
        layout: DiskLayout,
        *,
        checks: BlockChecks | None = None,
        threads: int = DEFAULT_THREADS,
    ):
        super().__init__(path, layout, checks=checks)
        self._threads = threads
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="engram-pread")

    def _new_plan(self) -> ReadPlan:
        return ReadPlan(
            self.layout,
            max_run_bytes=MAX_RUN_BLOCKS * self.layout.block_bytes,
            batch_bytes=BATCH_BYTES,
            windows=False,
        )

    def read_rows(self, ids: np.ndarray, out: np.ndarray, at: np.ndarray = ALL_ROWS) -> None:
        if ids.size == 0:
            return
        layout = self.layout
        plan = self._plan().make(ids)
        buffer = np.empty(plan.buffer_blocks() * layout.block_bytes, dtype=np.uint8)
        run = row = block = 0
        for end_run, end_row, end_block in plan.batches.tolist():
            runs = plan.runs[run:end_run]
            groups = np.array_split(np.arange(len(runs)), min(len(runs), self._threads * 2))
            started = time.perf_counter()
            futures = [self._pool.submit(self._read_runs, runs[g], buffer) for g in groups]
            for future in futures:
                future.result()
            self.wait_seconds += time.perf_counter() - started
            if self.checks is None:
                kernels.plan.gather(buffer, plan.row_at, out, at, row, end_row)
            else:
                # NOTE: a block stays checked until the table drops its pages: this
                # reader cannot see the kernel evict one.
                self.checks.check_and_gather(
                    buffer,
                    ids,
                    plan.row_at,
                    plan.block_at[block:end_block],
                    out,
                    at,
                    row,
                    end_row,
                    remember=True,
                )
            run, row, block = end_run, end_row, end_block
        self.pages_requested += int(plan.runs[:, COUNT].sum()) * layout.pages_per_block

    def _read_runs(self, runs: np.ndarray, buffer: np.ndarray) -> None:
        block = self.layout.block_bytes
        memory = memoryview(buffer)
        for first, count, slot in runs[:, [FIRST, COUNT, SLOT]].tolist():
            want = count * block
            target = memory[slot * block : slot * block + want]
            try:
                got = os.preadv(self.fd, [target], first * block)
            except OSError as err:
                raise self._error(err.errno or errno.EIO, first, count, "reading") from err
            if got != want:
                raise self._error(errno.EIO, first, count, f"(short read: {got} of {want} bytes)")

    def _error(self, err: int, first: int, count: int, how: str) -> PageReadError:
        per = self.layout.pages_per_block
        return PageReadError(err, self.path, first * per, count * per, how)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        super().close()
