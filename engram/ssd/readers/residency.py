"""Which blocks of a mapped table file are in the page cache, as far as we know.

The mmap reader skips the advice system calls for blocks marked here, so warm lookups
cost no more than a memory gather. Blocks get marked when the reader faults them in,
and a background *sweeper* keeps the map close to the truth: it walks the file with
``mincore`` a slice at a time (using at most ``duty`` of one core), marking blocks the
page cache holds and clearing blocks the kernel evicted.

With ``verified`` (the table's per-block checked flags, :mod:`engram.ssd.block_hashes`)
a sweep also clears the flag of every block it finds evicted: its next copy comes from
the disk and is checked again.

NOTE: the map can be stale for up to one sweep. A block evicted since is faulted in
again by the gather itself: correct, but one page at a time, and a disk error at that
moment would be a SIGBUS; a block still flagged checked then is not hashed again. A
block in the page cache is always safe to touch.
"""

from __future__ import annotations

import mmap
import threading
import time

import numpy as np

from engram.ssd.layout import DiskLayout
from engram.ssd.sysmem import mincore

SWEEP_BLOCKS = 1 << 16  # one mincore call covers this many blocks
DEFAULT_DUTY = 0.05


class ResidencyMap:
    def __init__(
        self,
        layout: DiskLayout,
        base: int,
        *,
        duty: float = DEFAULT_DUTY,
        verified: np.ndarray | None = None,
    ):
        self.layout = layout
        self._base = base
        self.resident = np.zeros(layout.num_blocks, dtype=bool)
        self._verified = verified
        self._generation = 0  # bumped by forget(): sweeps that started before are void
        self._lock = threading.Lock()
        self._duty = duty
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._duty > 0 and self._thread is None:
            self._thread = threading.Thread(
                target=self._sweep_forever, daemon=True, name="engram-residency"
            )
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def unknown(self, blocks: np.ndarray) -> np.ndarray:
        """Mask of ``blocks`` not known to be resident."""
        return ~self.resident[blocks]

    def mark(self, blocks: np.ndarray) -> None:
        self.resident[blocks] = True

    def forget(self) -> None:
        with self._lock:
            self._generation += 1
            self.resident[:] = False
            if self._verified is not None:
                self._verified[:] = False

    def refresh(self) -> None:
        """One full sweep now (synchronous)."""
        for first in range(0, self.layout.num_blocks, SWEEP_BLOCKS):
            self._sweep(first)

    def _sweep_forever(self) -> None:
        first = 0
        while not self._stop.is_set():
            start = time.perf_counter()
            try:
                self._sweep(first)
            except OSError:
                return  # the mapping is going away (table closing)
            first = (first + SWEEP_BLOCKS) % self.layout.num_blocks
            busy = time.perf_counter() - start
            self._stop.wait(busy * (1 - self._duty) / self._duty)

    def _sweep(self, first: int) -> None:
        layout = self.layout
        count = min(SWEEP_BLOCKS, layout.num_blocks - first)
        with self._lock:
            generation = self._generation
            before = self.resident[first : first + count].copy()
        pages = mincore(self._base + first * layout.block_bytes, count * layout.block_bytes) & 1
        if layout.block_bytes >= mmap.PAGESIZE:
            cached = pages.reshape(count, layout.block_bytes // mmap.PAGESIZE).all(axis=1)
        else:  # kernel pages larger than our 4 KiB blocks
            cached = pages.astype(bool)[np.arange(count) * layout.block_bytes // mmap.PAGESIZE]
        with self._lock:
            if generation == self._generation:
                # NOTE: keep what the reader marked while mincore ran (reads it had in
                # flight may have looked uncached to mincore).
                now = self.resident[first : first + count]
                self.resident[first : first + count] = cached | (now & ~before)
                if self._verified is not None:
                    self._verified[first : first + count] &= self.resident[first : first + count]
