"""``dram``: the table lives in pinned host memory and the GPU reads rows over UVA.

On a machine without a GPU the table is plain host memory and lookups take the same
torch path as every CPU table. A loader that writes the rows into
:func:`packed_host_rows` first hands them over without a copy (the table is then held
once, not twice, while it is built).
"""

from __future__ import annotations

import logging

import torch

from engram.fp8 import row_bytes
from engram.placements import DRAM
from engram.tables.base import EngramTable, as_table_bytes, required_rows
from engram.tables.gather import gather_dequant_torch
from engram.tables.options import TableOptions

logger = logging.getLogger(__name__)


class DramTable(EngramTable):
    declaration = DRAM
    options = frozenset({"seed"})  # NOTE: the hot cache's (``with_hot_cache``), not the table's

    @classmethod
    def open(
        cls, weight: torch.Tensor | None, scale: torch.Tensor | None, options: TableOptions
    ) -> DramTable:
        if options.seed is not None and not options.hot_cache_capacity:
            logger.warning("%s: not seeded: the table has no hot cache", options.seed.name)
        return cls(*required_rows(cls.placement, weight, scale), device=options.torch_device)

    def __init__(self, weight: torch.Tensor, scale: torch.Tensor, *, device: torch.device):
        super().__init__(weight.shape[0], weight.shape[1], device)
        weight, scale = as_table_bytes(weight, scale)
        self._handle = None
        self._unique = None
        if _packed_on_host(weight, scale):
            self.weight, self.scale = weight, scale  # adopted: no second copy
        else:
            self.weight, self.scale = packed_host_rows(self.num_rows, self.head_dim, self.device)
            self.weight.copy_(weight)
            self.scale.copy_(scale)
        if self.device.type != "cuda":
            return
        from engram_kernels import UniqueCounter, register_host_table
        from engram_kernels.lookup import warm_up

        self._handle = register_host_table(
            self.weight, self.scale, device=self.device, label="Engram dram table"
        )
        self._unique = UniqueCounter(self.device)
        warm_up(self._handle.weight, self._handle.scale, self._unique)

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


def packed_host_rows(
    num_rows: int, head_dim: int, device: torch.device | str
) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 weight ``[rows, D]`` and scale ``[rows, D/32]`` views of one packed
    ``[rows, D + D/32]`` host buffer, the layout a ``dram`` table keeps; for a CUDA
    ``device`` on (advised) huge pages, ready for UVA registration."""
    width = row_bytes(head_dim)
    if torch.device(device).type == "cuda":
        from engram_kernels import alloc_host_buffer

        # NOTE: a row is one contiguous read over the bus, and torch's pinned allocator
        # would round a 94 GiB table up to 128 GiB.
        packed = alloc_host_buffer(max(num_rows, 1) * width)[: num_rows * width]
    else:
        packed = torch.empty(num_rows * width, dtype=torch.uint8, device="cpu")
    packed = packed.view(num_rows, width)
    return packed[:, :head_dim], packed[:, head_dim:]


def _packed_on_host(weight: torch.Tensor, scale: torch.Tensor) -> bool:
    """Are ``weight`` and ``scale`` the two halves of one packed host buffer?"""
    width = weight.shape[1] + scale.shape[1]
    return (
        weight.device.type == "cpu"
        and scale.device.type == "cpu"
        and weight.stride() == (width, 1)
        and scale.stride() == (width, 1)
        and scale.data_ptr() == weight.data_ptr() + weight.shape[1]
    )
