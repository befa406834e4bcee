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
        self._handle = None
        self._unique = None
        if self.device.type != "cuda":
            self.weight = _host_copy(weight)
            self.scale = _host_copy(scale)
            return
        from engram_kernels import UniqueCounter, alloc_host_buffer, register_host_table

        # NOTE: one packed [rows, D + D/32] buffer on (advised) huge pages: a row is one
        # contiguous read over the bus, and torch's pinned allocator would round a
        # 94 GiB table up to 128 GiB.
        packed = alloc_host_buffer(self.num_rows * self.row_bytes).view(-1, self.row_bytes)
        packed[:, : self.head_dim] = weight
        packed[:, self.head_dim :] = scale
        self.weight, self.scale = packed[:, : self.head_dim], packed[:, self.head_dim :]
        self._handle = register_host_table(
            self.weight, self.scale, device=self.device, label="Engram dram table"
        )
        self._unique = UniqueCounter(self.device)

    def _gather(self, ids: torch.Tensor) -> tuple[torch.Tensor, int, dict[str, int]]:
        if self._handle is None:
            rows, unique = gather_dequant_torch(self.weight, self.scale, ids.cpu())
            return rows.to(self.device), unique, {"dram": unique * self.row_bytes}
        from engram_kernels.lookup import counted_lookup

        rows, unique = counted_lookup(
            self._handle.weight, self._handle.scale, ids.to(self.device), self._unique
        )
        return rows, unique, {"dram": unique * self.row_bytes}

    def memory(self) -> dict[str, int]:
        return {"dram": self.weight.numel() + self.scale.numel()}

    def close(self) -> None:
        if self._handle is not None:
            from engram_kernels import unregister_host_table

            unregister_host_table(self._handle)
            self._handle = None
        self.weight = self.scale = torch.empty(0, dtype=torch.uint8)


def _host_copy(t: torch.Tensor) -> torch.Tensor:
    out = torch.empty(t.shape, dtype=t.dtype)
    out.copy_(t)
    return out
