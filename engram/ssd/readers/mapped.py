"""``mmap``: gather rows from a read-only mapping, faulting cold pages in first.

Per lookup, the blocks of the ids that the residency map does not know to be in the
page cache are grouped into runs; ``MADV_WILLNEED`` on all runs submits their reads at
once (a deep queue without threads). ``MADV_POPULATE_READ`` then waits for the runs a
slice at a time and maps them, *returning* an error where a memory access would have
raised SIGBUS, and one ``index_select`` per slice copies its rows out while the later
slices are still being read. Both advices reach the kernel 1,024 runs per system call
(``process_madvise``). Where a 1 MiB window of the file needs many blocks, the whole
window is read (sequential bandwidth beats one request per page there). Blocks already
in the page cache cost no system call at all (:mod:`engram.ssd.readers.residency`).
Blocks not yet checked are hashed from the mapping once their slice is in, on a checker
thread while the next slice is waited for, and the slice's rows are copied out only
after that; the residency sweep clears a block's checked flag when the kernel evicts it.
"""

from __future__ import annotations

import errno
import mmap
import os
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from engram.ssd.block_hashes import BlockChecks
from engram.ssd.faults import PageReadError
from engram.ssd.layout import PAGE_BYTES, DiskLayout
from engram.ssd.readers.base import RowReader, expand_runs, plan_runs, row_window, split_runs
from engram.ssd.readers.residency import ResidencyMap
from engram.ssd.sysmem import (
    MADV_POPULATE_READ,
    MADV_WILLNEED,
    AdviceError,
    RangeAdvisor,
    mincore,
    supports,
)

# NOTE: the kernel silently shortens one MADV_WILLNEED to its readahead limit (often
# 128 KiB), and POPULATE_READ would then read the rest one page at a time; so every
# advised range is cut to at most this.
MAX_ADVICE_BYTES = 128 << 10
PIPELINE_STEPS = 8
THREAD_CHECK_BLOCKS = 1024  # slices with fewer blocks to check are checked inline


