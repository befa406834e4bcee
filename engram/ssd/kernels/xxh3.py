"""XXH3-64 (seed 0, default secret) of whole blocks, compiled with numba.

The SSD tier's block hashes are ``xxhash.xxh3_64_intdigest`` of each 4 KiB block. Called
once per block from Python, the hash costs less than the call around it, and the
``xxhash`` package holds the GIL for inputs this small, so a thread hashing blocks
stalls every other thread of the process. :func:`hash_blocks` hashes a whole batch of
blocks in one call without the GIL. Only the long-input branch of XXH3 is here (inputs
over 240 bytes, a multiple of 8 bytes long at 8-byte aligned offsets): blocks are whole
4 KiB pages. The result equals ``xxhash``'s bit for bit (``test/ssd/test_kernels.py``
checks it against the package on fresh random data).

The algorithm is the public XXH3 specification (xxHash's ``doc/xxhash_spec.md``): eight
64-bit accumulators; each 64-byte stripe adds, per lane, the product of the low and high
halves of (data ^ secret word) to its own lane and the raw data word to its neighbour's
(lane ^ 1); every 1,024 bytes the accumulators are scrambled; the last stripe of the
input is added once more with its own secret words; the lanes are folded pairwise by a
128-bit product and avalanched.
"""

from __future__ import annotations

import numba
import numpy as np

from engram.ssd.kernels.types import FLAG, FLAGS, I64_IN, INT, ROWS, U8_IN, U64, U64_IN

# NOTE: the specification's 192-byte default secret; read below as little-endian words.
_SECRET = bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
    "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e"
    "2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e"
)


def _words(offset: int, count: int) -> np.ndarray:
    return np.frombuffer(_SECRET[offset : offset + 8 * count], dtype="<u8").astype(np.uint64)


STRIPE_KEYS = _words(0, 24)  # stripe s of a 1,024-byte round uses words s .. s + 7
SCRAMBLE_KEYS = _words(128, 8)  # the last 64 bytes of the secret
LAST_STRIPE_KEYS = _words(121, 8)  # 64 bytes ending 7 bytes before the secret's end
MERGE_KEYS = _words(11, 8)
INITIAL = np.array(
    [
        0xC2B2AE3D,
        0x9E3779B185EBCA87,
        0xC2B2AE3D27D4EB4F,
        0x165667B19E3779F9,
        0x85EBCA77C2B2AE63,
        0x85EBCA77,
        0x27D4EB2F165667C5,
        0x9E3779B1,
    ],
    dtype=np.uint64,
)
PRIME32_1 = np.uint64(0x9E3779B1)
PRIME64_1 = np.uint64(0x9E3779B185EBCA87)
PRIME_MX1 = np.uint64(0x165667919E3779F9)
LOW32 = np.uint64(0xFFFFFFFF)
ROUND_WORDS = 128  # 1,024 bytes: 16 stripes of 8 words


@numba.njit
def _stripe(acc: np.ndarray, data: np.ndarray, at: int, keys: np.ndarray, key: int) -> None:
    for lane in range(8):
        word = data[at + lane]
        mixed = word ^ keys[key + lane]
        acc[lane ^ 1] += word
        acc[lane] += (mixed & LOW32) * (mixed >> np.uint64(32))


@numba.njit
def _fold(a: np.uint64, b: np.uint64) -> np.uint64:
    """The low and high halves of the 128-bit product ``a * b``, xored."""
    a_lo, a_hi = a & LOW32, a >> np.uint64(32)
    b_lo, b_hi = b & LOW32, b >> np.uint64(32)
    lo_lo, lo_hi, hi_lo = a_lo * b_lo, a_lo * b_hi, a_hi * b_lo
    cross = (lo_lo >> np.uint64(32)) + (lo_hi & LOW32) + hi_lo
    high = a_hi * b_hi + (lo_hi >> np.uint64(32)) + (cross >> np.uint64(32))
    low = (cross << np.uint64(32)) | (lo_lo & LOW32)
    return low ^ high


