"""DeepSeek-V4's K cache in the V4 page layout (the only one off SM100 GPUs and NPUs).

A token's 512-wide K is 448 "nope" values, stored as e4m3 in 7 tiles of 64 with one
ue8m0 exponent each (the smallest power of two that brings the tile's largest magnitude
inside e4m3), and 64 RoPE values kept in bf16. A page of ``page_size`` tokens holds every
token's 448 + 128 bytes, then every token's 7 exponents padded to 8 bytes; pages are
padded to a multiple of 576 bytes (the pool's rows)."""

from __future__ import annotations

import torch

NOPE, ROPE, TILE = 448, 64, 64
TILES = NOPE // TILE
DATA_BYTES = NOPE + 2 * ROPE  # 576 per token
SCALE_BYTES = TILES + 1  # 8 per token
E4M3_MAX = 448.0
# NOTE: the CUDA kernel's floor under a tile's largest magnitude (the Triton reference
# has 1e-8): they differ only on a tile of values all below 1e-4.
AMAX_FLOOR = 1e-4


def quantize(k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``k`` [T, 512] (fp32 or bf16) -> (nope e4m3 [T, 448], rope bf16 [T, 64], exponents
    uint8 [T, 7])."""
    tiles = k[:, :NOPE].float().unflatten(-1, (TILES, TILE))
    amax = tiles.abs().amax(-1).clamp_min(AMAX_FLOOR)
    exponent = torch.ceil(torch.log2(amax / E4M3_MAX))
    nope = (tiles * torch.exp2(-exponent).unsqueeze(-1)).clamp(-E4M3_MAX, E4M3_MAX)
    scale = (exponent.to(torch.int32) + 127).to(torch.uint8)
    rope = k[:, NOPE:].to(torch.bfloat16).contiguous()
    return nope.to(torch.float8_e4m3fn).flatten(-2), rope, scale


def _page_bytes(cache: torch.Tensor) -> torch.Tensor:
    """The pool's pages as rows of bytes, whatever view of them ``cache`` is."""
    raw = cache.view(torch.uint8)
    stride = raw.stride(0)
    return torch.as_strided(raw, (raw.shape[0], stride), (stride, 1))


def _offsets(loc: torch.Tensor, page_size: int, stride: int) -> tuple[torch.Tensor, torch.Tensor]:
    loc = loc.long()
    page, slot = loc // page_size, loc % page_size
    data = page * stride + slot * DATA_BYTES
    scale = page * stride + page_size * DATA_BYTES + slot * SCALE_BYTES
    return data, scale


def store(
    cache: torch.Tensor,
    loc: torch.Tensor,
    nope: torch.Tensor,
    rope: torch.Tensor,
    scale: torch.Tensor,
    page_size: int,
) -> None:
    """Write quantised K rows at token slots ``loc`` (negative slots are skipped)."""
    keep = loc >= 0
    pages = _page_bytes(cache)
    flat = pages.view(-1)
    data, where = _offsets(loc[keep], page_size, pages.shape[1])
    row = torch.cat((nope[keep].view(torch.uint8), rope[keep].view(torch.uint8)), dim=-1)
    flat[data.unsqueeze(-1) + torch.arange(DATA_BYTES, device=flat.device)] = row
    flat[where.unsqueeze(-1) + torch.arange(TILES, device=flat.device)] = scale[keep]


def load(cache: torch.Tensor, loc: torch.Tensor, page_size: int) -> torch.Tensor:
    """The bf16 K [T, 512] stored at token slots ``loc`` (each tile's e4m3 values times
    its power of two, then rounded to bf16, as FlashMLA reads them)."""
    pages = _page_bytes(cache)
    flat = pages.view(-1)
    data, where = _offsets(loc, page_size, pages.shape[1])
    row = flat[data.unsqueeze(-1) + torch.arange(DATA_BYTES, device=flat.device)]
    exponent = flat[where.unsqueeze(-1) + torch.arange(TILES, device=flat.device)]
    factor = torch.exp2(exponent.float() - 127).repeat_interleave(TILE, dim=-1)
    nope = row[:, :NOPE].view(torch.float8_e4m3fn).float() * factor
    rope = row[:, NOPE:].contiguous().view(torch.bfloat16)
    return torch.cat((nope.to(torch.bfloat16), rope), dim=-1)


def norm_rope(
    kv: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    freqs_cis: torch.Tensor,
    positions: torch.Tensor,
) -> torch.Tensor:
    """``kv`` [T, 512] RMS-normalised with ``weight`` and its RoPE tail rotated at
    ``positions``, in fp32 (the fused kernel quantises from these, never rounding to
    bf16 first)."""
    from sglang_engram.integration.kernel_standin.dsv4 import rope

    x = kv.float()
    normed = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * weight.float()
    normed[:, NOPE:] = rope.rotate(normed[:, NOPE:], freqs_cis, positions)
    return normed


def norm_rope_store(
    kv: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    freqs_cis: torch.Tensor,
    positions: torch.Tensor,
    loc: torch.Tensor,
    cache: torch.Tensor,
    page_size: int,
) -> None:
    """:func:`norm_rope`, then stored quantised at ``loc``."""
    store(cache, loc, *quantize(norm_rope(kv, weight, eps, freqs_cis, positions)), page_size)
