"""The Engram tables this process serves from, for the metrics, the read-ahead and the
startup log (the runtime holds them: ``EngramRuntime.tables``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

import torch

from engram.files import GIB
from engram.ssd.prefetch import PrefetchHandle
from engram.tables import TableCounters
from sglang_engram.lookahead.row_hasher import RowHasher
from sglang_engram.runtime import get_runtime

logger = logging.getLogger(__name__)

TIERS = ("hbm", "dram", "ssd")


class Served(Protocol):
    """What the metrics and the SSD read-ahead use of a served table: an
    ``engram.tables.EngramTable``, or upstream's ``EngramEmbedding`` seen through
    ``upstream_embedding.UpstreamTable``."""

    placement: str
    num_rows: int
    counters: TableCounters

    def memory(self) -> dict[str, int]: ...

    def stats(self) -> dict[str, float]: ...

    def prefetch(self, row_ids: torch.Tensor, *, urgent: bool = False) -> PrefetchHandle | None: ...


@dataclass(frozen=True)
class ServedTable:
    layer_id: int
    table: Served
    row_start: int = 0  # first row of the layer's table this (TP shard's) table holds
    # NOTE: False: every TP rank counts every id as requested (our tables), TP rank 0
    # exports them; True: each rank counts only its share (upstream's), all export.
    own_requests: bool = False


def add(layer_id: int, table: Served, row_start: int = 0, own_requests: bool = False) -> None:
    state = get_runtime().tables
    with state.lock:
        state.entries.append(ServedTable(layer_id, table, row_start, own_requests))


def served() -> list[ServedTable]:
    state = get_runtime().tables
    with state.lock:
        return list(state.entries)


def set_hasher(hasher: RowHasher) -> None:
    """The row hasher of the served model (for reading SSD rows ahead: ``ssd_read_ahead``)."""
    state = get_runtime().tables
    with state.lock:
        state.hasher = hasher


def hasher() -> RowHasher | None:
    state = get_runtime().tables
    with state.lock:
        return state.hasher


def memory_by_tier() -> dict[str, int]:
    """Bytes held per tier by every served table (tiers with nothing are 0)."""
    totals = dict.fromkeys(TIERS, 0)
    for entry in served():
        for tier, n in entry.table.memory().items():
            totals[tier] = totals.get(tier, 0) + n
    return totals


def log_placement(placement: str, role_name: str, implementation: str) -> str:
    """The one startup line: placement, the code serving it and memory per tier."""
    mem = memory_by_tier()
    per_tier = ", ".join(f"{tier} {n / GIB:.3f} GiB" for tier, n in mem.items())
    line = (
        f"sglang-engram: {len(served())} Engram tables on this {role_name}, placement "
        f"{placement} served by {implementation}: {per_tier}"
    )
    logger.info(line)
    return line
