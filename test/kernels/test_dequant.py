"""The fused dequantisation is bit-exact with engram.fp8.dequantize_rows."""

from __future__ import annotations

import pytest
import torch
from engram_kernels import gather_dequant

from engram.errors import EngramTableError
from engram.fp8 import dequantize_rows
from test.kernels.tables import poisoned

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")


def test_every_e4m3_value_times_every_exponent_byte(device: torch.device) -> None:
    # Row e holds all 256 e4m3 bytes (shuffled) under exponent byte e, for e = 0..254:
    # every (value, exponent) pair, including e4m3 subnormals, NaNs, results that are
    # bf16 subnormals (rounded) and fp32 overflows (inf).
    weight = torch.stack([torch.randperm(256) for _ in range(255)]).to(torch.uint8)
    scale = torch.arange(255, dtype=torch.uint8).unsqueeze(1).repeat(1, 8)
    ids = torch.randperm(255)
    expected = dequantize_rows(weight[ids], scale[ids])
    out = poisoned((255, 256), torch.bfloat16, device)
    got = gather_dequant(weight.to(device), scale.to(device), ids.to(device), out=out).cpu()
    # Every bit, NaNs included: the kernel and the CPU placements return one NaN, 0x7FC0.
    assert torch.equal(got.view(torch.int16), expected.view(torch.int16))
    assert bool((got.view(torch.int16)[expected.isnan()] == 0x7FC0).all())
    # The table reaches each interesting class at least once.
    assert bool((expected.view(torch.int16) & 0x7F80 == 0).logical_and(expected != 0).any())
    assert bool(expected.isinf().any()) and bool(expected.isnan().any())


def test_float8_dtypes_are_read_as_their_bytes(device: torch.device) -> None:
    weight = torch.randint(0, 256, (40, 64), dtype=torch.uint8)
    weight[weight & 0x7F == 0x7F] = 0x11  # no NaNs
    scale = torch.randint(100, 150, (40, 2), dtype=torch.uint8)
    ids = torch.randint(0, 40, (17,))
    typed = gather_dequant(
        weight.view(torch.float8_e4m3fn).to(device),
        scale.view(torch.float8_e8m0fnu).to(device),
        ids.to(device),
    )
    assert torch.equal(
        typed.cpu().view(torch.int16), dequantize_rows(weight[ids], scale[ids]).view(torch.int16)
    )


def test_exponent_byte_255_reads_as_nan(device: torch.device) -> None:
    weight = torch.randint(1, 0x70, (2, 32), dtype=torch.uint8)
    scale = torch.tensor([[255], [127]], dtype=torch.uint8)
    with pytest.raises(EngramTableError, match="255"):
        dequantize_rows(weight, scale)  # the reference refuses such tables outright
    out = gather_dequant(weight.to(device), scale.to(device), torch.tensor([0, 1], device=device))
    assert bool(out[0].isnan().all()) and not bool(out[1].isnan().any())
