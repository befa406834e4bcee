"""Gather + dequantise of Engram rows, from device or mapped host memory.

``gather_dequant`` picks one of two routes, both bit-identical to the torch reference:

* a device (HBM) table without dedup: ``_gather_kernel``, one pass: each program reads
  ``GATHER_ROWS`` rows (D e4m3 bytes and D/32 exponent bytes each, through raw addresses
  and row strides, so separate arrays and the packed 264-byte layout are the same code)
  and writes bf16 rows;
* a host table read over UVA, or any table with ``dedup``: ``staged.py``, rows copied
  as stored into a device buffer first (many rows in flight; with dedup each distinct
  row once, in row order, after a sort), then dequantised into request order.

Ids outside ``[0, rows)`` -- negative ids are padding -- give zero rows.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engram_kernels._jit import block, count_true, grid_for, kernel, launch_device, on_device
from engram_kernels.counters import UniqueCounter
from engram_kernels.dequant import FP8_BLOCK, dequant_bf16_bits
from engram_kernels.operands import (
    TableArray,
    TableOperand,
    check_ids_in_range,
    check_row_ids,
    table_operand,
)
from engram_kernels.staged import alignment, staged_gather

GATHER_ROWS = block(16, 512)
BLOCK = tl.constexpr(FP8_BLOCK)


@kernel(sizes=("n", "num_rows"))
def _gather_kernel(
    w_addr,
    s_addr,
    w_stride,
    s_stride,
    ids_ptr,
    n,
    num_rows,
    out_ptr,
    count_ptr,
    D: tl.constexpr,
    NB: tl.constexpr,
    NB_P2: tl.constexpr,
    ROWS: tl.constexpr,
    W_ALIGN: tl.constexpr,
    S_ALIGN: tl.constexpr,
    COUNT: tl.constexpr,
):
    pos = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    in_batch = pos < n
    ids = tl.load(ids_ptr + pos, mask=in_batch, other=-1).to(tl.int64)
    valid = in_batch & (ids >= 0) & (ids < num_rows)
    if COUNT:
        tl.atomic_add(count_ptr, count_true(valid).to(tl.int64))
    row = tl.where(valid, ids, 0)
    blk = tl.arange(0, NB_P2)
    col = blk[None, :, None] * BLOCK + tl.arange(0, BLOCK)[None, None, :]
    blk_ok = (blk < NB)[None, :]
    # NOTE: the row starts' alignment (computed on the host) is stated, so the loads
    # vectorise whatever Triton infers through the int -> pointer casts.
    w_row = w_addr.to(tl.int64).to(tl.pointer_type(tl.uint8)) + row * w_stride
    s_row = s_addr.to(tl.int64).to(tl.pointer_type(tl.uint8)) + row * s_stride
    w_row = tl.multiple_of(w_row, W_ALIGN)
    s_row = tl.multiple_of(s_row, S_ALIGN)
    w = tl.load(w_row[:, None, None] + col, mask=valid[:, None, None] & blk_ok[:, :, None], other=0)
    e = tl.load(s_row[:, None] + blk[None, :], mask=valid[:, None] & blk_ok, other=0)
    # Padding lanes load nothing: zero bytes dequantise to +0.0.
    bits = dequant_bf16_bits(w, e[:, :, None])
    dst = out_ptr + pos[:, None, None] * D + col
    tl.store(dst, bits, mask=in_batch[:, None, None] & blk_ok[:, :, None])


def gather_dequant(
    weight: TableArray,
    scale: TableArray,
    row_ids: torch.Tensor,
    *,
    dedup: bool = False,
    out: torch.Tensor | None = None,
    unique_counter: UniqueCounter | None = None,
) -> torch.Tensor:
    """bf16 rows ``[*row_ids.shape, D]`` of the FP8 table ``(weight [rows, D], scale
    [rows, D/32])``, bit-identical to ``engram.fp8.dequantize_rows``.

    ``weight``/``scale`` are tensors on the ids' device (column ranges of one packed
    ``[rows, D + D/32]`` tensor work too) or :class:`DeviceView` s of registered host
    memory. ``dedup`` reads each distinct row once, in row order (it sorts the ids:
    worth it only for large batches, see ``lookup.py``). ``unique_counter`` accumulates
    the number of rows actually read, on the device.
    """
    table = table_operand(weight, scale)
    ids = check_row_ids(row_ids)
    shape = (*row_ids.shape, table.head_dim)
    if out is None:
        out = torch.empty(shape, dtype=torch.bfloat16, device=ids.device)
    elif out.dtype != torch.bfloat16 or tuple(out.shape) != shape or not out.is_contiguous():
        raise ValueError(
            f"out must be a contiguous bfloat16 tensor of shape {list(shape)}, got "
            f"{out.dtype} {list(out.shape)}"
        )
    count = unique_counter.total if unique_counter is not None else None
    device = launch_device(ids, out, count)
    if table.device != device:
        raise ValueError(f"the table is on {table.device} but the row ids are on {device}")
    check_ids_in_range(ids, table.num_rows)
    n = ids.numel()
    if n == 0:
        return out
    bits = out.view(n, table.head_dim).view(torch.int16)
    if dedup or table.host_memory:
        staged_gather(table, ids, bits, count, dedup=dedup)
    else:
        _direct_gather(table, ids, bits, count)
    return out


def _direct_gather(
    table: TableOperand, ids: torch.Tensor, bits: torch.Tensor, count: torch.Tensor | None
) -> None:
    n = ids.numel()
    with on_device(ids.device):
        _gather_kernel[grid_for(n, GATHER_ROWS)](
            table.weight_addr,
            table.scale_addr,
            table.weight_stride,
            table.scale_stride,
            ids,
            n,
            table.num_rows,
            bits,
            count if count is not None else ids,
            D=table.head_dim,
            NB=table.n_blocks,
            NB_P2=triton.next_power_of_2(table.n_blocks),
            ROWS=GATHER_ROWS,
            W_ALIGN=alignment(table.weight_addr, table.weight_stride, host=False),
            S_ALIGN=alignment(table.scale_addr, table.scale_stride, host=False),
            COUNT=count is not None,
        )
