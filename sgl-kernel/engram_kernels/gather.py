"""Fused gather + dequantise of Engram rows, from device or mapped host memory.

One program handles ``ROWS`` row ids: it reads each row's D e4m3 bytes and D/32
exponent bytes (through raw addresses and row strides, so separate arrays, the packed
264-byte layout and UVA host tables are the same code) and writes bf16 rows. Ids
outside ``[0, rows)`` -- negative ids are padding -- give zero rows.

With ``dedup`` the program first claims its ids (see ``dedup.py``), reads only rows it
claimed, and a second launch copies them to the lanes that repeat them.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engram_kernels._jit import block, count_true, grid_for, kernel, launch_device, on_device
from engram_kernels.counters import UniqueCounter
from engram_kernels.dedup import claim_rows, claim_table, expand_rows
from engram_kernels.dequant import FP8_BLOCK, dequant_bf16_bits
from engram_kernels.operands import TableArray, check_ids_in_range, check_row_ids, table_operand

GATHER_ROWS = block(16, 128)
BLOCK = tl.constexpr(FP8_BLOCK)


@kernel(sizes=("n", "num_rows", "cap_mask"))
def _gather_kernel(
    w_addr,
    s_addr,
    w_stride,
    s_stride,
    ids_ptr,
    n,
    num_rows,
    out_ptr,
    src_ptr,
    keys_ptr,
    cap_mask,
    count_ptr,
    D: tl.constexpr,
    NB: tl.constexpr,
    NB_P2: tl.constexpr,
    ROWS: tl.constexpr,
    W_ALIGN: tl.constexpr,
    S_ALIGN: tl.constexpr,
    DEDUP: tl.constexpr,
    COUNT: tl.constexpr,
):
    pos = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    in_batch = pos < n
    ids = tl.load(ids_ptr + pos, mask=in_batch, other=-1).to(tl.int64)
    valid = in_batch & (ids >= 0) & (ids < num_rows)
    read = valid
    if DEDUP:
        src = claim_rows(ids, pos, valid, keys_ptr, cap_mask)
        tl.store(src_ptr + pos, src, mask=in_batch)
        read = valid & (src == pos)
    if COUNT:
        tl.atomic_add(count_ptr, count_true(read).to(tl.int64))
    # Lanes that repeat a row another lane reads write nothing; padding writes zeros.
    write = in_batch & (read | ~valid)
    row = tl.where(read, ids, 0)
    blk = tl.arange(0, NB_P2)
    col = blk[None, :, None] * BLOCK + tl.arange(0, BLOCK)[None, None, :]
    blk_ok = (blk < NB)[None, :]
    # NOTE: Triton cannot see through the int -> pointer casts, so the row starts'
    # alignment (checked on the host) is stated; it lets the loads vectorise.
    w_row = w_addr.to(tl.int64).to(tl.pointer_type(tl.uint8)) + row * w_stride
    s_row = s_addr.to(tl.int64).to(tl.pointer_type(tl.uint8)) + row * s_stride
    w_row = tl.multiple_of(w_row, W_ALIGN)
    s_row = tl.multiple_of(s_row, S_ALIGN)
    w = tl.load(w_row[:, None, None] + col, mask=read[:, None, None] & blk_ok[:, :, None], other=0)
    e = tl.load(s_row[:, None] + blk[None, :], mask=read[:, None] & blk_ok, other=0)
    bits = dequant_bf16_bits(w, e[:, :, None])
    dst = out_ptr + pos[:, None, None] * D + col
    tl.store(dst, bits, mask=write[:, None, None] & blk_ok[:, :, None])


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
    memory. ``dedup`` reads each distinct row once. ``unique_counter`` accumulates the
    number of rows actually read, on the device.
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
    src = keys = None
    cap_mask = 0
    if dedup:
        src = torch.empty(n, dtype=torch.int64, device=device)
        keys, cap_mask = claim_table(n, GATHER_ROWS, device)
    with on_device(device):
        _gather_kernel[grid_for(n, GATHER_ROWS)](
            table.weight_addr,
            table.scale_addr,
            table.weight_stride,
            table.scale_stride,
            ids,
            n,
            table.num_rows,
            bits,
            src if src is not None else ids,
            keys if keys is not None else ids,
            cap_mask,
            count if count is not None else ids,
            D=table.head_dim,
            NB=table.n_blocks,
            NB_P2=triton.next_power_of_2(table.n_blocks),
            ROWS=GATHER_ROWS,
            W_ALIGN=_alignment(table.weight_addr, table.weight_stride),
            S_ALIGN=_alignment(table.scale_addr, table.scale_stride),
            DEDUP=dedup,
            COUNT=count is not None,
        )
    if dedup:
        expand_rows(bits, src)
    return out


def _alignment(addr: int, stride: int) -> int:
    """Largest power of two <= 16 dividing every row start ``addr + k * stride``."""
    both = addr | stride | 16
    return both & -both
