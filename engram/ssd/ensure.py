"""The one "reuse or convert" decision for an SSD table directory, and acting on it.

:func:`decide` is asked by everything that finds a table on disk: the ``ssd`` table
factory (``create_table("ssd", weight, scale, path=...)``), the converter (``python -m
engram.convert``), and the plugin both in its startup free-space check and when it
opens its tables; so they cannot disagree. :func:`ensure_table` acts on it: reuse, or
write the table into ``path.partial`` beside whatever is at ``path`` (resuming a crashed
or interrupted write of the same rows) and, once it is complete and verified, swap it
in (:mod:`engram.ssd.publish`). An outdated table keeps its place until then, so an
interruption at any moment leaves it or the new one at ``path``, never neither or a
mix; the disk needs room for both meanwhile.

NOTE: the identity rule. A table is reused iff its manifest loads, it records the
identity of the given source (tensor names, shape, TP shard and the crc32 of 1,024 rows
spread evenly over the table: :func:`engram.ssd.sources.sample_crc`), it was not marked
damaged while serving, and its data file passes the quick check (exact size, block
hashes of the first and last chunk). Anything else of ours (another checkpoint's rows,
an older format, a damaged or truncated file) is converted again. Comparing every chunk
with the source would read the whole checkpoint at every start, as much as converting
it; instead every block is checked against its hash when it is first read while
serving, and a mismatch fails that lookup and marks the table, so the next start
converts it (``verify="full"`` / ``--verify`` checks every block up front). The rule
misses a checkpoint edited in place at none of the sampled rows. A directory that is
not ours (no manifest of our format, but files) is never touched.
"""

from __future__ import annotations

import fcntl
import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from engram.errors import EngramTableError
from engram.files import GIB, MIB
from engram.ssd.integrity import verify_table
from engram.ssd.layout import DEFAULT_CHUNK_BYTES
from engram.ssd.manifest import (
    CHECKPOINT_FORMAT,
    MANIFEST,
    TABLE_FORMAT,
    CheckpointManifest,
    TableManifest,
)
from engram.ssd.publish import publish
from engram.ssd.sources import RowSource, describe_source, source_layout
from engram.ssd.writer import finished_chunks, partial_path, require_space, write_table

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Decision:
    """What to do with the table directory ``path`` for the rows of a source."""

    path: Path
    why: str  # what was found there, for the log
    write_bytes: int  # bytes still to write, in the on-disk (page-padded) layout
    stale_bytes: int  # bytes of an outdated table there, removed once the new one is in
    manifest: TableManifest | None = None  # the table's, when it is reused

    @property
    def reuse(self) -> bool:
        return self.manifest is not None

    @property
    def again(self) -> str | None:
        """The one line saying that a table found at ``path`` is converted again, and
        what was wrong with it; None when it is reused or there was none."""
        if self.reuse or not self.stale_bytes:
            return None
        return f"converting the SSD table {self.path} again from the checkpoint: {self.why}"

    def first(self, source: RowSource) -> str | None:
        """The one line saying that ``source``'s rows are converted into ``path`` where
        no table was (or resumed where one was half written), with the bytes to write;
        None when the table is reused or converted again (:attr:`again`)."""
        if self.reuse or self.stale_bytes:
            return None
        size = _size(self.write_bytes)
        what = describe_source(source)
        if self.why.startswith("half written"):
            return (
                f"resuming the conversion of {what} into {self.path} ({size} left to write); "
                "later starts reuse it"
            )
        return (
            f"converting {what} into {self.path} ({size} to write): the first start with "
            "this SSD directory; later starts reuse it"
        )


