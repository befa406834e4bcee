"""Write SSD tables: resumable, checksummed, published atomically.

A table is written into a *work* directory chunk by chunk. After each chunk is on disk
(fsync) its crc32 is appended to ``progress.json``, so a crash loses at most the chunk
in flight: writing again resumes after the last recorded chunk (a half-written chunk is
cut off first). The manifest is written last; the caller then publishes the work
directory with one ``rename``. A full disk stops the write cleanly, keeping the finished
chunks for a later resume.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from engram.errors import EngramTableError
from engram.ssd.layout import DEFAULT_CHUNK_BYTES, TableLayout
from engram.ssd.manifest import (
    DATA_FILE,
    MANIFEST,
    TableManifest,
    fsync_dir,
    write_json_atomic,
)
from engram.ssd.sources import RowSource

PROGRESS = "progress.json"
PARTIAL_SUFFIX = ".partial"
GIB = 1 << 30
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def write_table(
    work: Path,
    source: RowSource,
    *,
    identity: dict[str, Any],
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    on_chunk: Callable[[int], None] | None = None,
) -> TableManifest:
    """Write (or finish writing) ``source`` into ``work``; return its manifest."""
    layout = TableLayout.with_chunk_bytes(source.num_rows, source.head_dim, chunk_bytes)
    work.mkdir(parents=True, exist_ok=True)
    if (work / MANIFEST).exists():
        manifest = TableManifest.load(work)
        if manifest.source != identity:
            raise EngramTableError(f"{work} already holds a table from a different source")
        return manifest
    crcs = _resume_point(work, layout, identity)
    data = work / DATA_FILE
    fd = os.open(data, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, len(crcs) * layout.chunk_bytes)  # drop a half-written chunk
        for index, buf in iter_chunks(source, layout, start=len(crcs)):
            _pwrite_all(fd, buf, index * layout.chunk_bytes)
            os.fsync(fd)
            crcs.append(zlib.crc32(buf))
            _save_progress(work, layout, identity, crcs)
            if on_chunk is not None:
                on_chunk(len(buf))
    except OSError as err:
        if err.errno not in _DISK_FULL:
            raise
        _truncate_quietly(fd, len(crcs) * layout.chunk_bytes)
        left = layout.file_bytes - len(crcs) * layout.chunk_bytes
        what = "a file size limit was reached" if err.errno == errno.EFBIG else "the disk filled"
        raise EngramTableError(
            f"{what} while writing {data} ({os.strerror(err.errno)}): {len(crcs)} of "
            f"{layout.num_chunks} chunks are written and kept; make room for "
            f"{left / (1 << 20):,.1f} MiB more and run again to resume"
        ) from err
    finally:
        os.close(fd)
    manifest = TableManifest.build(layout, crcs, identity)
    write_json_atomic(work / MANIFEST, manifest.to_json())
    (work / PROGRESS).unlink(missing_ok=True)
    return manifest


def iter_chunks(
    source: RowSource, layout: TableLayout, *, start: int = 0
) -> Iterator[tuple[int, bytes]]:
    """(index, bytes) of each chunk of the data file from chunk ``start`` on."""
    for index in range(start, layout.num_chunks):
        first, rows, _ = layout.chunk_span(index)
        weight, scale = source.read(first, first + rows)
        yield index, layout.pack(weight, scale).tobytes()


def written_bytes(work: Path) -> int:
    """Bytes of finished chunks in a work directory (0 if there is none)."""
    try:
        progress = json.loads((work / PROGRESS).read_text())
    except (OSError, ValueError):
        return 0
    return len(progress.get("chunk_crc32", [])) * int(progress.get("chunk_bytes", 0))


def require_space(directory: Path, needed: int) -> str:
    """Raise unless the filesystem of ``directory`` has ``needed`` bytes free; return the
    "needs X GiB, Y GiB free" line either way."""
    probe = directory
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    line = f"needs {needed / GIB:.2f} GiB, {free / GIB:.2f} GiB free on {probe}"
    if needed > free:
        raise EngramTableError(f"not enough disk space for the SSD tables: {line}")
    return line


def publish(work: Path, final: Path) -> None:
    """Make the finished ``work`` directory visible as ``final`` in one rename."""
    if final.exists():
        final.rmdir()  # only an empty placeholder directory may be replaced
    os.rename(work, final)
    fsync_dir(final.parent)


def partial_path(final: Path) -> Path:
    return final.with_name(final.name + PARTIAL_SUFFIX)


def _resume_point(work: Path, layout: TableLayout, identity: dict[str, Any]) -> list[int]:
    path = work / PROGRESS
    if not path.exists():
        return []
    progress = json.loads(path.read_text())
    if progress.get("source") != identity or progress.get("layout") != _layout_key(layout):
        raise EngramTableError(
            f"{work} holds a half-written table from a different source or layout; "
            "remove it to start over"
        )
    return [int(c) for c in progress["chunk_crc32"]]


def _save_progress(
    work: Path, layout: TableLayout, identity: dict[str, Any], crcs: list[int]
) -> None:
    progress = {
        "source": identity,
        "layout": _layout_key(layout),
        "chunk_bytes": layout.chunk_bytes,
        "chunk_crc32": crcs,
    }
    write_json_atomic(work / PROGRESS, json.dumps(progress))


def _layout_key(layout: TableLayout) -> list[int]:
    return [layout.num_rows, layout.head_dim, layout.chunk_blocks]


def _pwrite_all(fd: int, buf: bytes, offset: int) -> None:
    view = memoryview(buf)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def _truncate_quietly(fd: int, size: int) -> None:
    try:
        os.ftruncate(fd, size)
    except OSError:
        pass  # best effort: the next run truncates to the same point before resuming
