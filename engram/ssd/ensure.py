"""Find, reuse or write the SSD table directory of one layer.

``ensure_table(path, source)`` is what ``create_table("ssd", weight, scale, path=...)``
runs: reuse a finished table at ``path`` if it holds exactly these rows, write it (via
``path.partial``, resuming a crashed write, then one rename) if there is none, and
refuse anything else with an error naming the directory.
"""

from __future__ import annotations

import fcntl
import json
import logging
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from engram.errors import EngramTableError
from engram.ssd.layout import DEFAULT_CHUNK_BYTES, TableLayout
from engram.ssd.manifest import CHECKPOINT_FORMAT, MANIFEST, CheckpointManifest, TableManifest
from engram.ssd.sources import RowSource
from engram.ssd.writer import iter_chunks, partial_path, publish, require_space, written_bytes
from engram.ssd.writer import write_table as _write_table

logger = logging.getLogger(__name__)


def ensure_table(
    path: Path, source: RowSource | None, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> TableManifest:
    if (path / MANIFEST).exists() or source is None:
        return _ensure(path, source, chunk_bytes)
    # NOTE: processes that share a table (TP ranks of a model whose tables are not
    # sharded, two servers on one disk) convert it once: the first holds the lock
    # while it writes, the others then find the finished table.
    with _exclusive(path) as lock_file:
        manifest = _ensure(path, source, chunk_bytes)
        # NOTE: removed only once the table is published: whoever locks the old or a
        # new lock file from now on finds the table and reuses it.
        lock_file.unlink(missing_ok=True)
        return manifest


@contextmanager
def _exclusive(path: Path) -> Iterator[Path]:
    path.parent.mkdir(parents=True, exist_ok=True)
    lock_file = path.parent / f".{path.name}.lock"
    with open(lock_file, "a+b") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.info("waiting for another process that is writing the SSD table %s", path)
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield lock_file
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _ensure(path: Path, source: RowSource | None, chunk_bytes: int) -> TableManifest:
    if (path / MANIFEST).exists():
        manifest = TableManifest.load(path)
        if source is not None:
            check_same_rows(path, manifest, source)
        return manifest
    if source is None:
        what = "has no manifest.json" if path.exists() else "does not exist"
        raise EngramTableError(
            f"SSD table directory {path} {what}, and no weights were given to write it from"
        )
    if path.exists() and any(path.iterdir()):
        raise EngramTableError(
            f"{path} exists but is not an SSD table (no manifest.json); refusing to overwrite it"
        )
    layout = TableLayout.with_chunk_bytes(source.num_rows, source.head_dim, chunk_bytes)
    work = partial_path(path)
    require_space(path.parent, layout.file_bytes - written_bytes(work))
    manifest = _write_table(work, source, identity=source.identity(), chunk_bytes=chunk_bytes)
    publish(work, path)
    return manifest


def resolve_table_dir(path: Path, layer: int | None) -> Path:
    """``path`` itself, or its layer-``layer`` table when ``path`` is a converted checkpoint."""
    try:
        kind = json.loads((path / MANIFEST).read_text()).get("format")
    except (OSError, ValueError):
        return path  # opening the table reports what is wrong with it
    if kind != CHECKPOINT_FORMAT:
        return path
    checkpoint = CheckpointManifest.load(path)
    if layer is None:
        raise EngramTableError(
            f"{path} is a converted checkpoint with layers {sorted(checkpoint.layers)}: "
            "pass layer=<id> to open one of its tables"
        )
    sub = checkpoint.layers.get(str(layer))
    if sub is None:
        raise EngramTableError(
            f"{path} has no table for Engram layer {layer} (it has {sorted(checkpoint.layers)})"
        )
    return path / sub


def check_same_rows(path: Path, manifest: TableManifest, source: RowSource) -> None:
    """Raise unless ``source`` holds exactly the rows of the table at ``path``."""
    if (manifest.num_rows, manifest.head_dim) != (source.num_rows, source.head_dim):
        raise EngramTableError(
            f"SSD table {path} has {manifest.num_rows:,} rows of width {manifest.head_dim} but "
            f"the given weights are {source.num_rows:,} x {source.head_dim}; delete it or use "
            "another path"
        )
    for index, buf in iter_chunks(source, manifest.layout):
        if zlib.crc32(buf) != manifest.chunk_crc32[index]:
            raise EngramTableError(
                f"SSD table {path} holds different rows than the given weights (chunk "
                f"{index} differs); delete it or use another path"
            )
