"""FP8 Engram rows: e4m3 values with one ue8m0 exponent byte per 32 values.

A row of width D is ``D`` e4m3 bytes plus ``D / 32`` exponent bytes (264 bytes for
D = 256). Dequantisation is ``bf16(float32(e4m3) * 2**(e - 127))`` with a single
rounding (the fp32 product is exact); ``e = 0`` means ``2**-127`` and ``e = 255`` (NaN
in ue8m0) is rejected. The e4m3 NaN bytes (0x7F, 0xFF) give the bf16 NaN ``0x7FC0``, the
one NaN every placement returns (torch's own cast gives other bits on some CPUs).
"""

from __future__ import annotations

import torch

from engram.errors import EngramTableError

# NOTE: one ue8m0 exponent covers this many consecutive values of a row.
FP8_BLOCK = 32
E4M3_MAX = 448.0
SCALE_NAN = 255
BF16_NAN_BITS = 0x7FC0  # engram_kernels' dequant writes the same


def _scale_lut() -> torch.Tensor:
    """fp32 value of every exponent byte, built from bits so it is exact."""
    bits = torch.arange(256, dtype=torch.int32, device="cpu") << 23
    bits[0] = 1 << 22  # 2**-127 is the fp32 subnormal 0x00400000
    bits[SCALE_NAN] = 0x7FC00000
    return bits.view(torch.float32)


SCALE_LUT = _scale_lut()


def row_bytes(head_dim: int) -> int:
    """Bytes of one packed row: ``head_dim`` e4m3 bytes and one exponent byte per block."""
    return head_dim + head_dim // FP8_BLOCK


def as_uint8(t: torch.Tensor) -> torch.Tensor:
    """View an fp8/e8m0/uint8 tensor as raw bytes."""
    return t if t.dtype == torch.uint8 else t.view(torch.uint8)


def quantize_rows(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Float rows [R, D] -> (weight uint8 [R, D] of e4m3 bits, scale uint8 [R, D/32]).

    Each block's exponent is the smallest power of two that brings its max magnitude
    inside the e4m3 range.
    """
    if rows.ndim != 2 or rows.shape[1] % FP8_BLOCK:
        raise EngramTableError(
            f"rows to quantise must be [R, D] with D a multiple of {FP8_BLOCK}, "
            f"got {list(rows.shape)}"
        )
    r, d = rows.shape
    blocks = rows.float().reshape(r, d // FP8_BLOCK, FP8_BLOCK)
    amax = blocks.abs().amax(-1).clamp_min(torch.finfo(torch.float32).tiny)
    exp = torch.ceil(torch.log2(amax / E4M3_MAX)).clamp(-127, 127).to(torch.int32)
    scale = (exp + 127).to(torch.uint8)
    values = blocks / SCALE_LUT[scale.long()].unsqueeze(-1)
    weight = values.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).view(torch.uint8)
    return weight.reshape(r, d), scale


def dequantize_rows(weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Reference dequantisation: (weight [..., D], scale [..., D/32]) -> bf16 [..., D]."""
    w = as_uint8(weight)
    s = as_uint8(scale)
    if w.shape[-1] != s.shape[-1] * FP8_BLOCK or w.shape[:-1] != s.shape[:-1]:
        raise EngramTableError(
            f"weight {list(w.shape)} and scale {list(s.shape)} do not pair: a row of "
            f"width D needs D/{FP8_BLOCK} exponent bytes"
        )
    if s.numel() and bool((s == SCALE_NAN).any()):
        raise EngramTableError("scale byte 255 (NaN in ue8m0) found in an Engram row")
    values = w.view(torch.float8_e4m3fn).float().unflatten(-1, (-1, FP8_BLOCK))
    factors = SCALE_LUT.to(s.device)[s.long()].unsqueeze(-1)
    out = (values * factors).flatten(-2).to(torch.bfloat16)
    out.view(torch.int16).masked_fill_(out.isnan(), BF16_NAN_BITS)
    return out


def pack_rows(weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """(weight [R, D], scale [R, D/32]) -> packed uint8 [R, D + D/32] (values, then scales)."""
    return torch.cat([as_uint8(weight), as_uint8(scale)], dim=-1)


def unpack_rows(packed: torch.Tensor, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of :func:`pack_rows`: views, no copy."""
    if packed.shape[-1] != row_bytes(head_dim):
        raise EngramTableError(
            f"packed rows are {packed.shape[-1]} bytes wide, expected "
            f"{row_bytes(head_dim)} for head_dim {head_dim}"
        )
    return packed[..., :head_dim], packed[..., head_dim:]
