"""The Engram tables this process serves from, for the metrics and the startup log."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from engram.files import GIB
from engram.hashing import NgramHasher
from engram.tables import EngramTable

logger = logging.getLogger(__name__)

TIERS = ("hbm", "dram", "ssd")


@dataclass(frozen=True)
class ServedTable:
    layer_id: int
    table: EngramTable
    row_start: int = 0  # first row of the layer's table this (TP shard's) table holds


_tables: list[ServedTable] = []
_hasher: list[NgramHasher] = []
_lock = threading.Lock()


def add(layer_id: int, table: EngramTable, row_start: int = 0) -> None:
    with _lock:
        _tables.append(ServedTable(layer_id, table, row_start))


def served() -> list[ServedTable]:
    with _lock:
        return list(_tables)


def clear() -> None:
    with _lock:
        _tables.clear()
        _hasher.clear()


def set_hasher(hasher: NgramHasher) -> None:
    """The hasher of the served model (for reading SSD rows ahead: ``read_ahead``)."""
    with _lock:
        _hasher[:] = [hasher]


def hasher() -> NgramHasher | None:
    with _lock:
        return _hasher[0] if _hasher else None


def memory_by_tier() -> dict[str, int]:
    """Bytes held per tier by every served table (tiers with nothing are 0)."""
    totals = dict.fromkeys(TIERS, 0)
    for entry in served():
        for tier, n in entry.table.memory().items():
            totals[tier] = totals.get(tier, 0) + n
    return totals


def log_placement(placement: str, role_name: str) -> str:
    """The one startup line: placement and memory per tier."""
    mem = memory_by_tier()
    per_tier = ", ".join(f"{tier} {n / GIB:.3f} GiB" for tier, n in mem.items())
    line = (
        f"sglang-engram: {len(served())} Engram tables on this {role_name}, placement "
        f"{placement}: {per_tier}"
    )
    logger.info(line)
    return line
