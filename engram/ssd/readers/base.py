"""What every read strategy of the SSD tier provides.

A reader copies rows of *sorted, distinct* row ids from a table's data file into a
caller's uint8 buffer ``[n, row_bytes]``. It reads whole blocks (pages) only, grouping
the ids by block and consecutive blocks into runs. With ``checks``
(:class:`engram.ssd.block_hashes.BlockChecks`) it hashes every block it needs that is
not yet checked, after reading it and before copying a row out of it, and raises
:class:`engram.ssd.faults.EngramChecksumError` for one that does not match. I/O errors
surface as :class:`engram.ssd.faults.PageReadError`, never as a signal.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

from engram.files import MIB
from engram.ssd.block_hashes import BlockChecks
from engram.ssd.layout import DiskLayout
from engram.ssd.sysmem import mincore

WINDOW_BYTES = MIB
DENSE_FRACTION = 0.4  # a window needing this share of its blocks is read whole


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

    @abstractmethod
    def read_rows(self, ids: np.ndarray, out: torch.Tensor) -> None:
        """Copy the rows of sorted distinct int64 ``ids`` into ``out`` [len(ids), row_bytes]."""

    def warm(self, ids: np.ndarray) -> None:
        """Bring the pages of ``ids`` into the page cache without keeping a copy."""
        scratch = torch.empty((len(ids), self.layout.row_bytes), dtype=torch.uint8, device="cpu")
        self.read_rows(ids, scratch)

    def refresh_residency(self) -> None:  # noqa: B027 - only the mmap reader keeps a map
        """Re-learn which pages the page cache holds (readers that track it)."""

    def drop_page_cache(self) -> None:
        """Evict this file's pages from the page cache (benchmarks and tests); their
        next copies come from the disk, so they are checked again."""
        os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_DONTNEED)
        if self.checks is not None:
            self.checks.forget()

    def unverified(self, blocks: np.ndarray) -> np.ndarray:
        """The distinct blocks of sorted ``blocks`` still to be checked (none without
        checks)."""
        if self.checks is None:
            return blocks[:0]
        return self.checks.unverified(blocks)

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


def block_runs(ids: np.ndarray, rows_per_block: int, max_blocks: int = 0) -> np.ndarray:
    """Runs of consecutive blocks holding sorted ``ids``: int64 ``[k, 2]`` of
    (first block, block count); runs are cut at ``max_blocks`` when it is set."""
    blocks = ids // rows_per_block
    if blocks.size == 0:
        return np.zeros((0, 2), dtype=np.int64)
    keep = np.empty(blocks.size, dtype=bool)
    keep[0] = True
    np.not_equal(blocks[1:], blocks[:-1], out=keep[1:])
    blocks = blocks[keep]
    starts = np.flatnonzero(np.diff(blocks, prepend=blocks[0] - 2) != 1)
    lengths = np.diff(np.append(starts, blocks.size))
    runs = np.stack([blocks[starts], lengths], axis=1)
    return split_runs(runs, max_blocks) if max_blocks else runs


def plan_runs(blocks: np.ndarray, layout: DiskLayout) -> np.ndarray:
    """Runs to read for sorted distinct ``blocks``: whole ``WINDOW_BYTES`` windows of
    the file where a window needs ``DENSE_FRACTION`` of its blocks or more (sequential
    bandwidth beats one request per block there), else runs of consecutive blocks."""
    window = max(1, WINDOW_BYTES // layout.block_bytes)
    windows, counts = np.unique(blocks // window, return_counts=True)
    dense = windows[counts >= DENSE_FRACTION * window]
    if dense.size == 0:
        return block_runs(blocks, 1)
    sparse = blocks[~np.isin(blocks // window, dense)]
    first = dense * window
    whole = np.stack([first, np.minimum(window, layout.num_blocks - first)], axis=1)
    runs = np.concatenate([whole, block_runs(sparse, 1)])
    return runs[np.argsort(runs[:, 0], kind="stable")]


def split_runs(runs: np.ndarray, max_blocks: int) -> np.ndarray:
    """``runs`` cut into pieces of at most ``max_blocks`` blocks."""
    lengths = runs[:, 1]
    if runs.size == 0 or int(lengths.max()) <= max_blocks:
        return runs
    pieces = -(-lengths // max_blocks)
    within = np.arange(pieces.sum()) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    start = np.repeat(runs[:, 0], pieces) + within * max_blocks
    end = np.minimum(start + max_blocks, np.repeat(runs[:, 0] + lengths, pieces))
    return np.stack([start, end - start], axis=1)


def expand_runs(runs: np.ndarray) -> np.ndarray:
    """Every block covered by ``runs`` (``[k, 2]`` of first block, count)."""
    counts = runs[:, 1]
    starts = np.repeat(runs[:, 0] - (np.cumsum(counts) - counts), counts)
    return starts + np.arange(int(counts.sum()))


def row_window(buffer: torch.Tensor, row_bytes: int) -> torch.Tensor:
    """A ``[len - row_bytes + 1, row_bytes]`` view whose row ``i`` starts at byte ``i``:
    ``index_select`` with byte offsets then gathers whole rows in one call."""
    return buffer.as_strided((buffer.numel() - row_bytes + 1, row_bytes), (1, 1))