class MappedReader(RowReader):
    name = "mmap"

    def __init__(self, path: Path, layout: DiskLayout, *, checks: BlockChecks | None = None):
        super().__init__(path, layout, checks=checks)
        self._mm = mmap.mmap(self.fd, layout.file_bytes, access=mmap.ACCESS_READ)
        self._mm.madvise(mmap.MADV_RANDOM)
        self._bytes: memoryview | None = memoryview(self._mm)
        array = np.frombuffer(self._mm, dtype=np.uint8)
        self._base = array.ctypes.data
        with warnings.catch_warnings():
            # NOTE: torch warns that the buffer is read-only; we only ever read it.
            warnings.simplefilter("ignore", UserWarning)
            window = row_window(torch.from_numpy(array), layout.row_bytes)
        self._rows_at: torch.Tensor | None = window
        self._advice_blocks = max(1, MAX_ADVICE_BYTES // layout.block_bytes)
        self._advisor = RangeAdvisor()
        self._populate = supports(self._base, MADV_POPULATE_READ)
        self.residency = ResidencyMap(
            layout, self._base, verified=checks.verified if checks is not None else None
        )
        self.residency.start()
        self._checker = (
            ThreadPoolExecutor(1, thread_name_prefix="engram-check") if checks is not None else None
        )

    def read_rows(self, ids: np.ndarray, out: torch.Tensor) -> None:
        size = os.fstat(self.fd).st_size
        if size < self.layout.file_bytes:
            # NOTE: touching the mapping past the end of the file would be a SIGBUS.
            first = size // PAGE_BYTES
            raise PageReadError(
                errno.EIO,
                self.path,
                first,
                self.layout.file_bytes // PAGE_BYTES - first,
                f"(the file shrank to {size:,} bytes) before",
            )
        assert self._rows_at is not None, "reader is closed"
        offsets = torch.from_numpy(self.layout.row_offsets(ids))
        blocks = ids // self.layout.rows_per_block
        todo = self.unverified(blocks)
        runs, iov = self._submit(ids)
        if runs.size == 0 or not self._populate:
            self._check(todo)
            torch.index_select(self._rows_at, 0, offsets, out=out)
            return
        # Wait for (and map) the runs a slice at a time, copying out the rows below each
        # slice's end while the reads of the later slices are in flight. A slice's blocks
        # are checked on the checker thread while this one waits for the next slice
        # (the system call releases the GIL); its rows are copied once that is done.
        done = checked = 0
        pending: tuple[Future | None, int, int] | None = None
        for part in np.array_split(np.arange(len(runs)), min(PIPELINE_STEPS, len(runs))):
            self._advise(runs[part], iov[part], MADV_POPULATE_READ)
            self.residency.mark(expand_runs(runs[part]))
            last = runs[part[-1]]
            end = (
                len(ids)
                if part[-1] == len(runs) - 1
                else int(np.searchsorted(blocks, last[0] + last[1]))
            )
            upto = int(np.searchsorted(todo, blocks[end - 1], side="right")) if end else 0
            check = self._check_later(todo[checked:upto])
            checked = upto
            if pending is not None:
                self._copy_out(*pending, offsets, out)
            pending = (check, done, end)
            done = end
        assert pending is not None
        self._copy_out(*pending, offsets, out)

    def _check_later(self, blocks: np.ndarray) -> Future | None:
        if blocks.size == 0 or self._checker is None:
            return None
        if blocks.size < THREAD_CHECK_BLOCKS:
            # NOTE: a handoff costs more than hashing a few hundred blocks here.
            self._check(blocks)
            return None
        return self._checker.submit(self._check, blocks)

    def _copy_out(
        self, check: Future | None, lo: int, hi: int, offsets: torch.Tensor, out: torch.Tensor
    ) -> None:
        """Rows ``lo:hi`` into ``out``, once their blocks passed ``check``."""
        if check is not None:
            check.result()  # NOTE: raises EngramChecksumError before a row is copied
        assert self._rows_at is not None, "reader is closed"
        torch.index_select(self._rows_at, 0, offsets[lo:hi], out=out[lo:hi])

    def warm(self, ids: np.ndarray) -> None:
        """Fault the blocks of ``ids`` in (reading them from disk where needed)."""
        runs, iov = self._submit(ids)
        if runs.size and self._populate:
            self._advise(runs, iov, MADV_POPULATE_READ)
            self.residency.mark(expand_runs(runs))
            self._check(self.unverified(ids // self.layout.rows_per_block))

    def _check(self, blocks: np.ndarray) -> None:
        """Hash ``blocks`` (distinct, in memory now) that are not checked yet."""
        if blocks.size and self.checks is not None:
            assert self._bytes is not None, "reader is closed"
            self.checks.check(self._bytes, blocks, blocks * self.layout.block_bytes)

    def _submit(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Start reading the blocks of ``ids`` not known to be resident (MADV_WILLNEED);
        return their runs and address ranges."""
        layout = self.layout
        blocks = ids // layout.rows_per_block
        cold = blocks[self.residency.unknown(blocks)]
        if cold.size == 0:
            return np.zeros((0, 2), dtype=np.int64), np.zeros((0, 2), dtype=np.uint64)
        runs = split_runs(plan_runs(np.unique(cold), layout), self._advice_blocks)
        iov = _page_aligned(
            self._base + runs[:, 0] * layout.block_bytes, runs[:, 1] * layout.block_bytes
        )
        self._advise(runs, iov, MADV_WILLNEED)
        self.pages_requested += int(runs[:, 1].sum()) * layout.pages_per_block
        if not self._populate:  # kernels before 5.14: the gather faults them in
            self.residency.mark(expand_runs(runs))
        return runs, iov

    def refresh_residency(self) -> None:
        self.residency.refresh()

    def drop_page_cache(self) -> None:
        # NOTE: pages still mapped here would survive the fadvise below; and the map is
        # forgotten only after the drop, so no sweep can re-learn the dropped pages.
        self._mm.madvise(mmap.MADV_DONTNEED)
        super().drop_page_cache()
        self.residency.forget()

    def resident_fraction(self) -> float:
        resident = mincore(self._base, self.layout.file_bytes)
        return float((resident & 1).mean())

    def close(self) -> None:
        if self._rows_at is not None:
            self.residency.stop()
            if self._checker is not None:
                self._checker.shutdown(wait=True)
            self._rows_at = None  # drop the last views so the mapping can close
            assert self._bytes is not None
            self._bytes.release()
            self._bytes = None
            self._mm.close()
            self._advisor.close()
        super().close()

    def _advise(self, runs: np.ndarray, iov: np.ndarray, advice: int) -> None:
        try:
            self._advisor.advise(iov, advice)
        except AdviceError as err:
            first, count = (int(v) for v in runs[err.index])
            per = self.layout.pages_per_block
            how = (
                "(EFAULT: an I/O error, or the file shrank) faulting in"
                if err.errno == errno.EFAULT
                else "advising"
            )
            raise PageReadError(
                err.errno or errno.EIO, self.path, first * per, count * per, how
            ) from err


def _page_aligned(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """(address, length) ranges widened to the system page size (4 KiB blocks are
    already aligned unless the kernel uses larger pages)."""
    iov = np.empty((starts.size, 2), dtype=np.uint64)
    if mmap.PAGESIZE == PAGE_BYTES:
        iov[:, 0], iov[:, 1] = starts, lengths
        return iov
    first = starts // mmap.PAGESIZE * mmap.PAGESIZE
    iov[:, 0] = first
    iov[:, 1] = -(-(starts + lengths - first) // mmap.PAGESIZE) * mmap.PAGESIZE
    return iov
