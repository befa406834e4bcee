"""``hbm``: the table lives in device memory (on a CPU-only machine, CPU memory)."""

from __future__ import annotations

import torch

from engram.placements import HBM
from engram.tables.base import EngramTable, as_table_bytes, required_rows
from engram.tables.gather import gather_dequant_torch
from engram.tables.options import TableOptions


class HbmTable(EngramTable):
    declaration = HBM

    @classmethod
    def open(
        cls, weight: torch.Tensor | None, scale: torch.Tensor | None, options: TableOptions
    ) -> HbmTable:
        return cls(*required_rows(cls.placement, weight, scale), device=options.torch_device)

    def __init__(self, weight: torch.Tensor, scale: torch.Tensor, *, device: torch.device):
        super().__init__(weight.shape[0], weight.shape[1], device)
        weight, scale = as_table_bytes(weight, scale)
        self.weight = weight.to(self.device).contiguous()
        self.scale = scale.to(self.device).contiguous()
        self._unique = None
        if self.device.type != "cpu":
            from engram_kernels import UniqueCounter
            from engram_kernels.lookup import warm_up

            self._unique = UniqueCounter(self.device)
            warm_up(self.weight, self.scale, self._unique)

    def _gather(self, ids: torch.Tensor) -> tuple[torch.Tensor, int, dict[str, int]]:
        ids = ids.to(self.device)
        if self._unique is None:
            rows, unique = gather_dequant_torch(self.weight, self.scale, ids)
        else:
            from engram_kernels.lookup import counted_lookup

            # NOTE: the unique count is read back lazily (no sync), so it lags by a
            # few lookups; summed over time it is exact.
            rows, unique = counted_lookup(self.weight, self.scale, ids, self._unique)
        return rows, unique, {"hbm": unique * self.row_bytes}

    def memory(self) -> dict[str, int]:
        return {"hbm": self.weight.numel() + self.scale.numel()}

    def close(self) -> None:
        self.weight = self.scale = torch.empty(0, dtype=torch.uint8)
