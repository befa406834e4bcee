"""Device-side dedup of a batch's row ids: each distinct row is read once.

A lane claims its row id in an open-addressing hash table (``cap`` int64 slots, a
power of two >= 2x the batch). A slot holds ``row_id << 32 | position`` of the first
lane that claimed it, so every lane learns its *source*: its own position when it
claimed the row (it is the one that reads the table), else the position of the lane
that did. The gather reads rows only at sources, then :func:`expand_rows` copies each
source's output row to the lanes that repeat it.

NOTE: no host synchronisation and no data-dependent shapes, so it can be captured in
a CUDA graph. Lanes that have nothing to claim in a probe round point their (no-op)
compare-and-swap at a private scratch slot, so a hot row never serialises the lanes
that already resolved it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engram_kernels._jit import block, count_true, grid_for, kernel, launch_device, on_device
from engram_kernels.operands import MAX_ROWS, check_ids_in_range, check_row_ids

EMPTY = tl.constexpr(-1)
NEVER = tl.constexpr(-2)  # a value no slot ever holds: a compare-and-swap that never swaps
GOLDEN = tl.constexpr(-7046029254386353131)  # 0x9E3779B97F4A7C15 as int64
CLAIM_BLOCK = block(128, 256)
EXPAND_BLOCK = block(32, 256)


def claim_table(n: int, block: int, device: torch.device) -> tuple[torch.Tensor, int]:
    """Empty slots for ``n`` ids claimed ``block`` lanes per program (plus one scratch
    slot per lane) and the slot mask."""
    cap = max(1024, triton.next_power_of_2(2 * max(n, 1)))
    lanes = grid_for(n, block)[0] * block
    return torch.full((cap + lanes,), -1, dtype=torch.int64, device=device), cap - 1


@kernel
def claim_rows(ids, pos, valid, keys_ptr, cap_mask):
    """Source position of each lane's row id (``pos`` for the claiming lane, -1 where
    not ``valid``). ``ids`` and ``pos`` are int64 blocks; ``keys_ptr`` the claim table."""
    mine = (ids << 32) | pos
    slot = ((ids * GOLDEN) >> 32) & cap_mask
    scratch = keys_ptr + cap_mask + 1 + pos
    src = tl.where(valid, pos, -1)
    active = valid
    remaining = count_true(active)
    while remaining > 0:
        seen = tl.load(keys_ptr + slot, mask=active, other=EMPTY)
        hit = active & ((seen >> 32) == ids)
        attempt = active & (seen == EMPTY)
        target = tl.where(attempt, keys_ptr + slot, scratch)
        expect = tl.where(attempt, EMPTY, NEVER).to(tl.int64)
        old = tl.atomic_cas(target, expect, mine)
        won = attempt & (old == EMPTY)
        raced = attempt & ((old >> 32) == ids)
        src = tl.where(hit, seen - (ids << 32), src)
        src = tl.where(raced, old - (ids << 32), src)
        active = active & ~(won | hit | raced)
        slot = tl.where(active, (slot + 1) & cap_mask, slot)
        remaining = count_true(active)
    return src


@kernel
def _claim_kernel(ids_ptr, n, num_rows, src_ptr, keys_ptr, cap_mask, BLOCK: tl.constexpr):
    pos = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    in_batch = pos < n
    ids = tl.load(ids_ptr + pos, mask=in_batch, other=-1).to(tl.int64)
    valid = in_batch & (ids >= 0) & (ids < num_rows)
    src = claim_rows(ids, pos, valid, keys_ptr, cap_mask)
    tl.store(src_ptr + pos, src, mask=in_batch)


@kernel(sizes=("n",))
def _expand_kernel(
    out_ptr, src_ptr, n, ROW: tl.constexpr, ROW_P2: tl.constexpr, BLOCK: tl.constexpr
):
    pos = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    in_batch = pos < n
    src = tl.load(src_ptr + pos, mask=in_batch, other=-1)
    repeat = in_batch & (src >= 0) & (src != pos)
    col = tl.arange(0, ROW_P2)
    mask = repeat[:, None] & (col < ROW)[None, :]
    rows = tl.load(out_ptr + src[:, None] * ROW + col[None, :], mask=mask, other=0)
    tl.store(out_ptr + pos[:, None] * ROW + col[None, :], rows, mask=mask)


def expand_rows(out: torch.Tensor, src: torch.Tensor) -> None:
    """Copy row ``src[i]`` of ``out`` [n, row] to row ``i`` wherever ``src[i]`` is
    another lane (in place; sources are never targets)."""
    n, row = out.shape
    with on_device(out.device):
        _expand_kernel[grid_for(n, EXPAND_BLOCK)](
            out, src, n, ROW=row, ROW_P2=triton.next_power_of_2(row), BLOCK=EXPAND_BLOCK
        )


def row_sources(ids: torch.Tensor, num_rows: int = MAX_ROWS) -> torch.Tensor:
    """Source position of each flat id (-1 for ids outside ``[0, num_rows)``)."""
    n = ids.numel()
    src = torch.empty(n, dtype=torch.int64, device=ids.device)
    keys, cap_mask = claim_table(n, CLAIM_BLOCK, ids.device)
    with on_device(ids.device):
        _claim_kernel[grid_for(n, CLAIM_BLOCK)](
            ids, n, num_rows, src, keys, cap_mask, BLOCK=CLAIM_BLOCK
        )
    return src


def unique_rows(row_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(unique, inverse)`` of ``row_ids`` (any shape): ``unique[inverse] == row_ids``.

    ``unique`` lists each distinct id once, in order of first occurrence; negative ids
    are padding, left out of ``unique``, with ``inverse = -1``. The ids are deduplicated
    on the device; sizing ``unique`` reads one count back (the only synchronisation).
    """
    ids = check_row_ids(row_ids)
    launch_device(ids)
    check_ids_in_range(ids, MAX_ROWS + 1)
    src = row_sources(ids)
    n = ids.numel()
    claims = src == torch.arange(n, device=ids.device)
    rank = torch.cumsum(claims, 0) - 1
    inverse = torch.where(src >= 0, rank[src.clamp_min(0)], -1)
    slots = torch.where(claims, rank, n)
    unique = torch.empty(n + 1, dtype=ids.dtype, device=ids.device).scatter_(0, slots, ids)
    count = int(claims.sum())
    return unique[:count], inverse.view(row_ids.shape)
