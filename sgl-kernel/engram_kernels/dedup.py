"""Device-side dedup of a batch's row ids, inside the gather: each distinct row is read once.

A lane claims its row id in an open-addressing hash table (``cap`` int64 slots, a
power of two >= 2x the batch). A slot holds ``row_id << 32 | position`` of the first
lane that claimed it, so every lane learns its *source*: its own position when it
claimed the row (it is the one that reads the table), else the position of the lane
that did. The gather reads rows only at sources, then :func:`expand_rows` copies each
source's output row to the lanes that repeat it.

NOTE: which lane claims a row depends on how the device schedules the lanes (only the
interpreter runs them in order), so nothing here may depend on which lane of a repeated
row becomes its source: every lane gets the same row either way.

NOTE: no host synchronisation and no data-dependent shapes, so it can be captured in
a CUDA graph. Lanes that have nothing to claim in a probe round point their (no-op)
compare-and-swap at a private scratch slot, so a hot row never serialises the lanes
that already resolved it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engram_kernels._jit import block, count_true, grid_for, kernel, on_device

EMPTY = tl.constexpr(-1)
NEVER = tl.constexpr(-2)  # a value no slot ever holds: a compare-and-swap that never swaps
GOLDEN = tl.constexpr(-7046029254386353131)  # 0x9E3779B97F4A7C15 as int64
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
