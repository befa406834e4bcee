"""A table this process serves, as the metrics, the read-ahead and the start-up log see
it (:class:`ServedTable`; ``tables.served`` keeps the list)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from engram.rows.read_ahead import ReadAheadHandle
from engram.tables import TableCounters


class Served(Protocol):
    """What the metrics and the SSD read-ahead use of a served table: an
    ``engram.tables.EngramTable``, or upstream's ``EngramEmbedding`` seen through
    ``upstream_embedding.UpstreamTable``."""

    placement: str
    num_rows: int
    counters: TableCounters

    def memory(self) -> dict[str, int]: ...

    def stats(self) -> dict[str, float]: ...

    def read_ahead(
        self, row_ids: torch.Tensor, *, urgent: bool = False
    ) -> ReadAheadHandle | None: ...


@dataclass(frozen=True)
class ServedTable:
    layer_id: int
    table: Served
    row_start: int = 0  # first row of the layer's table this (TP shard's) table holds
    # NOTE: False: every TP rank counts every id as requested (our tables), TP rank 0
    # exports them; True: each rank counts only its share (upstream's), all export.
    own_requests: bool = False
