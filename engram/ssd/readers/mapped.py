"""``mmap``: gather rows from a read-only mapping, faulting cold pages in first.

Per lookup, the blocks of the ids that the residency map does not know to be in the
page cache are grouped into runs, and the runs into slices of about ``SLICE_BYTES``
(a decode step's read is one slice). ``MADV_WILLNEED`` on a slice's runs submits their
reads at once (a deep queue without threads), ``AHEAD_SLICES`` slices ahead of the
slice being waited for: ``MADV_POPULATE_READ`` waits for the runs of one slice and maps
them, *returning* an error where a memory access would have raised SIGBUS, and one
compiled gather copies the slice's rows out while the later slices are still being
read, so the disk is never idle while the CPU checks and copies, nor flooded with a
whole prefill's reads at once. Both advices reach the kernel 1,024 runs per system call
(``process_madvise``). Where a 1 MiB window of the file needs many blocks, the whole
window is read (sequential bandwidth beats one request per page there). Blocks already
in the page cache cost no system call at all (:mod:`engram.ssd.readers.residency`).
Blocks not yet checked are hashed from the mapping once their slice is in, on a checker
thread while the next slice is waited for (the hash kernel and the advice calls both
run without the GIL), and the slice's rows are copied out only after that; the
residency sweep clears a block's checked flag when the kernel evicts it. The plan of a
read (:mod:`engram.ssd.readers.planning`) and its address ranges are kept per thread
and reused.
"""

from __future__ import annotations

import errno
import mmap
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from engram.ssd import kernels
from engram.ssd.block_hashes import BlockChecks, as_bytes
from engram.ssd.faults import PageReadError
from engram.ssd.layout import PAGE_BYTES, DiskLayout
from engram.ssd.readers.base import ALL_ROWS, RowReader
from engram.ssd.readers.planning import COUNT, FIRST, ReadPlan
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
# A read is waited for a slice of about SLICE_BYTES at a time, with the next
# AHEAD_SLICES slices' reads in flight meanwhile (a decode step's read is one slice).
SLICE_BYTES = 16 << 20
AHEAD_SLICES = 4
THREAD_CHECK_BLOCKS = 1024  # slices with fewer blocks to check are checked inline


