"""The lookup the core library's GPU placements (``hbm``, ``dram``) run.

Rows read are counted on the device (``UniqueCounter``), so a lookup never
synchronises with the host. While a CUDA graph is being captured nothing is counted:
replays bypass Python, so their rows could not be matched to lookups.

Dedup policy (:func:`uses_dedup`): only a host (``dram``) table's batches of at least
``DEDUP_MIN_ROWS`` ids are deduplicated, which sorts them (``dedup.py``). There the sort
pays twice: each distinct row crosses the link once, and the rows are read in row order
(random order over an 8 GiB table ran ~4x slower at 393,216 rows on an H200). Smaller
batches (decode steps) are latency-bound, where the sort's fixed cost (tens of
microseconds) is more than the whole gather. An ``hbm`` table is never deduplicated:
repeated rows are cache hits there, and a sort would cost more than the gather itself.
"""

from __future__ import annotations

import torch

from engram_kernels.counters import UniqueCounter
from engram_kernels.gather import gather_dequant
from engram_kernels.operands import DeviceView, TableArray

# NOTE: a first estimate, to be set from benchmark/bench_gather.py's "dedup cost when
# nothing repeats" (target <= 5 %): a sort of n ids costs ~20-40 us at this size on an
# H200 and the UVA gather of 65,536 distinct rows ~0.6 ms. A decode step of 64 x 6
# verify tokens (18k rows) stays below it, so captured decode graphs never sort.
DEDUP_MIN_ROWS = 65536


def uses_dedup(weight: TableArray, rows: int, dedup_min_rows: int = DEDUP_MIN_ROWS) -> bool:
    """Whether :func:`counted_lookup` deduplicates a batch of ``rows`` ids."""
    return isinstance(weight, DeviceView) and rows >= dedup_min_rows


def counted_lookup(
    weight: TableArray,
    scale: TableArray,
    ids: torch.Tensor,
    counter: UniqueCounter,
    *,
    dedup_min_rows: int = DEDUP_MIN_ROWS,
) -> tuple[torch.Tensor, int]:
    """bf16 rows of flat ``ids`` and the rows read that the counter can report now
    (lags the lookups by at most a few calls; see ``UniqueCounter.take``)."""
    capturing = ids.is_cuda and torch.cuda.is_current_stream_capturing()
    rows = gather_dequant(
        weight,
        scale,
        ids,
        dedup=uses_dedup(weight, ids.numel(), dedup_min_rows),
        # NOTE: a captured launch counts into a scratch counter: the same compiled
        # variant as the eager launches (no kernel may load during a capture), and
        # replays, which no host code sees, stay unreported.
        unique_counter=counter.scratch if capturing else counter,
    )
    return rows, 0 if capturing else counter.take()


def warm_up(weight: TableArray, scale: TableArray, counter: UniqueCounter) -> None:
    """Compile and load, eagerly, the gather variants ``counted_lookup`` launches for
    this table (with dedup too for a host table), so that a CUDA graph capture of a
    lookup of any size never has to load a kernel."""
    ids = torch.zeros(2, dtype=torch.int64, device=counter.device)
    for dedup in (False, True) if isinstance(weight, DeviceView) else (False,):
        gather_dequant(weight, scale, ids, dedup=dedup, unique_counter=counter.scratch)
