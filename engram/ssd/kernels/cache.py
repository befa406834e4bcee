"""Taking rows from what a lookup holds in memory, in compiled loops (numba): the RAM
row cache (one pass per lookup to take hits, one per read to admit rows) and the rows
of read-ahead handles (sorted ids, looked up by binary search behind a one-hash bit
filter: a lookup asks every live handle for every row it still needs, and most ids are
not in most handles).

Row ``r`` may live only in set ``r % n_sets``, in one of its ``ways`` slots; ``tags``
``[n_sets, ways]`` holds each slot's row id (``MISS``: empty) and ``stamps`` the clock
of its last use (distinct: every row a call stamps gets its own clock value, so the
least recently used slot is never a tie). Engram row ids are hashes, so consecutive sets see unrelated rows.
Rows are opaque ``row_bytes`` each. Every loop runs without the GIL.
"""

from __future__ import annotations

import numba
import numpy as np

from engram.ssd.kernels.constants import MISS
from engram.ssd.kernels.types import (
    FLAGS,
    FLAGS_IN,
    I64,
    I64_2,
    I64_IN,
    INT,
    ROWS,
    ROWS_IN,
    U64,
    U64_IN,
)


@numba.njit(nogil=True)
def _copy_row(out: np.ndarray, i: int, rows: np.ndarray, j: int) -> None:
    # NOTE: a byte loop, not `out[i, :] = rows[j]` (numba compiles slice assignment ~40x
    # slower and runs it slower). Unsigned indices: a signed one is wrapped around at
    # every access, which keeps LLVM from vectorising the loop (10x slower).
    dst, src = numba.uint64(i), numba.uint64(j)
    for b in range(numba.uint64(out.shape[1])):
        out[dst, b] = rows[src, b]


@numba.njit(
    [numba.types.UniTuple(INT, 2)(I64_2, I64_2, INT, ROWS, I64_IN, FLAGS, ROWS, I64)],
    nogil=True,
    cache=True,
)
def take(
    tags: np.ndarray,
    stamps: np.ndarray,
    clock: int,
    rows: np.ndarray,
    ids: np.ndarray,
    need: np.ndarray,
    out: np.ndarray,
    missed: np.ndarray,
) -> tuple[int, int]:
    """For each ``ids[i]`` with ``need[i]``: a cached row is copied to ``out[i]``, its
    slot stamped ``clock + i`` (the most recently used) and ``need[i]`` cleared;
    otherwise ``i`` is appended to ``missed``. Returns (hits, misses)."""
    n_sets, ways = tags.shape
    hits = misses = 0
    for i in range(ids.size):
        if not need[i]:
            continue
        row = ids[i]
        home = row % n_sets
        found = -1
        for way in range(ways):
            if tags[home, way] == row:
                found = way
                break
        if found < 0:
            missed[misses] = i
            misses += 1
            continue
        _copy_row(out, i, rows, home * ways + found)
        stamps[home, found] = clock + i
        need[i] = False
        hits += 1
    return hits, misses


@numba.njit([INT(I64_2, I64_2, INT, ROWS, I64_IN, ROWS_IN, I64_IN)], nogil=True, cache=True)
def admit(
    tags: np.ndarray,
    stamps: np.ndarray,
    clock: int,
    rows: np.ndarray,
    ids: np.ndarray,
    source: np.ndarray,
    at: np.ndarray,
) -> int:
    """Cache the row of each distinct ``ids[j]`` (``source[at[j]]``) in its set's least
    recently used slot, stamped ``clock + j``. A row already cached is left as it is (two
    readers of one row never give it two slots); where a set's every slot was filled in
    this call (stamped ``clock`` or later) the row is not cached. Returns rows admitted."""
    n_sets, ways = tags.shape
    admitted = 0
    for j in range(ids.size):
        row = ids[j]
        home = row % n_sets
        victim = 0
        for way in range(ways):
            if tags[home, way] == row:
                victim = -1
                break
            if stamps[home, way] < stamps[home, victim]:
                victim = way
        # NOTE: empty slots are stamped 0 and the clock starts at 1.
        if victim < 0 or stamps[home, victim] >= clock:
            continue
        _copy_row(rows, home * ways + victim, source, at[j])
        tags[home, victim] = row
        stamps[home, victim] = clock + j
        admitted += 1
    return admitted


