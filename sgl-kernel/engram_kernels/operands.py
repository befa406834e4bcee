"""Table operands of the gather kernels: a tensor, or a device view of host memory.

The kernels take the table as raw device addresses plus row strides, so the same kernels
reads device memory (HBM tables) and host memory mapped for the device (UVA tables)
alike, and the packed 264-byte-row layout is just a stride (weight and scale are two
column ranges of the same rows).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engram_kernels.dequant import FP8_BLOCK

_WEIGHT_DTYPES = (torch.uint8, torch.float8_e4m3fn)
_SCALE_DTYPES = (torch.uint8, torch.float8_e8m0fnu)
# NOTE: the row count travels as a kernel argument that Triton types by its value, so
# every table below 2**31 rows shares one compiled variant per kernel (warmed up once).
MAX_ROWS = 2**31 - 1


@dataclass(frozen=True)
class DeviceView:
    """A 2-D byte array at a device address: a host table as the device sees it.

    ``ptr`` is the address kernels must use (on ROCm it differs from the CPU address
    of registered host memory), ``row_stride`` the bytes between rows.
    """

    ptr: int
    shape: tuple[int, int]
    row_stride: int
    device: torch.device
    dtype: torch.dtype = torch.uint8

    def data_ptr(self) -> int:
        return self.ptr


TableArray = torch.Tensor | DeviceView


@dataclass(frozen=True)
class TableOperand:
    """What a gather launch needs to know about one (weight, scale) table."""

    weight_addr: int
    scale_addr: int
    weight_stride: int
    scale_stride: int
    num_rows: int
    head_dim: int
    device: torch.device
    host_memory: bool  # a DeviceView: host memory the device reads over the link

    @property
    def n_blocks(self) -> int:
        return self.head_dim // FP8_BLOCK


def table_operand(weight: TableArray, scale: TableArray) -> TableOperand:
    """Check ``(weight [rows, D], scale [rows, D/32])`` and return their addresses."""
    w_addr, w_shape, w_stride, w_dev = _describe("weight", weight, _WEIGHT_DTYPES)
    s_addr, s_shape, s_stride, s_dev = _describe("scale", scale, _SCALE_DTYPES)
    rows, dim = w_shape
    if dim < FP8_BLOCK or dim % FP8_BLOCK or s_shape != (rows, dim // FP8_BLOCK):
        raise ValueError(
            f"table scale is {list(s_shape)}, expected [{rows}, {dim // FP8_BLOCK}] for "
            f"weight {list(w_shape)} (one exponent byte per {FP8_BLOCK} values)"
        )
    if w_dev != s_dev:
        raise ValueError(f"table weight is on {w_dev} but its scale is on {s_dev}")
    if rows > MAX_ROWS:
        raise ValueError(f"tables of more than {MAX_ROWS:,} rows are not supported")
    host = isinstance(weight, DeviceView) or isinstance(scale, DeviceView)
    return TableOperand(w_addr, s_addr, w_stride, s_stride, rows, dim, w_dev, host)


def _describe(
    name: str, array: TableArray, dtypes: tuple[torch.dtype, ...]
) -> tuple[int, tuple[int, int], int, torch.device]:
    if isinstance(array, DeviceView):
        if array.dtype not in dtypes:
            raise ValueError(f"table {name} must be one of {dtypes}, got {array.dtype}")
        return array.ptr, tuple(array.shape), array.row_stride, array.device
    if not isinstance(array, torch.Tensor):
        raise ValueError(f"table {name} must be a tensor or a DeviceView, got {type(array)}")
    if array.dtype not in dtypes:
        raise ValueError(f"table {name} must be {' or '.join(map(str, dtypes))}, got {array.dtype}")
    if array.ndim != 2 or (array.shape[1] > 1 and array.stride(1) != 1):
        raise ValueError(
            f"table {name} must be 2-D with contiguous rows, got shape {list(array.shape)} "
            f"strides {list(array.stride())}"
        )
    return array.data_ptr(), (array.shape[0], array.shape[1]), array.stride(0), array.device


def check_row_ids(row_ids: torch.Tensor) -> torch.Tensor:
    """Flat contiguous int32/int64 ids; raises naming a bad dtype."""
    if not isinstance(row_ids, torch.Tensor) or row_ids.dtype not in (torch.int32, torch.int64):
        got = row_ids.dtype if isinstance(row_ids, torch.Tensor) else type(row_ids)
        raise ValueError(f"row ids must be an int32 or int64 tensor, got {got}")
    return row_ids.reshape(-1).contiguous()


def check_ids_in_range(ids: torch.Tensor, num_rows: int) -> None:
    """On CPU, reject ids past the table (negative ids are padding). GPU ids are not
    checked: that would synchronise; out-of-range ids there read as zero rows."""
    if ids.device.type == "cpu" and ids.numel():
        hi = int(ids.max())
        if hi >= num_rows:
            raise ValueError(f"row id {hi} is out of range for a table of {num_rows:,} rows")
