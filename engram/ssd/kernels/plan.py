"""Read planning and row gathering for the SSD readers, in compiled loops (numba).

:func:`plan` turns the sorted distinct row ids of one read into the blocks they need,
the runs of blocks to read (consecutive blocks, or a whole window of the file where a
window needs many of its blocks; at most ``max_run`` blocks each), the batches the runs
are read in (each into a buffer of at most about ``batch_blocks`` blocks) and where each
row and each block then sits: all into caller-owned arrays, in one call, with no
allocation. :func:`gather` copies rows out of a buffer (or the mapped file) into their
places in the caller's rows.
"""

from __future__ import annotations

import numba
import numpy as np

from engram.ssd.kernels.constants import COUNT, END_BLOCK, END_ROW, END_RUN, FIRST, SLOT
from engram.ssd.kernels.types import (
    FLAG,
    FLAGS,
    FLAGS_IN,
    I64,
    I64_2,
    I64_2_IN,
    I64_IN,
    INT,
    ROWS,
    U8_IN,
    U64_2,
)


@numba.njit(nogil=True)
def _emit(runs: np.ndarray, r: int, first: int, count: int, max_run: int) -> int:
    """Add blocks ``first .. first + count`` to ``runs[:r]`` (extending the last run
    where it ends at ``first``); returns the new run count."""
    if r > 0 and runs[r - 1, FIRST] + runs[r - 1, COUNT] == first:
        grow = min(count, max_run - runs[r - 1, COUNT])
        runs[r - 1, COUNT] += grow
        first += grow
        count -= grow
    while count > 0:
        part = min(count, max_run)
        runs[r, FIRST] = first
        runs[r, COUNT] = part
        r += 1
        first += part
        count -= part
    return r


@numba.njit(
    [
        numba.types.UniTuple(INT, 3)(
            I64_IN,
            INT,
            INT,
            INT,
            INT,
            FLAGS_IN,
            INT,
            INT,
            INT,
            INT,
            FLAG,
            I64,
            I64,
            I64_2,
            I64_2,
            I64,
        )
    ],
    nogil=True,
    cache=True,
)
def plan(
    ids: np.ndarray,
    rows_per_block: int,
    row_bytes: int,
    block_bytes: int,
    num_blocks: int,
    skip: np.ndarray,
    window: int,
    dense: int,
    max_run: int,
    batch_blocks: int,
    in_file: bool,
    blocks: np.ndarray,
    block_at: np.ndarray,
    runs: np.ndarray,
    batches: np.ndarray,
    row_at: np.ndarray,
) -> tuple[int, int, int]:
    """Plan reading the rows of sorted distinct ``ids``.

    ``skip`` (a flag per block of the file, or empty): blocks not to read (already in
    memory). The ``window`` blocks from a multiple of ``window`` are read whole where
    at least ``dense`` of them are to be read (``window`` 0: never). Fills
    ``blocks[:k]`` (the distinct blocks of ``ids``), ``runs[:r]`` (``FIRST``,
    ``COUNT``, ``SLOT``: its first block's place in its batch's buffer),
    ``batches[:b]`` (exclusive ends: ``END_RUN`` in ``runs``, ``END_ROW`` in ``ids``,
    ``END_BLOCK`` in ``blocks``), ``row_at`` and ``block_at[:k]`` (each row's and
    block's byte offset: in the file if ``in_file``, else in its batch's buffer, -1
    for a skipped block). Room needed: ``len(ids)`` in ``blocks``, ``block_at`` and
    ``row_at``; in ``runs`` and ``batches``, ``len(ids)`` times the most runs a whole
    window may take per block it was needed for, plus 16. Returns (k, r, b).
    """
    n = ids.size
    k = 0
    for i in range(n):
        block = ids[i] // rows_per_block
        if k == 0 or blocks[k - 1] != block:
            blocks[k] = block
            k += 1
    use_skip = skip.size > 0
    r = 0
    j = 0
    while j < k:
        if use_skip and skip[blocks[j]]:
            j += 1
            continue
        end = k
        if window > 0:
            start = blocks[j] // window * window
            end = j
            wanted = 0
            while end < k and blocks[end] < start + window:
                if not (use_skip and skip[blocks[end]]):
                    wanted += 1
                end += 1
            if wanted >= dense:
                r = _emit(runs, r, start, min(window, num_blocks - start), max_run)
                j = end
                continue
        while j < end:
            if use_skip and skip[blocks[j]]:
                j += 1
                continue
            first = blocks[j]
            count = 1
            j += 1
            while j < end and blocks[j] == first + count and not (use_skip and skip[blocks[j]]):
                count += 1
                j += 1
            r = _emit(runs, r, first, count, max_run)
    # Batches: a run belongs to the batch where its first block falls.
    b = 0
    filled = 0
    for q in range(r):
        if filled > 0 and filled + runs[q, COUNT] > batch_blocks:
            batches[b, END_RUN] = q
            b += 1
            filled = 0
        runs[q, SLOT] = filled
        filled += runs[q, COUNT]
    if r > 0:
        batches[b, END_RUN] = r
        b += 1
    for x in range(b):
        batches[x, END_ROW] = 0
        batches[x, END_BLOCK] = 0
    # Where each row and block sits, and which batch it belongs to.
    q = 0
    batch = 0
    kb = -1
    block = -1
    for i in range(n):
        current = ids[i] // rows_per_block
        if current != block:
            block = current
            kb += 1
            place = block * block_bytes if in_file else -1
            if r > 0 and not (use_skip and skip[block]):
                while runs[q, FIRST] + runs[q, COUNT] <= block:
                    q += 1
                while batches[batch, END_RUN] <= q:
                    batch += 1
                if not in_file:
                    place = (runs[q, SLOT] + block - runs[q, FIRST]) * block_bytes
            block_at[kb] = place
        row_at[i] = (
            block_at[kb] + (ids[i] % rows_per_block) * row_bytes if block_at[kb] >= 0 else -1
        )
        if b > 0:
            batches[batch, END_ROW] = i + 1
            batches[batch, END_BLOCK] = kb + 1
    for x in range(1, b):
        batches[x, END_ROW] = max(batches[x, END_ROW], batches[x - 1, END_ROW])
        batches[x, END_BLOCK] = max(batches[x, END_BLOCK], batches[x - 1, END_BLOCK])
    if b > 0:
        batches[b - 1, END_ROW] = n
        batches[b - 1, END_BLOCK] = k
    return k, r, b


