"""The one naming of table directories under an SSD directory (``--engram-ssd-dir``,
``engram.convert --out``, the CPU tools' ``--ssd-dir``): ``layer{L}`` per Engram layer,
``layer{L}.tp{r}of{n}`` for one TP rank's shard. Every tool that reads or writes tables
there asks these functions, so a directory converted by one is reused by the others."""

from __future__ import annotations

from pathlib import Path


def shard_name(tp_rank: int, tp_size: int) -> str:
    """Suffix of a TP rank's shard directory (none without TP)."""
    return f".tp{tp_rank}of{tp_size}" if tp_size > 1 else ""


def table_dir(ssd_dir: str | Path, layer_id: int, shard: str = "") -> Path:
    """Layer ``layer_id``'s table directory (``shard``: :func:`shard_name`)."""
    return Path(ssd_dir) / f"layer{layer_id}{shard}"
