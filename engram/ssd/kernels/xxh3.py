"""Block hashes (XXH3-64) computed in compiled loops (numba), without the GIL.

The SSD tier's block hashes are ``xxhash.xxh3_64_intdigest`` of each 4 KiB block. From
Python a call costs more than the hash itself, and the ``xxhash`` package holds the GIL
for inputs this small (two threads hash no faster than one, and stall every other
thread), so these loops call the C function ``XXH3_64bits`` of that same package's
extension module (it exports the xxHash library it is built from) directly: the same
function, so the same hashes bit for bit, at its SIMD speed, a whole batch of blocks in
one call. Measured on this 2-core VM (``/tmp``-free microbenchmark, 4 KiB blocks):
0.31 us per block in cache and 0.52 us streaming, against 0.83 / 0.76 us for a Python
loop over ``xxhash`` and 1.59 / 1.13 us for XXH3 written out in numba (LLVM does not
vectorise it there).

NOTE: the function is bound by name into numba's linker (``llvmlite`` ``add_symbol``)
before any kernel is compiled or loaded from numba's on-disk cache, which records the
name, never the address. ``test/ssd/test_kernels.py`` checks the hashes against
``xxhash``'s own Python API on fresh random data.
"""

from __future__ import annotations

import ctypes

import numba
import numpy as np
import xxhash
from llvmlite import binding

from engram.ssd.kernels.types import FLAG, FLAGS, I64_IN, INT, ROWS, U8_IN, U64, U64_IN

SYMBOL = "engram_xxh3_64bits"


def _bind() -> numba.types.ExternalFunction:
    library = ctypes.CDLL(xxhash._xxhash.__file__)
    address = ctypes.cast(library.XXH3_64bits, ctypes.c_void_p).value
    binding.add_symbol(SYMBOL, address)
    return numba.types.ExternalFunction(
        SYMBOL, numba.types.uint64(numba.types.voidptr, numba.types.uintp)
    )


_xxh3_64 = _bind()


@numba.njit([numba.void(U8_IN, I64_IN, INT, U64)], nogil=True, cache=True)
def hash_blocks(data: np.ndarray, offsets: np.ndarray, block_bytes: int, out: np.ndarray) -> None:
    """``out[i]`` = XXH3-64 of the ``block_bytes`` bytes at byte ``offsets[i]`` of ``data``."""
    base = data.ctypes.data
    for i in range(offsets.size):
        out[i] = _xxh3_64(base + offsets[i], block_bytes)


@numba.njit(
    [numba.types.UniTuple(INT, 2)(U8_IN, I64_IN, I64_IN, INT, U64_IN, FLAGS, FLAG)],
    nogil=True,
    cache=True,
)
def check_blocks(
    data: np.ndarray,
    blocks: np.ndarray,
    offsets: np.ndarray,
    block_bytes: int,
    expected: np.ndarray,
    verified: np.ndarray,
    remember: bool,
) -> tuple[int, int]:
    """Hash each of ``blocks`` (at byte ``offsets[j]`` of ``data``) and compare with
    ``expected[block]``. With ``remember``, blocks already ``verified`` are skipped and
    the ones that match are flagged. Returns (blocks hashed, mismatches)."""
    base = data.ctypes.data
    hashed = bad = 0
    for j in range(blocks.size):
        block = blocks[j]
        if remember and verified[block]:
            continue
        hashed += 1
        if _xxh3_64(base + offsets[j], block_bytes) == expected[block]:
            if remember:
                verified[block] = True
        else:
            bad += 1
    return hashed, bad


@numba.njit(
    [
        numba.types.UniTuple(INT, 2)(
            U8_IN, I64_IN, I64_IN, I64_IN, INT, INT, U64_IN, FLAGS, FLAG, ROWS, I64_IN, INT, INT
        )
    ],
    nogil=True,
    cache=True,
)
def check_and_gather(
    data: np.ndarray,
    ids: np.ndarray,
    row_at: np.ndarray,
    block_at: np.ndarray,
    rows_per_block: int,
    block_bytes: int,
    expected: np.ndarray,
    verified: np.ndarray,
    remember: bool,
    out: np.ndarray,
    at: np.ndarray,
    lo: int,
    hi: int,
) -> tuple[int, int]:
    """For sorted distinct ``ids[lo:hi]``: check each one's block the first time it
    comes up (at byte ``block_at[j]`` of ``data``, its ``j``-th distinct block counted
    from ``ids[lo]``'s; skipped if ``remember`` and already ``verified``), then copy the
    row at byte ``row_at[i]`` of ``data`` to ``out[at[i]]`` (``at`` empty: ``out[i]``)
    while the block is still in the CPU's cache. Stops at the first block that does not
    match. Returns (blocks hashed, mismatches)."""
    base = data.ctypes.data
    width = numba.uint64(out.shape[1])
    direct = at.size == 0
    hashed = 0
    current = -1
    j = -1
    for i in range(lo, hi):
        block = ids[i] // rows_per_block
        if block != current:
            current = block
            j += 1
            if not (remember and verified[block]):
                hashed += 1
                if _xxh3_64(base + block_at[j], block_bytes) != expected[block]:
                    return hashed, 1
                if remember:
                    verified[block] = True
        start = numba.uint64(row_at[i])
        row = numba.uint64(i if direct else at[i])
        for b in range(width):  # NOTE: unsigned indices, as in plan.gather: vectorised
            out[row, b] = data[start + b]
    return hashed, 0