@numba.njit([numba.void(U8_IN, I64_IN, ROWS, I64_IN, INT, INT)], nogil=True, cache=True)
def gather(
    source: np.ndarray, offsets: np.ndarray, out: np.ndarray, at: np.ndarray, lo: int, hi: int
) -> None:
    """For ``i`` in ``lo .. hi``: ``out[at[i]]`` = the row at byte ``offsets[i]`` of
    ``source`` (``at`` empty: ``out[i]``)."""
    width = numba.uint64(out.shape[1])
    direct = at.size == 0
    for i in range(lo, hi):
        start = numba.uint64(offsets[i])
        row = numba.uint64(i if direct else at[i])
        # NOTE: a loop compiles far faster than a slice copy; unsigned indices let LLVM
        # vectorise it (a signed index is wrapped around at every access: 10x slower).
        # Each kernel module keeps its own copy loop: numba's on-disk cache of a kernel
        # is not invalidated when a helper it calls in another file changes.
        for b in range(width):
            out[row, b] = source[start + b]


@numba.njit([numba.void(FLAGS, I64_2_IN)], nogil=True, cache=True)
def mark_runs(flags: np.ndarray, runs: np.ndarray) -> None:
    """Set ``flags`` of every block of ``runs``."""
    for q in range(runs.shape[0]):
        for block in range(runs[q, FIRST], runs[q, FIRST] + runs[q, COUNT]):
            flags[block] = True


@numba.njit([numba.void(I64_2_IN, INT, INT, INT, U64_2)], nogil=True, cache=True)
def address_ranges(
    runs: np.ndarray, base: int, block_bytes: int, page_bytes: int, out: np.ndarray
) -> None:
    """``out[q]`` = (address, length) of run ``q`` of a mapping at ``base``, widened to
    whole pages of ``page_bytes``."""
    for q in range(runs.shape[0]):
        start = base + runs[q, FIRST] * block_bytes
        end = start + runs[q, COUNT] * block_bytes
        first = start // page_bytes * page_bytes
        out[q, 0] = first
        out[q, 1] = -(-(end - first) // page_bytes) * page_bytes
