"""Gather + dequantise rows of an FP8 table: the torch reference path (CPU).

GPU tables go through ``engram_kernels.gather_dequant``; this module is the reference
the kernels are tested against and the path every CPU table uses.
"""

from __future__ import annotations

import numpy as np
import torch

from engram.fp8 import dequantize_rows


def gather_dequant_torch(
    weight: torch.Tensor, scale: torch.Tensor, ids: torch.Tensor, *, dedup: bool = True
) -> tuple[torch.Tensor, int]:
    """bf16 rows [n, D] of flat ``ids`` and the number of distinct rows read."""
    ids = ids.to(torch.int64)
    if not dedup:
        return dequantize_rows(weight[ids], scale[ids]), ids.numel()
    # NOTE: numpy's unique is ~7x faster than torch.unique(return_inverse=True) on CPU.
    unique_np, inverse_np = np.unique(ids.numpy(), return_inverse=True)
    unique, inverse = torch.from_numpy(unique_np), torch.from_numpy(inverse_np)
    rows = dequantize_rows(weight[unique], scale[unique])
    return rows[inverse], unique.numel()
