"""The lookup the core library's GPU placements (``hbm``, ``dram``) run.

Rows read are counted on the device (``UniqueCounter``), so a lookup never
synchronises with the host. While a CUDA graph is being captured nothing is counted:
replays bypass Python, so their rows could not be matched to lookups.

Dedup policy: a batch of at least ``DEDUP_MIN_ROWS`` ids is deduplicated. Smaller
batches (decode steps) are latency-bound -- a few microseconds per launch -- where the
claim table fill and the expand launch cost more than repeated rows do, so they are
gathered directly and every row counts as read.
"""

from __future__ import annotations

import torch

from engram_kernels.counters import UniqueCounter
from engram_kernels.gather import gather_dequant
from engram_kernels.operands import TableArray

# NOTE: a first estimate (a prefill chunk is >= 16k rows, a decode step of 64 x 6
# verify tokens is 18k); benchmark/bench_gather.py measures both paths per size.
DEDUP_MIN_ROWS = 16384


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
        dedup=ids.numel() >= dedup_min_rows,
        # NOTE: a captured launch counts into a scratch counter: the same compiled
        # variant as the eager launches (no kernel may load during a capture), and
        # replays, which no host code sees, stay unreported.
        unique_counter=counter.scratch if capturing else counter,
    )
    return rows, 0 if capturing else counter.take()


def warm_up(weight: TableArray, scale: TableArray, counter: UniqueCounter) -> None:
    """Compile and load, eagerly, the gather variants ``counted_lookup`` launches for
    this table (with and without dedup), so that a CUDA graph capture of a lookup of
    any size never has to load a kernel."""
    ids = torch.zeros(2, dtype=torch.int64, device=counter.device)
    for dedup in (False, True):
        gather_dequant(weight, scale, ids, dedup=dedup, unique_counter=counter.scratch)
