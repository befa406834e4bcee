"""Read strategies of the SSD tier, chosen by name (``reader_names()`` feeds the CLI
choice; the table option is ``read=``).

``mmap`` is the default: it measured fastest both warm and cold (``python
benchmark/bench_lookup.py --compare-readers``; the figures are in :mod:`engram.ssd`,
with why there is no io_uring strategy).
"""

from __future__ import annotations

from pathlib import Path

from engram.errors import EngramTableError
from engram.ssd.block_hashes import BlockChecks
from engram.ssd.layout import DiskLayout
from engram.ssd.read_strategies import DEFAULT_READER
from engram.ssd.readers.base import ALL_ROWS, RowReader
from engram.ssd.readers.direct import DirectReader
from engram.ssd.readers.mapped import MappedReader
from engram.ssd.readers.pread import PreadReader

READERS: dict[str, type[RowReader]] = {}


def register_reader(cls: type[RowReader]) -> type[RowReader]:
    READERS[cls.name] = cls
    return cls


def reader_names() -> list[str]:
    return list(READERS)


def open_reader(
    name: str, path: Path, layout: DiskLayout, checks: BlockChecks | None = None
) -> RowReader:
    cls = READERS.get(name)
    if cls is None:
        raise EngramTableError(
            f"unknown SSD read strategy {name!r}; choose one of {', '.join(READERS)}"
        )
    return cls(path, layout, checks=checks)


register_reader(MappedReader)
register_reader(PreadReader)
register_reader(DirectReader)

__all__ = [
    "ALL_ROWS",
    "DEFAULT_READER",
    "READERS",
    "RowReader",
    "open_reader",
    "reader_names",
    "register_reader",
]
