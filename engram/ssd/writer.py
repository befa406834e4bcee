"""Write SSD tables: resumable, checksummed, published atomically.

A table is written into a *work* directory (``<table>.partial``) chunk by chunk: the
rows into ``rows.bin``, each block's hash into ``blocks.xxh3``. After each chunk is on
disk (fsync) its crc32 is appended to ``progress.json``, so a crash loses at most the
chunk in flight: writing the same rows again resumes after the last recorded chunk (a
half-written chunk is cut off first); a work directory of other rows or another layout
is started over. When every chunk is written the data file is read back and checked
against the block hashes, and only then is the manifest written: a work directory with
a manifest is complete and verified. The caller then publishes it
(:func:`engram.ssd.publish.publish`: the table is several files, so a per-file atomic
write cannot publish it). A full disk stops the write cleanly, keeping the finished chunks for a
later resume.
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

import numpy as np

from engram.errors import EngramRunError, EngramTableError
from engram.files import GIB, MIB, atomic_write
from engram.ssd.block_hashes import HASH_BYTES, HASHES_FILE, chunk_hashes, digest_of
from engram.ssd.integrity import verify_table
from engram.ssd.layout import DEFAULT_CHUNK_BYTES, DiskLayout
from engram.ssd.manifest import DATA_FILE, MANIFEST, TableManifest
from engram.ssd.sources import RowSource, source_layout

PROGRESS = "progress.json"
PARTIAL_SUFFIX = ".partial"
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def write_table(
    work: Path,
    source: RowSource,
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    on_chunk: Callable[[int], None] | None = None,
) -> TableManifest:
    """Write (or finish writing) ``source`` into ``work``; return its manifest."""
    layout = source_layout(source, chunk_bytes)
    identity = source.identity()
    crcs = finished_chunks(work, layout, identity)
    if len(crcs) == layout.num_chunks and (work / MANIFEST).exists():
        return TableManifest.load(work)
    if not crcs and work.exists():
        shutil.rmtree(work)  # another source's or layout's rows: start over
    work.mkdir(parents=True, exist_ok=True)
    data = work / DATA_FILE
    fd = os.open(data, os.O_WRONLY | os.O_CREAT, 0o644)
    hashes_fd = os.open(work / HASHES_FILE, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        # NOTE: drop a half-written chunk (rows and hashes) before resuming after it.
        os.ftruncate(fd, len(crcs) * layout.chunk_bytes)
        os.ftruncate(hashes_fd, len(crcs) * layout.chunk_blocks * HASH_BYTES)
        for index, buf in iter_chunks(source, layout, start=len(crcs)):
            _pwrite_all(fd, buf, index * layout.chunk_bytes)
            hashes = chunk_hashes(buf, layout.block_bytes).astype("<u8").tobytes()
            _pwrite_all(hashes_fd, hashes, index * layout.chunk_blocks * HASH_BYTES)
            os.fsync(fd)
            os.fsync(hashes_fd)
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
        raise EngramRunError(
            f"{what} while writing {data} ({os.strerror(err.errno)}): {len(crcs)} of "
            f"{layout.num_chunks} chunks are written and kept; make room for "
            f"{left / MIB:,.1f} MiB more and run again to resume"
        ) from err
    finally:
        os.close(fd)
        os.close(hashes_fd)
    hashes = np.fromfile(work / HASHES_FILE, dtype="<u8").astype(np.uint64)
    manifest = TableManifest.build(layout, crcs, identity, digest_of(hashes), source.row_format)
    # NOTE: read back before the manifest makes the table complete: what gets
    # published is what the hashes describe.
    try:
        verify_table(work, manifest, "full")
    except EngramTableError as err:
        shutil.rmtree(work, ignore_errors=True)  # a rerun starts over instead of failing again
        raise EngramTableError(
            f"the table written to {work} does not read back as written ({err}); it was "
            "removed: check the disk, then run again"
        ) from err
    atomic_write(work / MANIFEST, manifest.to_json())
    (work / PROGRESS).unlink(missing_ok=True)
    return manifest


def iter_chunks(
    source: RowSource, layout: DiskLayout, *, start: int = 0
) -> Iterator[tuple[int, bytes]]:
    """(index, bytes) of each chunk of the data file from chunk ``start`` on."""
    for index in range(start, layout.num_chunks):
        first, rows, _ = layout.chunk_span(index)
        yield index, layout.pack(source.read(first, first + rows)).tobytes()


def finished_chunks(work: Path, layout: DiskLayout, identity: dict[str, Any]) -> list[int]:
    """crc32s of the chunks of these rows (``identity``) in this ``layout`` that ``work``
    already holds on disk; empty when it holds none, or other rows."""
    if (work / MANIFEST).exists():
        try:
            manifest = TableManifest.load(work)
        except EngramTableError:
            return []
        same = manifest.source == identity and manifest.layout == layout
        return list(manifest.chunk_crc32) if same else []
    try:
        progress = json.loads((work / PROGRESS).read_text())
        crcs = [int(c) for c in progress["chunk_crc32"]]
        size = (work / DATA_FILE).stat().st_size
        hashes_size = (work / HASHES_FILE).stat().st_size
    except (OSError, ValueError, KeyError, TypeError):
        return []
    if progress.get("source") != identity or progress.get("layout") != layout.key:
        return []
    # NOTE: a data (or hashes) file shorter than its recorded chunks would resume with
    # a hole.
    blocks = min(len(crcs) * layout.chunk_blocks, layout.num_blocks)
    enough = size >= len(crcs) * layout.chunk_bytes and hashes_size >= blocks * HASH_BYTES
    return crcs if enough else []


def require_space(directory: Path, needed: int) -> str:
    """Raise unless the filesystem of ``directory`` has ``needed`` bytes free; return the
    "needs X GiB, Y GiB free" line either way."""
    probe = directory
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    line = f"needs {needed / GIB:.2f} GiB ({needed:,} bytes), {free / GIB:.2f} GiB free on {probe}"
    if needed > free:
        raise EngramRunError(f"not enough disk space for the SSD tables: {line}")
    return line


def partial_path(final: Path) -> Path:
    return final.with_name(final.name + PARTIAL_SUFFIX)


def _save_progress(
    work: Path, layout: DiskLayout, identity: dict[str, Any], crcs: list[int]
) -> None:
    progress = {
        "source": identity,
        "layout": layout.key,
        "chunk_crc32": crcs,
    }
    atomic_write(work / PROGRESS, json.dumps(progress))


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
