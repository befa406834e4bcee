"""Convert the Engram tables of a safetensors checkpoint into SSD tables.

Output: ``OUT/layer{L}/`` (one table directory per Engram layer, the layout of
:mod:`engram.ssd.layout`) and ``OUT/manifest.json`` naming the source checkpoint
(file names and sizes, each table's tensor names, shape and sampled crc). Everything is
written under ``OUT.partial`` and published with one rename, so ``OUT`` is either
absent or complete. A crashed or interrupted conversion resumes from its last finished
chunk; an ``OUT`` (or ``OUT.partial``) made from a different checkpoint is never
overwritten. The free space needed is checked before the first byte is written.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engram.errors import EngramTableError
from engram.ssd.checkpoint import checkpoint_identity, find_tables
from engram.ssd.integrity import verify_table
from engram.ssd.layout import DEFAULT_CHUNK_BYTES, TableLayout
from engram.ssd.manifest import MANIFEST, CheckpointManifest, TableManifest, write_json_atomic
from engram.ssd.progress import GIB, Progress
from engram.ssd.writer import partial_path, publish, require_space, write_table, written_bytes

SOURCE_RECORD = "source.json"


def convert_checkpoint(
    checkpoint: Path,
    out: Path,
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    check_space: bool = True,
    verify: bool = False,
    log: Callable[[str], None] = print,
    show_progress: bool = True,
) -> CheckpointManifest:
    tables = find_tables(checkpoint)
    identity = checkpoint_identity(checkpoint, tables)
    if (out / MANIFEST).exists():
        existing = CheckpointManifest.load(out)
        if existing.source != identity:
            raise EngramTableError(
                f"{out} holds tables converted from a different checkpoint "
                f"({_difference(existing.source, identity)}); refusing to overwrite it: "
                "remove it or choose another --out"
            )
        log(f"{out} is already converted from this checkpoint")
        if verify:
            _verify_all(out, existing, log)
        return existing
    if out.exists() and any(out.iterdir()):
        raise EngramTableError(
            f"{out} exists and is not a converted Engram checkpoint; refusing to overwrite it"
        )
    work = partial_path(out)
    resuming = _check_resumable(work, identity)
    layouts = {
        layer: TableLayout.with_chunk_bytes(rows.num_rows, rows.head_dim, chunk_bytes)
        for layer, rows in tables.items()
    }
    total = sum(layout.file_bytes for layout in layouts.values())
    done = sum(_written(work / f"layer{layer}", layouts[layer]) for layer in tables)
    space = require_space(work, total - done) if check_space else "free-space check skipped"
    if resuming:
        log(f"resuming the conversion in {work} ({done / GIB:.2f} GiB already written)")
    else:
        work.mkdir(parents=True)
        write_json_atomic(work / SOURCE_RECORD, json.dumps(identity))
    log(
        f"converting {len(tables)} Engram table(s), {total / GIB:.2f} GiB, from {checkpoint}"
        f" to {out}: {space}"
    )
    progress = Progress(total, "engram.convert") if show_progress else None
    if progress is not None:
        progress.advance(done)
    layers = {}
    for layer, rows in tables.items():
        name = f"layer{layer}"
        write_table(
            work / name,
            rows,
            identity=identity["tables"][str(layer)],
            chunk_bytes=chunk_bytes,
            on_chunk=progress.advance if progress is not None else None,
        )
        layers[str(layer)] = name
    if progress is not None:
        progress.finish()
    manifest = CheckpointManifest(source=identity, layers=layers)
    write_json_atomic(work / MANIFEST, manifest.to_json())
    (work / SOURCE_RECORD).unlink(missing_ok=True)
    publish(work, out)
    log(f"published {out}")
    if verify:
        _verify_all(out, manifest, log)
    return manifest


def _check_resumable(work: Path, identity: dict[str, Any]) -> bool:
    """True if ``work`` is a half-finished conversion of this checkpoint; raise if it is
    anything else."""
    if not work.exists():
        return False
    try:
        previous = json.loads((work / SOURCE_RECORD).read_text())
    except (OSError, ValueError):
        previous = None
    if previous != identity:
        raise EngramTableError(
            f"{work} holds a half-finished conversion of another checkpoint (or is not "
            "ours); remove it to start over"
        )
    return True


def _written(table_dir: Path, layout: TableLayout) -> int:
    if (table_dir / MANIFEST).exists():
        return layout.file_bytes
    return written_bytes(table_dir)


def _verify_all(out: Path, manifest: CheckpointManifest, log: Callable[[str], None]) -> None:
    for layer, name in sorted(manifest.layers.items()):
        table = TableManifest.load(out / name)
        verify_table(out / name, table, "full")
        log(f"layer {layer}: all {table.layout.num_chunks} chunk checksums match")


def _difference(old: dict[str, Any], new: dict[str, Any]) -> str:
    if old.get("files") != new.get("files"):
        names = sorted(
            {f["name"] for f in old.get("files", [])} ^ {f["name"] for f in new["files"]}
        )
        return f"checkpoint files or sizes differ{': ' + ', '.join(names) if names else ''}"
    changed = sorted(
        layer
        for layer in set(old.get("tables", {})) | set(new["tables"])
        if old.get("tables", {}).get(layer) != new["tables"].get(layer)
    )
    return f"Engram tables differ for layers {', '.join(changed)}"
