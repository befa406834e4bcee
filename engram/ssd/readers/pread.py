"""``pread``: read the needed blocks with ``preadv`` from a thread pool.

Runs of consecutive blocks (at most ``MAX_RUN_BLOCKS`` each) are read in batches of at
most ``BATCH_BYTES``, each batch's runs spread over the pool's threads into one buffer,
and the rows gathered from it; each thread hashes the blocks not yet checked right
after reading them (a block stays checked until the table drops its pages: this reader
cannot see the kernel evict one). Nothing is mapped, so an I/O error or a short read (a
shrunken file) is an ordinary error of the lookup. Page-cache hits still cost a system
call and a copy of a whole block per block, which is why warm lookups are slower than
``mmap``.
"""

from __future__ import annotations

import errno
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from engram.ssd.block_hashes import BlockChecks
from engram.ssd.faults import PageReadError
from engram.ssd.layout import DiskLayout
from engram.ssd.readers.base import RowReader, block_runs, row_window

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

    def read_rows(self, ids: np.ndarray, out: torch.Tensor) -> None:
        if ids.size == 0:
            return
        layout = self.layout
        runs = block_runs(ids, layout.rows_per_block, MAX_RUN_BLOCKS)
        first_slot = np.cumsum(runs[:, 1]) - runs[:, 1]  # where each run lands, all batches
        batch = first_slot * layout.block_bytes // BATCH_BYTES
        cuts = np.flatnonzero(np.diff(batch)) + 1
        blocks = ids // layout.rows_per_block
        for part in np.split(np.arange(len(runs)), cuts):
            self._read_batch(runs[part], first_slot[part] - first_slot[part[0]], ids, blocks, out)
        self.pages_requested += int(runs[:, 1].sum()) * layout.pages_per_block

    def _read_batch(
        self,
        runs: np.ndarray,
        slots: np.ndarray,
        ids: np.ndarray,
        blocks: np.ndarray,
        out: torch.Tensor,
    ) -> None:
        layout = self.layout
        buffer = torch.empty(
            int(slots[-1] + runs[-1, 1]) * layout.block_bytes, dtype=torch.uint8, device="cpu"
        )
        groups = np.array_split(np.arange(len(runs)), min(len(runs), self._threads * 2))
        futures = [self._pool.submit(self._read_runs, runs[g], slots[g], buffer) for g in groups]
        for future in futures:
            future.result()
        lo, hi = np.searchsorted(blocks, [runs[0, 0], runs[-1, 0] + runs[-1, 1]])
        mine = blocks[lo:hi]
        run_of = np.searchsorted(runs[:, 0] + runs[:, 1], mine, side="right")
        slot = slots[run_of] + (mine - runs[run_of, 0])
        offsets = (
            slot * layout.block_bytes + (ids[lo:hi] % layout.rows_per_block) * layout.row_bytes
        )
        window = row_window(buffer, layout.row_bytes)
        torch.index_select(window, 0, torch.from_numpy(offsets), out=out[lo:hi])

    def _read_runs(self, runs: np.ndarray, slots: np.ndarray, buffer: torch.Tensor) -> None:
        block = self.layout.block_bytes
        memory = memoryview(buffer.numpy())
        for (first, count), slot in zip(runs.tolist(), slots.tolist(), strict=True):
            want = count * block
            target = memory[slot * block : slot * block + want]
            try:
                got = os.preadv(self.fd, [target], first * block)
            except OSError as err:
                raise self._error(err.errno or errno.EIO, first, count, "reading") from err
            if got != want:
                raise self._error(errno.EIO, first, count, f"(short read: {got} of {want} bytes)")
            if self.checks is not None:  # on this pool thread, beside the other reads
                blocks = np.arange(first, first + count)
                todo = np.flatnonzero(~self.checks.verified[blocks])
                self.checks.check(memory, blocks[todo], (slot + todo) * block)

    def _error(self, err: int, first: int, count: int, how: str) -> PageReadError:
        per = self.layout.pages_per_block
        return PageReadError(err, self.path, first * per, count * per, how)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        super().close()
