"""Gather + dequantise rows of an FP8 table on the CPU: the path every CPU table uses.

GPU tables go through ``engram_kernels.gather_dequant``, which is bit-identical (the
kernel tests compare it with :func:`engram.fp8.dequantize_rows`).
"""

from __future__ import annotations

import numpy as np
import torch

from engram.fp8 import dequantize_rows


def gather_dequant_torch(
    weight: torch.Tensor, scale: torch.Tensor, ids: torch.Tensor
) -> tuple[torch.Tensor, int]:
    """bf16 rows [n, D] of flat ``ids`` and the number of distinct rows read (each is
    dequantised once)."""
    # NOTE: numpy's unique is ~7x faster than torch.unique(return_inverse=True) on CPU.
    unique_np, inverse_np = np.unique(ids.to(torch.int64).numpy(), return_inverse=True)
    unique, inverse = torch.from_numpy(unique_np), torch.from_numpy(inverse_np)
    rows = dequantize_rows(weight[unique], scale[unique])
    return rows[inverse], unique.numel()
