"""Is an SSD table's data file the one its manifest describes, and does it stay so?

On open: the file must exist with exactly the manifest's size, its block hashes file
must match the manifest's digest, and the table must not be marked damaged; ``quick``
also hashes every block of the first and last chunks, ``full`` every block. While
serving, every block is checked the first time it is read
(:mod:`engram.ssd.block_hashes`); a block that fails marks the table damaged
(:func:`mark_damaged`: a ``damaged.json`` beside the manifest, written atomically), so
the next start's :func:`engram.ssd.ensure.decide` converts it again. A
:class:`FileGuard` compares ``fstat`` of the open file before every read: a file that
shrinks, grows or is written in place (its mtime moves) puts the table in a permanent
fault instead of serving rows that may be garbage.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np

from engram.errors import EngramTableError
from engram.files import atomic_write
from engram.ssd.block_hashes import BlockChecks, as_bytes, read_hashes
from engram.ssd.faults import EngramChecksumError
from engram.ssd.manifest import TableManifest

logger = logging.getLogger(__name__)

VERIFY_MODES = ("quick", "full")
DAMAGED = "damaged.json"
_READ_PIECE = 8 << 20


def verify_table(directory: Path, manifest: TableManifest, mode: str = "quick") -> BlockChecks:
    """Raise :class:`EngramTableError` naming the file and chunk at fault; return the
    table's block checks (the blocks hashed here marked as checked)."""
    if mode not in VERIFY_MODES:
        raise EngramTableError(f"unknown verify mode {mode!r}; choose one of {VERIFY_MODES}")
    damaged = damage_report(directory)
    if damaged is not None:
        raise EngramTableError(f"SSD table {directory} was found damaged while serving: {damaged}")
    data = directory / manifest.data_file
    if not data.exists():
        raise EngramTableError(f"SSD table data file {data} is missing")
    check_size(data, os.stat(data).st_size, manifest.data_bytes)
    layout = manifest.layout
    checks = BlockChecks(data, layout, read_hashes(directory, layout, manifest.block_hashes_digest))
    last = layout.num_chunks - 1
    chunks = range(layout.num_chunks) if mode == "full" else sorted({0, last})
    fd = os.open(data, os.O_RDONLY)
    try:
        for index in chunks:
            _check_chunk(fd, checks, index)
    finally:
        os.close(fd)
    return checks


def _check_chunk(fd: int, checks: BlockChecks, index: int) -> None:
    layout = checks.layout
    first_block = index * layout.chunk_blocks
    start, length = index * layout.chunk_bytes, layout.chunk_span(index)[2]
    for piece in range(0, length, _READ_PIECE):
        size = min(_READ_PIECE, length - piece)
        buf = os.pread(fd, size, start + piece)
        count = len(buf) // layout.block_bytes
        blocks = first_block + piece // layout.block_bytes + np.arange(count)
        checks.check(
            as_bytes(buf),
            blocks,
            np.arange(count) * layout.block_bytes,
        )
        if len(buf) < size:
            raise EngramTableError(f"short read in chunk {index} of {checks.directory}")


def damage_report(directory: Path) -> str | None:
    """What the table in ``directory`` was marked damaged for, or ``None``."""
    try:
        return str(json.loads((directory / DAMAGED).read_text())["error"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        return "(unreadable damage report)"


def mark_damaged(directory: Path, error: EngramChecksumError) -> None:
    """Record ``error`` in ``directory`` so that the next open refuses, and the next
    start converts, the table. A directory we cannot write is only logged."""
    try:
        atomic_write(directory / DAMAGED, json.dumps({"error": str(error), "chunk": error.chunk}))
    except OSError as err:
        logger.error("cannot mark the SSD table %s damaged (%s): %s", directory, err, error)


def check_size(data: Path, size: int, expected: int) -> None:
    if size != expected:
        how = "truncated" if size < expected else "longer than written"
        raise EngramTableError(
            f"SSD table data file {data} is {how}: {size:,} bytes, the manifest says {expected:,}"
        )


class FileGuard:
    """Watches one open data file; after the first change every check raises."""

    def __init__(self, path: Path, fd: int, expected_size: int):
        self.path = path
        self._fd = fd
        st = os.fstat(fd)
        check_size(path, st.st_size, expected_size)
        self._signature = (st.st_size, st.st_mtime_ns)
        self.fault: str | None = None

    def check(self) -> None:
        if self.fault is None:
            st = os.fstat(self._fd)
            if (st.st_size, st.st_mtime_ns) != self._signature:
                self.fault = self._describe(st.st_size, st.st_mtime_ns)
        if self.fault is not None:
            raise EngramTableError(self.fault)

    def _describe(self, size: int, mtime_ns: int) -> str:
        old_size, _ = self._signature
        what = (
            f"changed size from {old_size:,} to {size:,} bytes"
            if size != old_size
            else "was modified in place"
        )
        return (
            f"SSD table data file {self.path} {what} while the table was serving; refusing "
            "to serve rows from it (restart after restoring or re-converting the table)"
        )