class MappedReader(RowReader):
    name = "mmap"

    def __init__(
        self,
        path: Path,
        layout: DiskLayout,
        *,
        checks: BlockChecks | None = None,
        slice_bytes: int = SLICE_BYTES,
    ):
        super().__init__(path, layout, checks=checks)
        self._slice_bytes = slice_bytes
        self._mm: mmap.mmap | None = mmap.mmap(self.fd, layout.file_bytes, access=mmap.ACCESS_READ)
        self._mm.madvise(mmap.MADV_RANDOM)
        self._bytes: np.ndarray | None = as_bytes(self._mm)
        self._base = self._bytes.ctypes.data
        self._advisor = RangeAdvisor()
        self._populate = supports(self._base, MADV_POPULATE_READ)
        self.residency = ResidencyMap(
            layout, self._base, verified=checks.verified if checks is not None else None
        )
        self.residency.start()
        self._checker = (
            ThreadPoolExecutor(1, thread_name_prefix="engram-check") if checks is not None else None
        )

    def _new_plan(self) -> ReadPlan:
        return ReadPlan(
            self.layout, max_run_bytes=MAX_ADVICE_BYTES, batch_bytes=self._slice_bytes, in_file=True
        )

    def read_rows(self, ids: np.ndarray, out: np.ndarray, at: np.ndarray = ALL_ROWS) -> None:
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
        if ids.size == 0:
            return
        plan, iov = self._plan_reads(ids)
        assert self._bytes is not None, "reader is closed"
        if plan.r == 0 or not self._populate:
            if plan.r:  # kernels before 5.14: the gather faults them in
                self._advise(plan.runs, iov, MADV_WILLNEED)
                kernels.plan.mark_runs(self.residency.resident, plan.runs)
            self._check(plan.blocks, plan.block_at)
            kernels.plan.gather(self._bytes, plan.row_at, out, at, 0, plan.size)
            return
        # Wait for (and map) the runs a slice at a time, with the reads of the next
        # AHEAD_SLICES slices in flight (MADV_WILLNEED), copying out the rows of the
        # slice before. A slice's blocks are checked on the checker thread while this
        # one waits for the next slice (neither holds the GIL meanwhile); its rows are
        # copied once that is done.
        slices = plan.batches.tolist()
        advised = 0  # runs advised so far
        run = row = block = 0
        pending: tuple[Future | None, int, int] | None = None
        for index, (end_run, end_row, end_block) in enumerate(slices):
            ahead = slices[min(index + AHEAD_SLICES, len(slices) - 1)][0]
            if ahead > advised:
                self._advise(plan.runs[advised:ahead], iov[advised:ahead], MADV_WILLNEED)
                advised = ahead
            self._advise(plan.runs[run:end_run], iov[run:end_run], MADV_POPULATE_READ)
            kernels.plan.mark_runs(self.residency.resident, plan.runs[run:end_run])
            check = self._check_later(plan.blocks[block:end_block], plan.block_at[block:end_block])
            if pending is not None:
                self._copy_out(*pending, plan, out, at)
            pending = (check, row, end_row)
            run, row, block = end_run, end_row, end_block
        assert pending is not None
        self._copy_out(*pending, plan, out, at)

    def _check_later(self, blocks: np.ndarray, offsets: np.ndarray) -> Future | None:
        if blocks.size == 0 or self._checker is None:
            return None
        if blocks.size < THREAD_CHECK_BLOCKS:
            # NOTE: a handoff costs more than hashing a few hundred blocks here.
            self._check(blocks, offsets)
            return None
        return self._checker.submit(self._check, blocks, offsets)

    def _copy_out(
        self,
        check: Future | None,
        lo: int,
        hi: int,
        plan: ReadPlan,
        out: np.ndarray,
        at: np.ndarray,
    ) -> None:
        """Rows ``lo:hi`` into ``out``, once their blocks passed ``check``."""
        if check is not None:
            check.result()  # NOTE: raises EngramChecksumError before a row is copied
        assert self._bytes is not None, "reader is closed"
        kernels.plan.gather(self._bytes, plan.row_at, out, at, lo, hi)

    def warm(self, ids: np.ndarray) -> None:
        """Fault the blocks of ``ids`` in (reading them from disk where needed)."""
        plan, iov = self._plan_reads(ids)
        if plan.r:
            self._advise(plan.runs, iov, MADV_WILLNEED)
            if self._populate:
                self._advise(plan.runs, iov, MADV_POPULATE_READ)
            kernels.plan.mark_runs(self.residency.resident, plan.runs)
            if self._populate:
                self._check(plan.blocks, plan.block_at)

    def _check(self, blocks: np.ndarray, offsets: np.ndarray) -> None:
        """Hash ``blocks`` (distinct, in memory now) that are not checked yet."""
        if blocks.size and self.checks is not None:
            assert self._bytes is not None, "reader is closed"
            self.checks.check(self._bytes, blocks, offsets)

    def _plan_reads(self, ids: np.ndarray) -> tuple[ReadPlan, np.ndarray]:
        """The plan of reading ``ids`` (runs of the blocks not known to be resident) and
        its runs' address ranges."""
        plan = self._plan().make(ids, self.residency.resident)
        if plan.r == 0:
            return plan, _NO_RANGES
        iov = self._ranges(plan.r)
        kernels.plan.address_ranges(
            plan.runs, self._base, self.layout.block_bytes, mmap.PAGESIZE, iov
        )
        self.pages_requested += int(plan.runs[:, COUNT].sum()) * self.layout.pages_per_block
        return plan, iov

    def _ranges(self, n: int) -> np.ndarray:
        """This thread's (address, length) array for ``n`` runs, reused."""
        held = getattr(self._plans, "ranges", None)
        if held is None or len(held) < n:
            held = self._plans.ranges = np.empty((max(n, 1024), 2), dtype=np.uint64)
        return held[:n]

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
        if self._mm is not None:
            self.residency.stop()
            if self._checker is not None:
                self._checker.shutdown(wait=True)
            self._bytes = None  # drop the last view so the mapping can close
            try:
                self._mm.close()
            except BufferError:
                # NOTE: a view is still referenced (the frames of a failed check's
                # traceback); the mapping goes away with the last view.
                pass
            self._mm = None
            self._advisor.close()
        super().close()

    def _advise(self, runs: np.ndarray, iov: np.ndarray, advice: int) -> None:
        started = time.perf_counter()
        try:
            self._advisor.advise(iov, advice)
        except AdviceError as err:
            first, count = int(runs[err.index, FIRST]), int(runs[err.index, COUNT])
            per = self.layout.pages_per_block
            how = (
                "(EFAULT: an I/O error, or the file shrank) faulting in"
                if err.errno == errno.EFAULT
                else "advising"
            )
            raise PageReadError(
                err.errno or errno.EIO, self.path, first * per, count * per, how
            ) from err
        finally:
            self.wait_seconds += time.perf_counter() - started


_NO_RANGES = np.zeros((0, 2), dtype=np.uint64)
