"""The ssd placement's table directories under ``--engram-ssd-dir``.

On first start each layer's table (or this rank's TP shard of it) is converted by
streaming its rows from the checkpoint's safetensors files (never whole in memory);
afterwards it is reused. The directory names are the core library's
(:mod:`engram.ssd.directory`), the same as ``engram.convert``'s and the CPU tools'.
Whether a directory is reused or converted (again) is decided by
:func:`engram.ssd.ensure.decide`, the same for the startup check (:func:`space_needed`)
and for the table open (the ``ssd`` placement's ``SsdTable.open``, given
:func:`checkpoint_source`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engram.errors import EngramTableError
from engram.ssd.directory import table_dir
from engram.ssd.sources import RowRange
from sglang_engram.protocol.family import HfConfig, ModelFamily, TableShard
from sglang_engram.protocol.runtime import TableState


def checkpoint_source(
    state: TableState,
    family: ModelFamily,
    model_path: str | Path,
    layer_id: int,
    rows: tuple[int, int] | None,
):
    """The checkpoint's rows of one layer (a row range of them for a TP shard), in the
    family's checkpoint format."""
    tables = _checkpoint_tables(state, Path(model_path), family.checkpoint_format)
    if layer_id not in tables:
        raise EngramTableError(f"checkpoint {model_path} has no Engram table for layer {layer_id}")
    source = tables[layer_id]
    if rows is not None and rows != (0, source.num_rows):
        return RowRange(source, *rows)
    return source


def _checkpoint_tables(
    state: TableState, checkpoint: Path, format_name: str | None
) -> dict[int, Any]:
    """``find_tables`` of ``checkpoint``, read once per process while its files stay
    the same (the startup check asks once per layer and TP shard)."""
    from engram.ssd.checkpoint import find_tables

    # NOTE: the files' names, sizes and mtimes are in the key: a changed file re-reads.
    files = tuple(
        (p.name, p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(checkpoint.glob("*.safetensors"))
    )
    key = (str(checkpoint.resolve()), format_name, files)
    with state.lock:
        if key not in state.checkpoints:
            state.checkpoints[key] = find_tables(checkpoint, format_name)
        return state.checkpoints[key]


def table_dirs(
    ssd_dir: Path, family: ModelFamily, hf_config: HfConfig, tp_size: int
) -> list[tuple[Path, TableShard]]:
    """Every table directory of the model under ``ssd_dir`` and what it holds: one per
    layer, or one per TP rank and layer when the family shards its tables."""
    return [
        (table_dir(ssd_dir, shard.layer_id, shard.shard), shard)
        for shard in family.table_shards(hf_config, tp_size)
    ]


def space_needed(
    state: TableState,
    ssd_dir: Path,
    family: ModelFamily,
    hf_config: HfConfig,
    model_path: str | None,
    tp_size: int = 1,
) -> tuple[int, int]:
    """(bytes still to write, bytes of outdated tables that are removed first) for every
    table of this model under ``ssd_dir`` (each TP rank's shard when the tables are
    sharded), in the page-padded on-disk layout, as the table open will decide."""
    from engram.ssd.ensure import decide

    readable = bool(model_path) and any(Path(model_path).glob("*.safetensors"))
    write = stale = 0
    for path, shard in table_dirs(ssd_dir, family, hf_config, tp_size):
        if not readable:
            # NOTE: no rows to compare a table with, so none counts as reusable
            # (serving converts from the checkpoint's files and fails without them).
            write += family.disk_bytes(hf_config, shard)
            continue
        decision = decide(
            path, checkpoint_source(state, family, model_path, shard.layer_id, shard.rows)
        )
        write += decision.write_bytes
        stale += decision.stale_bytes
    return write, stale
