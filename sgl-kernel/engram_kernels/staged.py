"""Gathers in two passes through a device staging buffer: host (UVA) tables and dedup.

1. ``_fetch_kernel`` copies table rows, as stored (D e4m3 bytes then D/32 exponent
   bytes: the checkpoint's 264-byte row for D = 256), into ``stage`` [n, D + D/32] on
   the device, ``FETCH_ROWS`` rows in flight per program and nothing else to do while
   they arrive. With dedup it walks the sorted ids and reads only the first lane of
   each run (``dedup.first_of_run``): each distinct row once, in ascending row order.
2. ``_place_kernel`` dequantises staged rows (device memory now) into the bf16 output
   in request order: lane i writes ``out[order[i]]`` from the staged row of its run's
   head (``dedup.run_head``); without dedup both are ``i``.

Ids outside ``[0, rows)`` (negative ids are padding) give zero rows and are not read.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engram_kernels._jit import block, count_true, grid_for, kernel, on_device
from engram_kernels.dedup import first_of_run, run_head, search_steps, sort_ids
from engram_kernels.dequant import FP8_BLOCK, dequant_bf16_bits
from engram_kernels.operands import TableOperand

# NOTE: rows in flight per program over the link. Measured on an H200 (PCIe Gen5, 8 GiB
# host table) with a plain copy of 264-byte rows: 16 rows per program reached 13 GB/s
# at 24,576 rows, 64 reached 28-33 GB/s (52-64 % of the pinned H2D copy with ids sorted,
# at 3,072 to 393,216 rows). Unmeasured since: this kernel's own rows per program.
FETCH_ROWS = block(64, 1024)
PLACE_ROWS = block(16, 1024)
# NOTE: host rows are read with at most 8-byte vector loads. A plain kernel reading
# 256-byte-aligned host rows with 16-byte loads and no 8-byte tail hit an illegal memory
# access on an H200 in 6 of 6 runs, cause unknown; the same kernel over 264-byte rows
# (8-byte loads) or 512-byte strides with the tail never did. dram tables hold the
# checkpoint's 264-byte rows, 8-byte aligned, so the cap costs them nothing; it keeps
# any other host layout (torch-pinned separate arrays) off the loads that faulted.
HOST_ALIGN = 8
BLOCK = tl.constexpr(FP8_BLOCK)


@kernel(sizes=("w_addr", "s_addr", "w_stride", "s_stride", "n", "num_rows"))
def _fetch_kernel(
    w_addr,
    s_addr,
    w_stride,
    s_stride,
    keys_ptr,
    n,
    num_rows,
    stage_ptr,
    count_ptr,
    D: tl.constexpr,
    D_P2: tl.constexpr,
    NB: tl.constexpr,
    NB_P2: tl.constexpr,
    ROWS: tl.constexpr,
    W_ALIGN: tl.constexpr,
    S_ALIGN: tl.constexpr,
    SORTED: tl.constexpr,
    COUNT: tl.constexpr,
):
    i = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    in_batch = i < n
    key = tl.load(keys_ptr + i, mask=in_batch, other=-1).to(tl.int64)
    read = in_batch & (key >= 0) & (key < num_rows)
    if SORTED:
        read = read & first_of_run(keys_ptr, i, key, in_batch)
    if COUNT:
        tl.atomic_add(count_ptr, count_true(read).to(tl.int64))
    row = tl.where(read, key, 0)
    # NOTE: addresses and strides are not specialised (``sizes``), so the alignment the
    # loads assume is exactly what is stated here (host rows: <= HOST_ALIGN).
    w_row = tl.multiple_of(
        w_addr.to(tl.int64).to(tl.pointer_type(tl.uint8)) + row * w_stride, W_ALIGN
    )
    s_row = tl.multiple_of(
        s_addr.to(tl.int64).to(tl.pointer_type(tl.uint8)) + row * s_stride, S_ALIGN
    )
    col = tl.arange(0, D_P2)
    blk = tl.arange(0, NB_P2)
    w_mask = read[:, None] & (col < D)[None, :]
    s_mask = read[:, None] & (blk < NB)[None, :]
    w = tl.load(w_row[:, None] + col[None, :], mask=w_mask, other=0)
    s = tl.load(s_row[:, None] + blk[None, :], mask=s_mask, other=0)
    dst = stage_ptr + i[:, None] * (D + NB)
    tl.store(dst + col[None, :], w, mask=w_mask)
    tl.store(dst + D + blk[None, :], s, mask=s_mask)


@kernel(sizes=("n", "num_rows", "steps"))
def _place_kernel(
    stage_ptr,
    keys_ptr,
    order_ptr,
    n,
    num_rows,
    steps,
    out_ptr,
    D: tl.constexpr,
    NB: tl.constexpr,
    NB_P2: tl.constexpr,
    ROWS: tl.constexpr,
    SORTED: tl.constexpr,
):
    i = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    in_batch = i < n
    key = tl.load(keys_ptr + i, mask=in_batch, other=-1).to(tl.int64)
    valid = in_batch & (key >= 0) & (key < num_rows)
    src = i
    dst = i
    if SORTED:
        src = run_head(keys_ptr, i, key, valid, steps)
        dst = tl.load(order_ptr + i, mask=in_batch, other=0).to(tl.int64)
    blk = tl.arange(0, NB_P2)
    col = blk[None, :, None] * BLOCK + tl.arange(0, BLOCK)[None, None, :]
    blk_ok = (blk < NB)[None, :]
    row = stage_ptr + tl.where(valid, src, 0) * (D + NB)
    w = tl.load(row[:, None, None] + col, mask=valid[:, None, None] & blk_ok[:, :, None], other=0)
    e = tl.load(row[:, None] + D + blk[None, :], mask=valid[:, None] & blk_ok, other=0)
    # Padding lanes load nothing: zero bytes dequantise to +0.0.
    bits = dequant_bf16_bits(w, e[:, :, None])
    out = out_ptr + dst[:, None, None] * D + col
    tl.store(out, bits, mask=in_batch[:, None, None] & blk_ok[:, :, None])


def staged_gather(
    table: TableOperand,
    ids: torch.Tensor,
    bits: torch.Tensor,
    count: torch.Tensor | None,
    *,
    dedup: bool,
) -> None:
    """Rows of flat ``ids`` into ``bits`` (int16 view of the bf16 output [n, D])."""
    n, device = ids.numel(), ids.device
    keys, order = sort_ids(ids) if dedup else (ids, ids)
    nb = table.n_blocks
    stage = torch.empty((n, table.head_dim + nb), dtype=torch.uint8, device=device)
    host = table.host_memory
    with on_device(device):
        _fetch_kernel[grid_for(n, FETCH_ROWS)](
            table.weight_addr,
            table.scale_addr,
            table.weight_stride,
            table.scale_stride,
            keys,
            n,
            table.num_rows,
            stage,
            count if count is not None else keys,
            D=table.head_dim,
            D_P2=triton.next_power_of_2(table.head_dim),
            NB=nb,
            NB_P2=triton.next_power_of_2(nb),
            ROWS=FETCH_ROWS,
            W_ALIGN=alignment(table.weight_addr, table.weight_stride, host),
            S_ALIGN=alignment(table.scale_addr, table.scale_stride, host),
            SORTED=dedup,
            COUNT=count is not None,
        )
        _place_kernel[grid_for(n, PLACE_ROWS)](
            stage,
            keys,
            order,
            n,
            table.num_rows,
            search_steps(n),
            bits,
            D=table.head_dim,
            NB=nb,
            NB_P2=triton.next_power_of_2(nb),
            ROWS=PLACE_ROWS,
            SORTED=dedup,
        )


def alignment(addr: int, stride: int, host: bool) -> int:
    """Largest power of two dividing every row start ``addr + k * stride``: at most
    16, and at most ``HOST_ALIGN`` for host memory."""
    both = addr | stride | (HOST_ALIGN if host else 16)
    return both & -both