def decide(path: Path, source: RowSource, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Decision:
    """Reuse the table at ``path``, or convert ``source`` there (see the module NOTE)."""
    layout = source_layout(source, chunk_bytes)
    work = partial_path(path)
    done = len(finished_chunks(work, layout, source.identity())) if work.exists() else 0
    written = min(done * layout.chunk_bytes, layout.file_bytes)
    if (path / MANIFEST).exists():
        manifest, stale = _reusable(path, source)
        if manifest is not None:
            return Decision(path, "converted from these rows", 0, 0, manifest)
        used = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
        if done:
            stale += f"; the new table is half written ({written:,} bytes), resuming"
        return Decision(path, stale, layout.file_bytes - written, used)
    if path.exists() and any(path.iterdir()):
        raise EngramTableError(
            f"{path} exists but is not an SSD table (no manifest.json); refusing to overwrite it"
        )
    why = f"half written ({written:,} bytes), resuming" if done else "not converted yet"
    return Decision(path, why, layout.file_bytes - written, 0)


def _reusable(path: Path, source: RowSource) -> tuple[TableManifest | None, str]:
    """The manifest of the table of ours at ``path`` if it can serve ``source``, else
    ``None`` and why it cannot."""
    try:
        kind = json.loads((path / MANIFEST).read_text()).get("format")
    except (OSError, ValueError, AttributeError):
        kind = None
    if kind != TABLE_FORMAT:
        raise EngramTableError(
            f"{path / MANIFEST} is not an Engram SSD table manifest; refusing to overwrite {path}"
        )
    try:
        manifest = TableManifest.load(path)
        if manifest.source != source.identity():
            return None, (
                f"it was converted from other rows ({_describe(manifest.source)}; these are "
                f"{_describe(source.identity())})"
            )
        verify_table(path, manifest, "quick")
    except EngramTableError as err:
        return None, f"it is unusable: {err}"
    return manifest, ""


def ensure_table(
    path: Path,
    source: RowSource | None,
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    check_space: bool = True,
    on_chunk: Callable[[int], None] | None = None,
    swap_in: bool = True,
    announce: bool = True,
) -> TableManifest:
    """The manifest of a table at ``path`` holding ``source``'s rows, converting them
    first unless :func:`decide` reuses what is there. ``source=None``: open as it is.
    ``swap_in=False`` only writes the new table beside the old one (and returns its
    manifest); a later call with ``swap_in=True`` then swaps it in at once. A table
    converted again is said in one warning, a first conversion in one info line
    (``announce=False``: the caller said it)."""
    if source is None:
        if not (path / MANIFEST).exists():
            what = "has no manifest.json" if path.exists() else "does not exist"
            raise EngramTableError(
                f"SSD table directory {path} {what}, and no weights were given to write it from"
            )
        return TableManifest.load(path)
    decision = decide(path, source, chunk_bytes)
    if decision.manifest is not None:
        return decision.manifest
    # NOTE: processes that share a table (TP ranks of a model whose tables are not
    # sharded, two servers on one disk) convert it once: the first holds the lock while
    # it writes, the others then decide again and find the finished table.
    with _exclusive(path) as lock_file:
        decision = decide(path, source, chunk_bytes)
        if decision.manifest is not None:
            return decision.manifest
        if announce and decision.again is not None:
            # NOTE: a warning, so that a command line without logging set up shows it too
            logger.warning("%s", decision.again)
        elif announce:
            # NOTE: said before the space check and the write: a large table takes minutes
            logger.info("%s", decision.first(source))
        if check_space:
            require_space(path.parent, decision.write_bytes)
        work = partial_path(path)
        manifest = write_table(work, source, chunk_bytes=chunk_bytes, on_chunk=on_chunk)
        if not swap_in:
            return manifest
        publish(work, path)
        # NOTE: removed only once the table is published: whoever locks the old or a
        # new lock file from now on finds the table and reuses it.
        lock_file.unlink(missing_ok=True)
    return manifest  # NOTE: names no directory: the published table's as it is


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


def _size(n: int) -> str:
    return f"{n / GIB:.2f} GiB" if n >= GIB // 10 else f"{n / MIB:.1f} MiB"


def _describe(identity: dict) -> str:
    keys = ("file", "weight", "rows", "row_format", "scale_bf16_bits", "shard", "sample_crc32")
    return ", ".join(f"{k}={identity[k]}" for k in keys if k in identity) or str(identity)
