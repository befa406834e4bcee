"""DeepSeek-V4's hyper-connection (mHC) kernels that the V4.1 path calls on the CPU engine:
the split of a token's mix logits into its pre weights, post weights and stream-mixing
matrix (made doubly stochastic by Sinkhorn's iterations), and the weighted combine of a
token's streams into one."""

from __future__ import annotations

import torch


def split_sinkhorn(
    mixes: torch.Tensor,
    hc_scale: torch.Tensor,
    hc_base: torch.Tensor,
    hc_mult: int = 4,
    sinkhorn_iters: int = 20,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``mixes`` [B, S, (2 + hc) * hc] (pre logits, post logits, then the hc x hc mixing
    logits, row by row) -> pre [B, S, hc], post [B, S, hc], comb [B, S, hc, hc]: pre is
    ``sigmoid + eps``, post ``2 * sigmoid``, comb a row softmax plus ``eps`` then
    alternate column and row normalisations (``sinkhorn_iters`` column steps in all)."""
    b, s, _ = mixes.shape
    hc = hc_mult
    logits = mixes.reshape(b * s, (2 + hc) * hc).float()
    scale, base = hc_scale.float(), hc_base.float()
    pre = torch.sigmoid(logits[:, :hc] * scale[0] + base[:hc]) + eps
    post = 2 * torch.sigmoid(logits[:, hc : 2 * hc] * scale[1] + base[hc : 2 * hc])
    comb = (logits[:, 2 * hc :] * scale[2] + base[2 * hc :]).view(-1, hc, hc)
    comb = torch.softmax(comb, dim=-1) + eps
    comb = comb / (comb.sum(dim=1, keepdim=True) + eps)
    for _ in range(sinkhorn_iters - 1):
        comb = comb / (comb.sum(dim=-1, keepdim=True) + eps)
        comb = comb / (comb.sum(dim=1, keepdim=True) + eps)
    dtype = mixes.dtype
    return (
        pre.view(b, s, hc).to(dtype),
        post.view(b, s, hc).to(dtype),
        comb.view(b, s, hc, hc).to(dtype),
    )


def combine(
    x_flat: torch.Tensor, pre: torch.Tensor, hc: int, out_dtype: torch.dtype
) -> torch.Tensor:
    """``y[m, h] = sum_k pre[m, k] * x_flat[m, k * H + h]``, accumulated in fp32 stream by
    stream (the kernel's order), then rounded to ``out_dtype``."""
    streams = x_flat.view(x_flat.shape[0], hc, -1).float()
    weights = pre.float()
    acc = torch.zeros_like(streams[:, 0])
    for k in range(hc):
        acc += weights[:, k : k + 1] * streams[:, k]
    return acc.to(out_dtype)
