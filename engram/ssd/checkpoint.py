"""The n-gram tables inside a safetensors checkpoint, whichever family's they are.

A checkpoint holds the tables of one checkpoint format
(:mod:`engram.ssd.checkpoint_formats`: DeepSeek-V4.1's Engram naming, Qwen3.8-Flash-Next's
PLE shards): the format whose tensor names the checkpoint has finds its tables, checks
them against ``config.json`` and streams each one's rows by range
(:mod:`engram.ssd.safetensors_files`), so a table never has to fit in memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engram.errors import EngramTableError
from engram.model_config import has_model_config, read_model_config
from engram.ssd.checkpoint_formats import CHECKPOINT_FORMATS, CheckpointFormat
from engram.ssd.safetensors_files import checkpoint_entries
from engram.ssd.sources import RowSource


@dataclass(frozen=True)
class CheckpointTables:
    """A checkpoint's tables (row sources by decoder layer) and the format they are in."""

    format: CheckpointFormat
    tables: dict[int, RowSource]

    def describe(self) -> str:
        """One line for the user: the family, the format, the tables and their rows."""
        first = next(iter(self.tables.values()))
        rows = sum(t.num_rows for t in self.tables.values())
        return (
            f"{self.format.family} tables ({self.format.name}): layers {sorted(self.tables)}, "
            f"{rows:,} rows of {first.row_format.describe()}"
        )


def find_checkpoint_tables(checkpoint: Path, format_name: str | None = None) -> CheckpointTables:
    """The tables of ``checkpoint`` (a directory of ``*.safetensors`` and ``config.json``),
    in the format named ``format_name`` (the served family's), or in the one format whose
    tensor names it holds (``None``: the converter, which serves no family)."""
    entries = checkpoint_entries(checkpoint)
    if format_name is not None:
        if format_name not in CHECKPOINT_FORMATS:
            raise EngramTableError(
                f"no checkpoint format {format_name!r}; known: {', '.join(CHECKPOINT_FORMATS)}"
            )
        wanted = CHECKPOINT_FORMATS[format_name]
        if not any(map(wanted.claims, entries)):
            raise EngramTableError(
                f"checkpoint {checkpoint} has no {wanted.family} tables "
                f"(looked for {wanted.pattern})"
            )
        claimed = [wanted]
    else:
        claimed = [f for f in CHECKPOINT_FORMATS.values() if any(map(f.claims, entries))]
    if not claimed:
        known = "; ".join(f"{f.family}: {f.pattern}" for f in CHECKPOINT_FORMATS.values())
        raise EngramTableError(f"checkpoint {checkpoint} has no n-gram tables (looked for {known})")
    if len(claimed) > 1:
        names = " and ".join(f.family for f in claimed)
        raise EngramTableError(f"checkpoint {checkpoint} holds tables of {names}: one family only")
    config = read_model_config(checkpoint) if has_model_config(checkpoint) else None
    tables = claimed[0].tables(checkpoint, entries, config)
    return CheckpointTables(claimed[0], tables)


def find_tables(checkpoint: Path, format_name: str | None = None) -> dict[int, RowSource]:
    """Every n-gram table in ``checkpoint``, by decoder layer (see
    :func:`find_checkpoint_tables`)."""
    return find_checkpoint_tables(checkpoint, format_name).tables
