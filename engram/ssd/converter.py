"""Convert the n-gram tables of a safetensors checkpoint into SSD tables.

The checkpoint's format (:mod:`engram.ssd.checkpoint`: DeepSeek-V4.1's Engram tables,
Qwen3.8-Flash-Next's PLE tables) is found from its tensor names and named in the first
line logged. Output: ``OUT/layer{L}/`` (one table directory per n-gram layer ``L``, the
decoder layer index in the tensor names, named by
:func:`engram.ssd.directory.table_dir`, the layout of :mod:`engram.ssd.layout`) and,
written last, ``OUT/manifest.json`` listing them. Each table goes through
:func:`engram.ssd.ensure.ensure_table`, the decision the server makes too: a table
already converted from the same rows is reused, one converted from other rows (or
damaged) is converted again, and a crashed or interrupted conversion resumes from its
last finished chunk. Every new table is written beside the old one first; only when all
are complete and verified are they swapped in, one directory exchange each, so an
interrupted run leaves the old tables in place. The free space needed (page-padded
on-disk bytes, the old tables still counted) is checked before the first byte is
written.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from engram.files import GIB, atomic_write
from engram.progress import progress_bar
from engram.ssd.checkpoint import find_checkpoint_tables
from engram.ssd.directory import table_dir
from engram.ssd.ensure import decide, ensure_table
from engram.ssd.integrity import verify_table
from engram.ssd.layout import DEFAULT_CHUNK_BYTES
from engram.ssd.manifest import MANIFEST, CheckpointManifest, TableManifest
from engram.ssd.sources import source_layout
from engram.ssd.writer import require_space


def convert_checkpoint(
    checkpoint: Path,
    out: Path,
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    check_space: bool = True,
    verify: bool = False,
    log: Callable[[str], None] = print,
    show_progress: bool = True,
    warn: Callable[[str], None] | None = None,
) -> CheckpointManifest:
    """Convert ``checkpoint``'s tables into ``out`` (see the module docstring); progress
    lines go to ``log``, the line saying a table is converted again to ``warn`` (default:
    ``log``)."""
    found = find_checkpoint_tables(checkpoint)
    log(f"{checkpoint}: {found.describe()}")
    tables = found.tables
    paths = {layer: table_dir(out, layer) for layer in tables}
    decisions = {layer: decide(paths[layer], rows, chunk_bytes) for layer, rows in tables.items()}
    total = sum(source_layout(rows, chunk_bytes).file_bytes for rows in tables.values())
    todo = [d for d in decisions.values() if not d.reuse]
    for d in todo:
        if d.again is not None:
            (warn or log)(d.again)
        else:
            log(f"{d.path.name}: {d.why}")
    needed = sum(d.write_bytes for d in todo)
    if not todo:
        log(f"{out} is already converted from this checkpoint")
    elif check_space:
        out.mkdir(parents=True, exist_ok=True)
        # NOTE: outdated tables stay until the new ones are complete: no room is freed.
        log(f"converting from {checkpoint} to {out}: {require_space(out, needed)}")
    progress = (
        progress_bar(
            total,
            "engram.convert",
            unit="B",
            initial=total - needed,
            unit_scale=True,
            unit_divisor=1024,
        )
        if show_progress and todo
        else None
    )
    options = {"chunk_bytes": chunk_bytes, "check_space": check_space, "announce": False}
    for layer, rows in tables.items():
        on_chunk = progress.update if progress is not None else None
        ensure_table(paths[layer], rows, **options, on_chunk=on_chunk, swap_in=False)
    if progress is not None:
        progress.close()
    for layer, rows in tables.items():
        ensure_table(paths[layer], rows, **options)  # swaps each finished table in
    layers = {str(layer): path.name for layer, path in paths.items()}
    manifest = CheckpointManifest(layers=layers)
    text, path = manifest.to_json(), out / MANIFEST
    # NOTE: converting a converted checkpoint again writes nothing at all.
    if not path.exists() or path.read_text() != text:
        atomic_write(path, text)
    if todo:
        log(f"published {out} ({total / GIB:.2f} GiB)")
    if verify:
        for layer, name in sorted(layers.items()):
            table = TableManifest.load(out / name)
            verify_table(out / name, table, "full")
            log(f"layer {layer}: all {table.layout.num_blocks:,} block hashes match")
    return manifest