@numba.njit(nogil=True)
def _find(held: np.ndarray, value: int) -> int:
    """Where sorted ``held`` holds ``value``, or -1 (a binary search)."""
    lo, hi = 0, held.size
    while lo < hi:
        mid = (lo + hi) // 2
        if held[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < held.size and held[lo] == value else -1


@numba.njit(nogil=True)
def _bit(value: int, shift: int) -> numba.uint64:
    """``value``'s bit in a filter of ``2 ** (64 - shift)`` bits (a multiplicative hash:
    the top bits of the product)."""
    return (numba.uint64(value) * numba.uint64(0x9E3779B97F4A7C15)) >> numba.uint64(shift)


@numba.njit(nogil=True)
def _maybe_held(bits: np.ndarray, shift: int, value: int) -> bool:
    b = _bit(value, shift)
    return (bits[b >> numba.uint64(6)] >> (b & numba.uint64(63))) & numba.uint64(1) != 0


@numba.njit([numba.void(I64_IN, U64, INT)], nogil=True, cache=True)
def mark_held(held: np.ndarray, bits: np.ndarray, shift: int) -> None:
    """Set the bit of every ``held`` id in the filter ``bits`` (``2 ** (64 - shift)``
    bits, cleared): :func:`any_held` and :func:`take_held` then binary-search only ids
    whose bit is set."""
    for i in range(held.size):
        b = _bit(held[i], shift)
        bits[b >> numba.uint64(6)] |= numba.uint64(1) << (b & numba.uint64(63))


@numba.njit([numba.boolean(I64_IN, U64_IN, INT, I64_IN, FLAGS_IN)], nogil=True, cache=True)
def any_held(
    held: np.ndarray, bits: np.ndarray, shift: int, ids: np.ndarray, need: np.ndarray
) -> bool:
    """Whether sorted distinct ``held`` (its filter ``bits``, ``shift``) holds any
    ``ids[i]`` still ``need``-ed."""
    for i in range(ids.size):
        if need[i] and _maybe_held(bits, shift, ids[i]) and _find(held, ids[i]) >= 0:
            return True
    return False


@numba.njit([INT(I64_IN, U64_IN, INT, ROWS_IN, I64_IN, FLAGS, ROWS)], nogil=True, cache=True)
def take_held(
    held: np.ndarray,
    bits: np.ndarray,
    shift: int,
    rows: np.ndarray,
    ids: np.ndarray,
    need: np.ndarray,
    out: np.ndarray,
) -> int:
    """Copy the rows of ``ids[i]`` still ``need``-ed that sorted distinct ``held`` (its
    filter ``bits``, ``shift``) holds (``rows[j]`` for ``held[j]``) to ``out[i]`` and
    clear their ``need``. Returns how many."""
    taken = 0
    for i in range(ids.size):
        if need[i] and _maybe_held(bits, shift, ids[i]):
            pos = _find(held, ids[i])
            if pos >= 0:
                _copy_row(out, i, rows, pos)
                need[i] = False
                taken += 1
    return taken


@numba.njit([INT(I64_2, I64_2, ROWS, I64_IN, ROWS_IN, I64_IN)], nogil=True, cache=True)
def seed(
    tags: np.ndarray,
    stamps: np.ndarray,
    rows: np.ndarray,
    ids: np.ndarray,
    source: np.ndarray,
    stamp: np.ndarray,
) -> int:
    """Cache the row of each distinct ``ids[j]`` (``source[j]``) in an empty slot of its
    set, stamped ``stamp[j]``. A row already cached, or one whose set has no empty slot
    (lookups filled it), is left out: seeding never evicts a row. Returns rows cached."""
    n_sets, ways = tags.shape
    cached = 0
    for j in range(ids.size):
        row = ids[j]
        home = row % n_sets
        empty = -1
        for way in range(ways):
            if tags[home, way] == row:
                empty = -1
                break
            if empty < 0 and tags[home, way] == MISS:
                empty = way
        if empty < 0:
            continue
        _copy_row(rows, home * ways + empty, source, j)
        tags[home, empty] = row
        stamps[home, empty] = stamp[j]
        cached += 1
    return cached
