"""Compile (or load from numba's cache) every SSD kernel for the argument types the
read path passes, on tiny inputs: read-only buffers (a read-only mapping of the table
file, a ``bytes`` chunk) and writable ones are distinct types to numba, so both are
warmed where both occur. ``test/ssd/test_kernels.py`` checks that lookups through every
reader, the RAM cache and read-ahead handles then compile nothing more.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from engram.ssd.kernels import cache, plan, xxh3

_done = threading.Event()
_lock = threading.Lock()
startup_seconds = 0.0  # what the first call in this process took (compile or cache load)


def _readonly(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view


def warm_up() -> None:
    global startup_seconds
    if _done.is_set():
        return
    with _lock:
        if _done.is_set():
            return
        started = time.perf_counter()
        _warm()
        startup_seconds = time.perf_counter() - started
        _done.set()


def _warm() -> None:
    block = 4096
    words = np.zeros(2 * block // 8, dtype=np.uint64)
    i64 = np.zeros(2, dtype=np.int64)
    hashes = np.zeros(2, dtype=np.uint64)
    flags = np.zeros(2, dtype=bool)
    for buffer in (words, _readonly(words)):
        xxh3.hash_blocks(buffer, i64[:1], block, hashes)
        xxh3.check_blocks(buffer, i64[:1], i64[:1], block, hashes, flags, True)
    rows = np.zeros((2, 8), dtype=np.uint8)
    for source in (words.view(np.uint8), _readonly(words.view(np.uint8))):
        plan.gather(source, i64[:1], rows, i64[:1], 0, 1)
    runs = np.zeros((8, 3), dtype=np.int64)
    batches = np.zeros((2, 3), dtype=np.int64)
    for skip in (np.zeros(0, dtype=bool), flags):
        plan.plan(
            i64[:1],
            1,
            8,
            block,
            2,
            skip,
            2,
            1,
            1,
            1,
            True,
            i64.copy(),
            i64.copy(),
            runs,
            batches,
            i64.copy(),
        )
    plan.mark_runs(flags, runs[:0])
    plan.address_ranges(runs[:0], 0, block, block, np.zeros((0, 2), dtype=np.uint64))
    tags = np.full((1, 2), -1, dtype=np.int64)
    stamps = np.zeros((1, 2), dtype=np.int64)
    cache.take(tags, stamps, 1, rows, i64[:1], flags[:1].copy(), rows, i64.copy())
    cache.admit(tags, stamps, 2, rows, i64[:1], rows, i64[:1])
    cache.any_held(i64, i64[:1], flags[:1])
    cache.take_held(i64, rows, i64[:1], flags[:1].copy(), rows)
