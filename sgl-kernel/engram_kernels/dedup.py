"""Sort-based dedup of a batch's row ids: each distinct row is read once, in row order.

``sort_ids`` sorts the ids with their positions (``torch.sort``: the keys ascending and,
for each sorted lane, the position it came from). In sorted order a row's repeats are
one run of equal keys, so a kernel needs no shared state to dedup:

* :func:`first_of_run`: a sorted lane reads its row exactly when its key differs from
  the previous lane's (the first lane of a run), so the distinct rows are read once
  each, in ascending row order (what a UVA read over a large table needs: random
  order costs address translation, ~4x at 393,216 rows on an H200);
* :func:`run_head`: every other lane of a run finds the run's first lane by a binary
  search for the lower bound of its key, and copies that lane's row.

NOTE: nothing here races: no atomics, no hash table, every lane's result is a pure
function of the sorted keys, whatever order the device runs the lanes in. Shapes are
fixed by the batch size and nothing synchronises with the host, so a lookup with dedup
can be captured in a CUDA graph. (This replaces an in-kernel claim table whose
compare-and-swap probing faulted on an H200 at >= 12,288 distinct ids.)
"""

from __future__ import annotations

import torch
import triton.language as tl

from engram_kernels._jit import count_true, kernel


def sort_ids(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(keys ascending, the position each sorted key came from) of flat ``ids``.

    Padding (negative ids) sorts first and ids past the table last; the kernels treat
    both as zero rows, so no id needs rewriting before the sort.
    """
    keys, order = torch.sort(ids)
    return keys, order


def search_steps(n: int) -> int:
    """Binary-search steps that find any lower bound among ``n`` sorted keys."""
    return max(1, int(n).bit_length())


@kernel
def first_of_run(keys_ptr, i, key, in_batch):
    """Lanes ``i`` (sorted order) whose ``key`` differs from the previous lane's."""
    prev = tl.load(keys_ptr + i - 1, mask=in_batch & (i > 0), other=0).to(tl.int64)
    return in_batch & ((i == 0) | (prev != key))


@kernel
def run_head(keys_ptr, i, key, valid, steps):
    """The first sorted lane holding each lane's ``key`` (``i`` itself for the first
    lane of a run). ``i`` int64 lanes, ``key`` their int64 keys, ``valid`` the lanes
    that need an answer; ``steps`` from :func:`search_steps`."""
    repeat = valid & ~first_of_run(keys_ptr, i, key, valid)
    # NOTE: invariant: keys[hi] == key and the run starts in [lo, hi]; each step at
    # least halves hi - lo, so search_steps(n) steps end with lo == hi, the head.
    lo = i * 0
    hi = i
    if count_true(repeat) > 0:  # a batch without repeats skips the search
        for _ in range(steps):
            active = repeat & (lo < hi)
            mid = (lo + hi) >> 1
            probe = tl.load(keys_ptr + mid, mask=active, other=0).to(tl.int64)
            below = active & (probe < key)
            lo = tl.where(below, mid + 1, lo)
            hi = tl.where(active & ~below, mid, hi)
    return hi
