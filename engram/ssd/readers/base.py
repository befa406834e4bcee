"""What every read strategy of the SSD tier provides.

A reader copies rows of *sorted, distinct* row ids from a table's data file into a
caller's uint8 rows ``[m, row_bytes]`` (row ``i`` to ``at[i]``). It reads whole blocks
(pages) only, grouping the ids by block and consecutive blocks into runs
(:mod:`engram.ssd.readers.planning`, one plan per thread, reused). With ``checks``
(:class:`engram.ssd.block_hashes.BlockChecks`) it hashes every block it needs that is
not yet checked, after reading it and before copying a row out of it, and raises
:class:`engram.ssd.faults.EngramChecksumError` for one that does not match. I/O errors
surface as :class:`engram.ssd.faults.PageReadError`, never as a signal.
"""

from __future__ import annotations

import os
import threading
from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

import numpy as np

from engram.ssd.block_hashes import BlockChecks
from engram.ssd.layout import DiskLayout
from engram.ssd.readers.planning import ReadPlan
from engram.ssd.sysmem import mincore

ALL_ROWS = np.zeros(0, dtype=np.int64)  # ``at`` meaning: row i of the ids to out[i]


class RowReader(ABC):
    name: ClassVar[str] = ""

    def __init__(self, path: Path, layout: DiskLayout, *, checks: BlockChecks | None = None):
        self.path = path
        self.layout = layout
        self.checks = checks
        self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        # NOTE: rows are read at random; the kernel's readahead would read (and cache)
        # up to a whole readahead window around every page we ask for.
        os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_RANDOM)
        self.pages_requested = 0  # pages that had to be brought in (not known resident)
        # NOTE: seconds, cumulative, in the system calls that wait for the disk (with the
        # kernel's own work on them); a read's time beyond it is our host work.
        self.wait_seconds = 0.0
        self._plans = threading.local()

    @abstractmethod
    def read_rows(self, ids: np.ndarray, out: np.ndarray, at: np.ndarray = ALL_ROWS) -> None:
        """Copy the rows of sorted distinct int64 ``ids`` into uint8 ``out``
        ``[m, row_bytes]``: the row of ``ids[i]`` to ``out[at[i]]`` (``at`` empty:
        ``out[i]``)."""

    @abstractmethod
    def _new_plan(self) -> ReadPlan:
        """A plan for this reader's reads (one per thread)."""

    def _plan(self) -> ReadPlan:
        plan = getattr(self._plans, "plan", None)
        if plan is None:
            plan = self._plans.plan = self._new_plan()
        return plan

    def warm(self, ids: np.ndarray) -> None:
        """Bring the pages of ``ids`` into the page cache without keeping a copy."""
        self.read_rows(ids, np.empty((len(ids), self.layout.row_bytes), dtype=np.uint8))

    def refresh_residency(self) -> None:  # noqa: B027 - only the mmap reader keeps a map
        """Re-learn which pages the page cache holds (readers that track it)."""

    def drop_page_cache(self) -> None:
        """Evict this file's pages from the page cache (benchmarks and tests); their
        next copies come from the disk, so they are checked again."""
        os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_DONTNEED)
        if self.checks is not None:
            self.checks.forget()

    def resident_fraction(self) -> float:
        """Share of the file's pages in the page cache (mincore on a fresh mapping)."""
        import mmap

        with mmap.mmap(self.fd, self.layout.file_bytes, access=mmap.ACCESS_READ) as mm:
            view = np.frombuffer(mm, dtype=np.uint8)
            try:
                resident = mincore(view.ctypes.data, self.layout.file_bytes)
            finally:
                del view
        return float((resident & 1).mean())

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
