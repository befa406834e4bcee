"""Is an SSD table's data file the one its manifest describes, and does it stay so?

On open: the file must exist with exactly the manifest's size; ``quick`` also checks
the crc32 of the first and last chunks, ``full`` every chunk. While serving, a
:class:`FileGuard` compares ``fstat`` of the open file before every read: a file that
shrinks, grows or is written in place (its mtime moves) puts the table in a permanent
fault instead of serving rows that may be garbage.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

from engram.errors import EngramTableError
from engram.ssd.manifest import TableManifest

VERIFY_MODES = ("quick", "full")
_READ_PIECE = 8 << 20


def verify_table(directory: Path, manifest: TableManifest, mode: str = "quick") -> None:
    """Raise :class:`EngramTableError` naming the file and chunk at fault."""
    if mode not in VERIFY_MODES:
        raise EngramTableError(f"unknown verify mode {mode!r}; choose one of {VERIFY_MODES}")
    data = directory / manifest.data_file
    if not data.exists():
        raise EngramTableError(f"SSD table data file {data} is missing")
    check_size(data, os.stat(data).st_size, manifest.data_bytes)
    layout = manifest.layout
    last = layout.num_chunks - 1
    chunks = range(layout.num_chunks) if mode == "full" else sorted({0, last})
    fd = os.open(data, os.O_RDONLY)
    try:
        for index in chunks:
            start = index * layout.chunk_bytes
            length = layout.chunk_span(index)[2]
            got = _crc_of(fd, start, length)
            want = manifest.chunk_crc32[index]
            if got != want:
                raise EngramTableError(
                    f"checksum mismatch in {data} chunk {index} (bytes {start:,}.."
                    f"{start + length:,}): crc32 {got:08x}, the manifest says {want:08x}"
                )
    finally:
        os.close(fd)


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


def _crc_of(fd: int, start: int, length: int) -> int:
    crc, done = 0, 0
    while done < length:
        piece = os.pread(fd, min(_READ_PIECE, length - done), start + done)
        if not piece:
            break
        crc = zlib.crc32(piece, crc)
        done += len(piece)
    return crc
