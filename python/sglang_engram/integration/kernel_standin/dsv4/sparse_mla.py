"""FlashMLA's sparse decode (``flash_mla_with_kvcache`` with ``indices``), as DeepSeek-V4's
attention backend calls it, over the V4 FP8 K pages (``k_cache``): each query row attends
to the tokens its ``indices`` name (token slots ``page * page_size + offset``; the first
``topk_length`` of a row, those not -1), then those of ``extra_indices_in_kvcache`` in a
second cache. The values are the keys (DeepSeek-V4's MQA shares K and V), and each head's
``attn_sink`` is one more logit with a zero value in the softmax."""

from __future__ import annotations

import torch

from sglang_engram.integration.kernel_standin.dsv4 import k_cache


def _keys(
    cache: torch.Tensor, indices: torch.Tensor, lengths: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(bf16 keys [B, S, K, 512], valid [B, S, K]) of the slots ``indices`` [B, S, K]."""
    page_size = cache.shape[1]
    valid = indices >= 0
    if lengths is not None:
        position = torch.arange(indices.shape[-1], device=indices.device)
        valid &= position < lengths.view(-1, *([1] * (indices.dim() - 1)))
    slots, inverse = torch.unique(indices[valid], return_inverse=True)
    keys = indices.new_zeros((*indices.shape, k_cache.NOPE + k_cache.ROPE), dtype=torch.bfloat16)
    keys[valid] = k_cache.load(cache, slots, page_size)[inverse]
    return keys, valid


def sparse_decode(
    q: torch.Tensor,
    k_cache_pages: torch.Tensor,
    head_dim_v: int,
    softmax_scale: float,
    indices: torch.Tensor,
    topk_length: torch.Tensor | None,
    attn_sink: torch.Tensor | None,
    extra_k_cache: torch.Tensor | None = None,
    extra_indices: torch.Tensor | None = None,
    extra_topk_length: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``q`` [B, S, H, 512] bf16 -> (output [B, S, H, head_dim_v] bf16, log-sum-exp of the
    scores and the sink [B, S, H] fp32)."""
    keys, valid = _keys(k_cache_pages, indices, topk_length)
    if extra_k_cache is not None and extra_indices is not None:
        more, more_valid = _keys(extra_k_cache, extra_indices, extra_topk_length)
        keys, valid = torch.cat((keys, more), dim=2), torch.cat((valid, more_valid), dim=2)
    k = keys.float()
    scores = torch.einsum("bshd,bskd->bshk", q.float(), k) * softmax_scale
    scores = scores.masked_fill(~valid.unsqueeze(2), float("-inf"))
    sink = (
        torch.full(q.shape[-2:-1], float("-inf"), device=q.device)
        if attn_sink is None
        else attn_sink.float()
    )
    sink = sink.view(1, 1, -1, 1).expand(*scores.shape[:-1], 1)
    logits = torch.cat((scores, sink), dim=-1)
    lse = torch.logsumexp(logits, dim=-1)
    probs = torch.exp(logits - lse.unsqueeze(-1)).nan_to_num(0.0)[..., :-1]
    out = torch.einsum("bshk,bskd->bshd", probs, k[..., :head_dim_v])
    return out.to(torch.bfloat16), lse
