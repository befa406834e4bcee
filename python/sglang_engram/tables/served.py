"""The Engram tables this process serves from, for the metrics, the read-ahead and the
startup log (the runtime holds them: ``EngramRuntime.tables``)."""

from __future__ import annotations

import logging

from engram.files import GIB
from sglang_engram.protocol.row_hasher import RowHasher
from sglang_engram.protocol.runtime import TableState
from sglang_engram.protocol.served_table import Served, ServedTable

logger = logging.getLogger(__name__)

TIERS = ("hbm", "dram", "ssd")


def add(
    state: TableState, layer_id: int, table: Served, row_start: int = 0, own_requests: bool = False
) -> None:
    with state.lock:
        state.entries.append(ServedTable(layer_id, table, row_start, own_requests))


def served(state: TableState) -> list[ServedTable]:
    with state.lock:
        return list(state.entries)


def set_hasher(state: TableState, hasher: RowHasher) -> None:
    """The row hasher of the served model (for reading SSD rows ahead: ``read_ahead.ssd``,
    which asks the family for it once the model is loaded)."""
    with state.lock:
        state.hasher = hasher


def hasher(state: TableState) -> RowHasher | None:
    with state.lock:
        return state.hasher


def memory_by_tier(state: TableState) -> dict[str, int]:
    """Bytes held per tier by every served table (tiers with nothing are 0)."""
    totals = dict.fromkeys(TIERS, 0)
    for entry in served(state):
        for tier, n in entry.table.memory().items():
            totals[tier] = totals.get(tier, 0) + n
    return totals


def log_placement(state: TableState, placement: str, role_name: str, implementation: str) -> str:
    """The one startup line: placement, the code serving it and memory per tier."""
    mem = memory_by_tier(state)
    per_tier = ", ".join(f"{tier} {n / GIB:.3f} GiB" for tier, n in mem.items())
    line = (
        f"sglang-engram: {len(served(state))} Engram tables on this {role_name}, placement "
        f"{placement} served by {implementation}: {per_tier}"
    )
    logger.info(line)
    return line
