"""``dram``: the table lives in pinned host memory and the GPU reads rows over UVA.

On a machine without a GPU the table is plain host memory and lookups take the same
torch path as every CPU table.
"""

from __future__ import annotations

import torch

from engram.tables.base import EngramTable, as_table_bytes
from engram.tables.gather import gather_dequant_torch


class DramTable(EngramTable):
    placement = "dram"

    def __init__(self, weight: torch.Tensor, scale: torch.Tensor, *, device: torch.device):
        super().__init__(weight.shape[0], weight.shape[1], device)
        weight, scale = as_table_bytes(weight, scale)
        on_gpu = self.device.type == "cuda"
        self.weight = _host_copy(weight, pin=on_gpu)
        self.scale = _host_copy(scale, pin=on_gpu)
        self._handle = None
        if on_gpu:
            from engram_kernels import register_host_table

            self._handle = register_host_table(self.weight, self.scale, device=self.device)

    def _gather(self, ids: torch.Tensor) -> tuple[torch.Tensor, int, dict[str, int]]:
        if self._handle is None:
            rows, unique = gather_dequant_torch(self.weight, self.scale, ids.cpu())
            return rows.to(self.device), unique, {"dram": unique * self.row_bytes}
        from engram_kernels import gather_dequant

        rows = gather_dequant(
            self._handle.weight, self._handle.scale, ids.to(self.device), dedup=True
        )
        return rows, -1, {}

    def memory(self) -> dict[str, int]:
        return {"dram": self.weight.numel() + self.scale.numel()}

    def close(self) -> None:
        if self._handle is not None:
            from engram_kernels import unregister_host_table

            unregister_host_table(self._handle)
            self._handle = None
        self.weight = self.scale = torch.empty(0, dtype=torch.uint8)


def _host_copy(t: torch.Tensor, *, pin: bool) -> torch.Tensor:
    out = torch.empty(t.shape, dtype=t.dtype, pin_memory=pin)
    out.copy_(t)
    return out
