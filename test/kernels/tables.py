"""Random FP8 tables and batches for the kernel tests (fresh data every run)."""

from __future__ import annotations

import torch
from engram_kernels import UniqueCounter

from engram.fp8 import dequantize_rows, quantize_rows

POISON = -1  # 0xFFFF: a negative NaN, never written by the kernels (their NaN is 0x7FC0)


def random_table(rows: int, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight uint8 [rows, dim], scale uint8 [rows, dim/32]) with per-row magnitudes
    spread over many exponents, so the scales differ from row to row."""
    magnitudes = torch.exp2(torch.randint(-30, 30, (rows, 1)).float())
    weight, scale = quantize_rows(torch.randn(rows, dim) * magnitudes)
    assert bool((weight != 0).any()) and bool((scale != scale[0, 0]).any())
    return weight, scale


def reference(weight: torch.Tensor, scale: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Torch reference rows of ``ids`` (any shape); padding (id < 0) gives zeros."""
    flat = ids.reshape(-1).long()
    rows = dequantize_rows(weight[flat.clamp_min(0)], scale[flat.clamp_min(0)])
    rows[flat < 0] = 0
    return rows.view(*ids.shape, weight.shape[1])


def poisoned(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An output buffer whose every element shows if a kernel leaves it unwritten."""
    bits = torch.int16 if dtype == torch.bfloat16 else dtype
    return torch.full(shape, POISON, dtype=bits, device=device).view(dtype)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-identical bf16 tensors."""
    return torch.equal(a.cpu().view(torch.int16), b.cpu().view(torch.int16))


def drained(counter: UniqueCounter) -> int:
    """Everything ``counter`` counted and did not report yet: once the device is idle the
    first ``take`` starts the copy of the final total, the second reports it."""
    total = 0
    for _ in range(2):
        if counter.device.type != "cpu":
            torch.cuda.synchronize(counter.device)
        total += counter.take()
    return total
