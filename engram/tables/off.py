"""``off``: no table at all; the Engram module passes its input through unchanged."""

from __future__ import annotations

import torch

from engram.errors import EngramTableError
from engram.placements import OFF
from engram.tables.base import EngramTable
from engram.tables.options import TableOptions


class OffTable(EngramTable):
    declaration = OFF

    def __init__(self, num_rows: int, head_dim: int, *, device: torch.device):
        super().__init__(num_rows, head_dim, device)

    @classmethod
    def open(
        cls, weight: torch.Tensor | None, scale: torch.Tensor | None, options: TableOptions
    ) -> OffTable:
        """A table of the spec's size (``num_rows``, ``head_dim``; else the given rows')."""
        rows, dim = (0, 0) if weight is None else weight.shape
        return cls(
            rows if options.num_rows is None else options.num_rows,
            dim if options.head_dim is None else options.head_dim,
            device=options.torch_device,
        )

    def _gather(self, ids: torch.Tensor) -> tuple[torch.Tensor, int, dict[str, int]]:
        # NOTE: callers ask ``declaration.holds_table`` and skip the Engram layer; reaching
        # here means a caller forgot, and zeros would silently change the model.
        raise EngramTableError("the 'off' placement holds no rows; skip the Engram layer instead")

    def memory(self) -> dict[str, int]:
        return {}
