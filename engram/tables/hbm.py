"""``hbm``: the table lives in device memory (on a CPU-only machine, CPU memory)."""

from __future__ import annotations

import torch

from engram.tables.base import EngramTable, as_table_bytes
from engram.tables.gather import gather_dequant_torch


class HbmTable(EngramTable):
    placement = "hbm"

    def __init__(self, weight: torch.Tensor, scale: torch.Tensor, *, device: torch.device):
        super().__init__(weight.shape[0], weight.shape[1], device)
        weight, scale = as_table_bytes(weight, scale)
        self.weight = weight.to(self.device).contiguous()
        self.scale = scale.to(self.device).contiguous()

    def _gather(self, ids: torch.Tensor) -> tuple[torch.Tensor, int, dict[str, int]]:
        ids = ids.to(self.device)
        if self.device.type == "cpu":
            rows, unique = gather_dequant_torch(self.weight, self.scale, ids)
        else:
            from engram_kernels import gather_dequant

            rows, unique = gather_dequant(self.weight, self.scale, ids, dedup=True), -1
        return rows, unique, {"hbm": max(unique, 0) * self.row_bytes}

    def memory(self) -> dict[str, int]:
        return {"hbm": self.weight.numel() + self.scale.numel()}

    def close(self) -> None:
        self.weight = self.scale = torch.empty(0, dtype=torch.uint8)