@numba.njit(nogil=True)
def _hash(data: np.ndarray, start: int, words: int, acc: np.ndarray) -> np.uint64:
    """XXH3-64 of ``data[start : start + words]`` (uint64 words, ``8 * words`` bytes)."""
    for lane in range(8):
        acc[lane] = INITIAL[lane]
    nbytes = 8 * words
    rounds = (nbytes - 1) // 1024
    for r in range(rounds):
        base = start + r * ROUND_WORDS
        for s in range(16):
            _stripe(acc, data, base + 8 * s, STRIPE_KEYS, s)
        for lane in range(8):
            value = acc[lane]
            value ^= value >> np.uint64(47)
            value ^= SCRAMBLE_KEYS[lane]
            acc[lane] = value * PRIME32_1
    base = start + rounds * ROUND_WORDS
    for s in range(((nbytes - 1) - 1024 * rounds) // 64):
        _stripe(acc, data, base + 8 * s, STRIPE_KEYS, s)
    _stripe(acc, data, start + words - 8, LAST_STRIPE_KEYS, 0)
    result = np.uint64(nbytes) * PRIME64_1
    for pair in range(4):
        result += _fold(
            acc[2 * pair] ^ MERGE_KEYS[2 * pair], acc[2 * pair + 1] ^ MERGE_KEYS[2 * pair + 1]
        )
    result ^= result >> np.uint64(37)
    result *= PRIME_MX1
    return result ^ (result >> np.uint64(32))


@numba.njit([numba.void(U64_IN, I64_IN, INT, U64)], nogil=True, cache=True)
def hash_blocks(data: np.ndarray, offsets: np.ndarray, block_bytes: int, out: np.ndarray) -> None:
    """``out[i]`` = XXH3-64 of the ``block_bytes`` bytes at byte ``offsets[i]`` of
    ``data`` (uint64 words: the buffer viewed as words; offsets multiples of 8)."""
    acc = np.empty(8, dtype=np.uint64)
    words = block_bytes // 8
    for i in range(offsets.size):
        out[i] = _hash(data, offsets[i] // 8, words, acc)


@numba.njit(
    [numba.types.UniTuple(INT, 3)(U64_IN, I64_IN, I64_IN, INT, U64_IN, FLAGS, FLAG)],
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
) -> tuple[int, int, int]:
    """Hash each of ``blocks`` (at byte ``offsets[j]`` of ``data``, uint64 words) and
    compare with ``expected[block]``. With ``remember``, blocks already ``verified``
    are skipped and the ones that match are flagged. Returns (blocks hashed, mismatches,
    the first mismatching block or -1)."""
    acc = np.empty(8, dtype=np.uint64)
    words = block_bytes // 8
    hashed = bad = 0
    first_bad = -1
    for j in range(blocks.size):
        block = blocks[j]
        if remember and verified[block]:
            continue
        hashed += 1
        if _hash(data, offsets[j] // 8, words, acc) == expected[block]:
            if remember:
                verified[block] = True
        else:
            if bad == 0:
                first_bad = block
            bad += 1
    return hashed, bad, first_bad


@numba.njit(
    [
        numba.types.UniTuple(INT, 3)(
            U64_IN,
            U8_IN,
            I64_IN,
            I64_IN,
            I64_IN,
            INT,
            INT,
            U64_IN,
            FLAGS,
            FLAG,
            ROWS,
            I64_IN,
            INT,
            INT,
        )
    ],
    nogil=True,
    cache=True,
)
def check_and_gather(
    data: np.ndarray,
    data_bytes: np.ndarray,
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
) -> tuple[int, int, int]:
    """For sorted distinct ``ids[lo:hi]``: check each one's block the first time it
    comes up (at byte ``block_at[j]`` of ``data``, its ``j``-th distinct block counted
    from ``ids[lo]``'s; skipped if ``remember`` and already ``verified``), then copy the
    row at byte ``row_at[i]`` of ``data_bytes`` (the same buffer) to ``out[at[i]]``
    (``at`` empty: ``out[i]``) while the block is still in the CPU's cache. Stops at
    the first block that does not match. Returns (blocks hashed, mismatches, that
    block or -1)."""
    acc = np.empty(8, dtype=np.uint64)
    words = block_bytes // 8
    width = out.shape[1]
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
                if _hash(data, block_at[j] // 8, words, acc) != expected[block]:
                    return hashed, 1, block
                if remember:
                    verified[block] = True
        start = row_at[i]
        row = i if direct else at[i]
        for b in range(width):
            out[row, b] = data_bytes[start + b]
    return hashed, 0, -1
