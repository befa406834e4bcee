"""DeepSeek-V4's rotary embedding, as its kernels apply it: the last ``rope_dim`` values
of each head are ``rope_dim / 2`` interleaved (real, imaginary) pairs, each multiplied by
``freqs_cis[position]`` (by its conjugate for the inverse), in fp32, and written back in
place in the tensor's dtype."""

from __future__ import annotations

import torch


def rotate(
    x: torch.Tensor, freqs_cis: torch.Tensor, positions: torch.Tensor, *, inverse: bool = False
) -> torch.Tensor:
    """``x`` [T, ..., rope_dim] rotated by ``freqs_cis`` [max_pos, rope_dim / 2] (complex)
    at ``positions`` [T], as fp32 (the caller rounds)."""
    freqs = torch.view_as_real(freqs_cis[positions.long()]).float()  # [T, rope/2, 2]
    shape = (x.shape[0],) + (1,) * (x.dim() - 2) + freqs.shape[1:]
    cos, sin = freqs[..., 0].reshape(shape[:-1]), freqs[..., 1].reshape(shape[:-1])
    if inverse:
        sin = -sin
    pairs = x.float().unflatten(-1, (-1, 2))
    real, imag = pairs[..., 0], pairs[..., 1]
    out = torch.stack((real * cos - imag * sin, real * sin + imag * cos), dim=-1)
    return out.flatten(-2)


def rotate_inplace(
    x: torch.Tensor, freqs_cis: torch.Tensor, positions: torch.Tensor, *, inverse: bool = False
) -> None:
    """``x`` (a view, e.g. the rope tail of every head) rotated in place."""
    if x.shape[0]:
        x.copy_(rotate(x, freqs_cis, positions, inverse=inverse))
