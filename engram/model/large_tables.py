"""Engram tables of a chosen size for the random tiny model (``build --engram-table-gib``).

The table size follows from the prime search start (``engram_vocab_size``): every hash
column of every layer gets a prime bucket just above it, so the tables hold about
``layers x (N - 1) x heads x start`` rows of :func:`engram.fp8.row_bytes` bytes each.
Their rows are random bytes, drawn chunk by chunk (one generator per chunk, seeded from
the build seed, the layer and the chunk), so a table of many GiB is written without
ever being whole in memory, and the same options give the same bytes.

Every row is valid FP8: no e4m3 byte is a NaN (``0x7F``/``0xFF`` become ``0x7E``/``0xFE``,
+-448) and the ue8m0 exponents lie in 118..121 (2^-9 .. 2^-6; never 255, the NaN),
which keeps the dequantised values within +-7 and their RMS near 1.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from engram.files import GIB
from engram.fp8 import FP8_BLOCK, row_bytes

CHUNK_ROWS = 1 << 20  # rows per generator: fixed, so the bytes do not depend on memory
SCALE_LOW = 118  # exponent bytes are SCALE_LOW + (0..3)
_ONES = np.uint64(0x0101010101010101)
_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_HIGH = np.uint64(0x8080808080808080)
_TWO_BITS = np.uint64(0x0303030303030303)
_WEIGHT, _SCALE = 0, 1


def vocab_for_table_gib(gib: float, n_layers: int, n_cols: int, head_dim: int) -> int:
    """The prime search start that makes the tables of ``n_layers`` layers with
    ``n_cols`` hash columns each about ``gib`` GiB in all."""
    return max(2, round(gib * GIB / (n_layers * n_cols * row_bytes(head_dim))))


def weight_chunks(seed: int, layer: int, num_rows: int, head_dim: int) -> Iterator[np.ndarray]:
    """The e4m3 bytes of one table, ``CHUNK_ROWS`` rows at a time."""
    for index, rows in _chunks(num_rows):
        words = _random_words(seed, layer, _WEIGHT, index, rows * head_dim)
        yield _no_nan(words)[: rows * head_dim]


def scale_chunks(seed: int, layer: int, num_rows: int, head_dim: int) -> Iterator[np.ndarray]:
    """The ue8m0 exponent bytes of one table, ``CHUNK_ROWS`` rows at a time."""
    per_row = head_dim // FP8_BLOCK
    low = np.uint64(SCALE_LOW * int(_ONES))
    for index, rows in _chunks(num_rows):
        words = _random_words(seed, layer, _SCALE, index, rows * per_row)
        # NOTE: two random bits plus SCALE_LOW per byte: no carry crosses a byte.
        yield ((words & _TWO_BITS) + low).view(np.uint8)[: rows * per_row]


def _chunks(num_rows: int) -> Iterator[tuple[int, int]]:
    for index, start in enumerate(range(0, num_rows, CHUNK_ROWS)):
        yield index, min(CHUNK_ROWS, num_rows - start)


def _random_words(seed: int, layer: int, kind: int, index: int, nbytes: int) -> np.ndarray:
    """Random uint64 words covering ``nbytes`` bytes (the last word may be cut)."""
    rng = np.random.default_rng((seed, layer, kind, index))
    return rng.bit_generator.random_raw(-(-nbytes // 8)).astype(np.uint64, copy=False)


def _no_nan(words: np.ndarray) -> np.ndarray:
    """Bytes of ``words`` with every e4m3 NaN (low 7 bits all set) turned into +-448."""
    # NOTE: adding 1 to the low 7 bits of a byte carries into its bit 7 only when they
    # were all set; that bit, moved down to bit 0, clears the byte's lowest bit.
    nan = ((words & _LOW7) + _ONES) & _HIGH
    words ^= nan >> np.uint64(7)
    return words.view(np.uint8)
