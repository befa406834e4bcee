"""Per-block hashes of an SSD table's data file, and checking blocks as they are read.

A block (:mod:`engram.ssd.layout`: 4 KiB for rows up to a page wide) is what every read
strategy reads, so it is the unit checked: ``blocks.xxh3`` beside ``rows.bin`` holds one
little-endian xxh3-64 hash per block (8 bytes per 4 KiB, 0.2 % of the table), written
with each chunk; the manifest records the digest of that file. xxh3 is used because at
4 KiB a call of the ``xxhash`` package SGLang already installs costs ~0.8 us against ~2.8
us for ``zlib.crc32`` (13 vs 1.3 GB/s in bulk); blocks are hashed in batches by compiled
loops over that package's own C function (:mod:`engram.ssd.kernels.xxh3`), with no
Python call per block and without the GIL.

A :class:`BlockChecks` belongs to one open table: it holds the expected hashes and a
flag per block that is set once the block's bytes in memory were checked. A reader
checks the blocks it needs whose flag is clear, after it has brought them in from the
disk and before any row of them is copied out; a block whose flag is set costs nothing
more. A flag is cleared when the kernel evicts the block from the page cache (the mmap
reader's residency sweep notices) or the table drops its pages, since the next copy
comes from the disk again.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import xxhash

from engram.errors import EngramTableError
from engram.ssd import kernels
from engram.ssd.faults import EngramChecksumError
from engram.ssd.layout import DiskLayout

HASH_NAME = "xxh3_64"
HASHES_FILE = "blocks.xxh3"
HASH_BYTES = 8


def as_bytes(buffer: object) -> np.ndarray:
    """A buffer (bytes, mmap, numpy array) as the uint8 array the hash kernels read."""
    return np.frombuffer(buffer, dtype=np.uint8)  # type: ignore[call-overload]


def hash_blocks(data: np.ndarray, offsets: np.ndarray, block_bytes: int) -> np.ndarray:
    """xxh3-64 of the ``block_bytes`` bytes at each byte offset in ``offsets`` of
    ``data`` (uint8, :func:`as_bytes`)."""
    out = np.empty(offsets.size, dtype=np.uint64)
    kernels.xxh3.hash_blocks(data, offsets.astype(np.int64, copy=False), block_bytes, out)
    return out


def chunk_hashes(chunk: bytes, block_bytes: int) -> np.ndarray:
    """Hashes of the consecutive blocks of one chunk's bytes."""
    offsets = np.arange(0, len(chunk), block_bytes, dtype=np.int64)
    return hash_blocks(as_bytes(chunk), offsets, block_bytes)


def digest_of(hashes: np.ndarray) -> str:
    """The digest of a table's block hashes that its manifest records."""
    return xxhash.xxh3_128_hexdigest(hashes.astype("<u8", copy=False).tobytes())


def read_hashes(directory: Path, layout: DiskLayout, digest: str) -> np.ndarray:
    """The block hashes of the table in ``directory``, checked against ``digest``."""
    path = directory / HASHES_FILE
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise EngramTableError(f"SSD table block hashes {path} are unreadable: {err}") from err
    if len(raw) != layout.num_blocks * HASH_BYTES:
        raise EngramTableError(
            f"SSD table block hashes {path} are {len(raw):,} bytes, the layout needs "
            f"{layout.num_blocks * HASH_BYTES:,}"
        )
    hashes = np.frombuffer(raw, dtype="<u8").astype(np.uint64)
    if digest_of(hashes) != digest:
        raise EngramTableError(f"SSD table block hashes {path} do not match their digest")
    return hashes


class BlockChecks:
    """Expected hashes and checked flags of the blocks of one table's data file."""

    def __init__(self, data: Path, layout: DiskLayout, expected: np.ndarray):
        self.data = data
        self.directory = data.parent
        self.layout = layout
        self.expected = expected
        self.verified = np.zeros(layout.num_blocks, dtype=bool)
        self.checked = 0  # blocks hashed so far (tests, diagnostics)
        self._count_lock = threading.Lock()  # readers check from several threads

    def check(
        self, data: np.ndarray, blocks: np.ndarray, offsets: np.ndarray, *, remember: bool = True
    ) -> None:
        """Check distinct ``blocks`` (their bytes at byte ``offsets`` of ``data``,
        :func:`as_bytes`) against their hashes, in one compiled call without the GIL.
        With ``remember`` (the page cache's copy), blocks checked before are skipped and
        the ones that match are flagged; without (a private copy, checked each time it
        is read) every block is hashed. Raises :class:`EngramChecksumError` naming the
        first block that does not match."""
        if blocks.size == 0:
            return
        hashed, bad = kernels.xxh3.check_blocks(
            data,
            blocks,
            offsets,
            self.layout.block_bytes,
            self.expected,
            self.verified,
            remember,
        )
        with self._count_lock:
            self.checked += hashed
        if bad:
            # NOTE: the failure path only: hash again to name every damaged block.
            got = hash_blocks(data, offsets, self.layout.block_bytes)
            self._fail(blocks[got != self.expected[blocks]])

    def check_and_gather(
        self,
        data: np.ndarray,
        ids: np.ndarray,
        row_at: np.ndarray,
        block_at: np.ndarray,
        out: np.ndarray,
        at: np.ndarray,
        lo: int,
        hi: int,
        *,
        remember: bool,
    ) -> None:
        """Copy the rows of sorted distinct ``ids[lo:hi]`` (at byte ``row_at[i]`` of
        ``data``) to ``out[at[i]]`` (``at`` empty: ``out[i]``), checking each block
        (the ``j``-th distinct one at byte ``block_at[j]``) just before its first row is
        copied, in one compiled pass: a block is in the CPU's cache once, for both. On
        a mismatch raises :class:`EngramChecksumError` (``out`` then holds rows that
        must not be used) as :meth:`check` does."""
        layout = self.layout
        hashed, bad = kernels.xxh3.check_and_gather(
            data,
            ids,
            row_at,
            block_at,
            layout.rows_per_block,
            layout.block_bytes,
            self.expected,
            self.verified,
            remember,
            out,
            at,
            lo,
            hi,
        )
        with self._count_lock:
            self.checked += hashed
        if bad:
            # NOTE: the failure path only: hash every block of the rows to name them all.
            blocks = np.unique(ids[lo:hi] // layout.rows_per_block)
            got = hash_blocks(data, block_at[: blocks.size], layout.block_bytes)
            self._fail(blocks[got != self.expected[blocks]])

    def forget(self) -> None:
        self.verified[:] = False

    def _fail(self, bad: np.ndarray) -> None:
        layout = self.layout
        block = int(bad[0])
        chunk = block // layout.chunk_blocks
        start = block * layout.block_bytes
        more = ""
        if bad.size > 1:
            chunks = np.unique(bad // layout.chunk_blocks).tolist()
            listed = ", ".join(map(str, chunks[:8])) + (", ..." if len(chunks) > 8 else "")
            more = f"; {bad.size:,} damaged blocks here, in chunks {listed}"
        raise EngramChecksumError(
            f"SSD table {self.directory}: checksum mismatch in {self.data} "
            f"chunk {chunk} (bytes {start:,}..{start + layout.block_bytes:,}, block {block:,}): "
            f"the data on the disk is damaged{more}",
            self.directory,
            chunk,
        )
