"""FlashMLA's sparse decode (``flash_mla_with_kvcache`` with ``indices``), as DeepSeek-V4's
attention backend calls it, over the V4 FP8 K pages (``k_cache``): each query row attends
to the tokens its ``indices`` name (token slots ``page * page_size + offset``; the first
``topk_length`` of a row, those not -1), then those of ``extra_indices_in_kvcache`` in a
second cache. The values are the keys (DeepSeek-V4's MQA shares K and V), and each head's
``attn_sink`` is one more logit with a zero value in the softmax.

Queries go ``BLOCK`` at a time: a block's distinct slots are read once (neighbouring
queries of an extend share most of their window), and each query's scores over them are
weighted by how often its indices name each slot (``log`` of the count added to the
logit: zero times for the slots it does not name)."""

from __future__ import annotations

import torch

from sglang_engram.integration.kernel_standin.dsv4 import k_cache

BLOCK = 256


def _slots(
    cache: torch.Tensor, indices: torch.Tensor, lengths: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp32 keys [U, 512] of the distinct slots ``indices`` [Q, K] name, the log of how
    often each query names each [Q, U])."""
    valid = indices >= 0
    if lengths is not None:
        valid &= torch.arange(indices.shape[-1], device=indices.device) < lengths.unsqueeze(-1)
    slots, inverse = torch.unique(indices[valid], return_inverse=True)
    rows = torch.arange(indices.shape[0], device=indices.device).unsqueeze(-1).expand_as(indices)
    counts = torch.zeros(indices.shape[0], slots.numel(), device=indices.device)
    counts.index_put_(
        (rows[valid], inverse), torch.ones_like(inverse, dtype=torch.float32), accumulate=True
    )
    keys = k_cache.load(cache, slots, cache.shape[1]).float()
    return keys, counts.log()


def _attend(
    q: torch.Tensor,
    parts: list[tuple[torch.Tensor, torch.Tensor]],
    head_dim_v: int,
    softmax_scale: float,
    sink: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One block: ``q`` [Q, H, D] over every part's (keys, log counts)."""
    keys = torch.cat([k for k, _ in parts])
    weight = torch.cat([w for _, w in parts], dim=-1)
    scores = torch.einsum("qhd,ud->qhu", q.float(), keys) * softmax_scale + weight.unsqueeze(1)
    logits = torch.cat((scores, sink.view(1, -1, 1).expand(q.shape[0], -1, 1)), dim=-1)
    lse = torch.logsumexp(logits, dim=-1)
    probs = torch.exp(logits - lse.unsqueeze(-1)).nan_to_num(0.0)[..., :-1]
    return torch.einsum("qhu,ud->qhd", probs, keys[:, :head_dim_v]), lse


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
    b, s, h, d = q.shape
    flat_q = q.reshape(b * s, h, d)
    sink = (
        torch.full((h,), float("-inf"), device=q.device) if attn_sink is None else attn_sink.float()
    )

    def per_query(x: torch.Tensor | None) -> torch.Tensor | None:
        # NOTE: lengths are per batch row; every query of a row shares them
        return None if x is None else x.reshape(b, 1).expand(b, s).reshape(-1)

    sources = [(k_cache_pages, indices.reshape(b * s, -1), per_query(topk_length))]
    if extra_k_cache is not None and extra_indices is not None:
        sources.append(
            (extra_k_cache, extra_indices.reshape(b * s, -1), per_query(extra_topk_length))
        )
    outs, lses = [], []
    for start in range(0, b * s, BLOCK):
        block = slice(start, start + BLOCK)
        parts = [
            _slots(cache, idx[block], None if n is None else n[block]) for cache, idx, n in sources
        ]
        out, lse = _attend(flat_q[block], parts, head_dim_v, softmax_scale, sink)
        outs.append(out)
        lses.append(lse)
    out = torch.cat(outs).to(torch.bfloat16).view(b, s, h, head_dim_v)
    return out, torch.cat(lses).view(b, s, h)
