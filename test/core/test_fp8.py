"""FP8 rows: every e4m3 value and exponent byte against upstream's torch dequant."""

from __future__ import annotations

import pytest
import torch

from engram import EngramTableError
from engram.fp8 import dequantize_rows, pack_rows, quantize_rows, unpack_rows


def upstream_dequant(weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """What SGLang's CPU table path computes: float(e4m3) * float(e8m0), one bf16 cast."""
    rows = weight.view(torch.float8_e4m3fn).float().unflatten(-1, (-1, 32))
    return (
        (rows * scale.view(torch.float8_e8m0fnu).float().unsqueeze(-1))
        .flatten(-2)
        .to(torch.bfloat16)
    )


def test_every_value_and_exponent_matches_upstream() -> None:
    values = torch.arange(256, dtype=torch.uint8)
    values = values[(values & 0x7F) != 0x7F]  # e4m3fn NaN encodings have no value to compare
    exps = torch.arange(255, dtype=torch.uint8)
    weight = values.repeat(32 * 255).reshape(255, -1)  # [255 exps, 254 * 32]
    scale = exps.unsqueeze(1).expand(255, weight.shape[1] // 32).contiguous()
    ours = dequantize_rows(weight, scale)
    theirs = upstream_dequant(weight, scale)
    assert torch.equal(ours.view(torch.int16), theirs.view(torch.int16))
    assert ours[0].float().abs().max() > 0  # e = 0 is 2**-127, not zero, for large values


def test_scale_nan_byte_is_rejected() -> None:
    weight = torch.randint(0, 126, (2, 64), dtype=torch.uint8)
    scale = torch.randint(100, 150, (2, 2), dtype=torch.uint8)
    scale[1, 0] = 255
    with pytest.raises(EngramTableError, match="scale byte 255"):
        dequantize_rows(weight, scale)


def test_quantise_round_trip_is_close() -> None:
    rows = torch.randn(16, 256) * torch.rand(16, 1) * 50
    weight, scale = quantize_rows(rows)
    assert weight.shape == (16, 256) and scale.shape == (16, 8)
    back = dequantize_rows(weight, scale).float()
    rel = (back - rows).abs().max() / rows.abs().max()
    assert 0 < rel < 0.07  # e4m3 keeps 3 mantissa bits


def test_pack_unpack_is_lossless_and_264_bytes() -> None:
    weight = torch.randint(0, 256, (5, 256), dtype=torch.uint8)
    scale = torch.randint(0, 255, (5, 8), dtype=torch.uint8)
    packed = pack_rows(weight, scale)
    assert packed.shape == (5, 264)
    w, s = unpack_rows(packed, 256)
    assert torch.equal(w, weight) and torch.equal(s, scale)
    with pytest.raises(EngramTableError, match="264"):
        unpack_rows(packed[:, :200], 256)


def test_mismatched_scale_width_is_named() -> None:
    with pytest.raises(EngramTableError, match="do not pair"):
        dequantize_rows(
            torch.randint(1, 9, (2, 64), dtype=torch.uint8), torch.ones(2, 3, dtype=torch.uint8)
        )
