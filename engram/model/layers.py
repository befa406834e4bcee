"""Qwen3 building blocks of the tiny model: RMSNorm, RoPE, GQA attention, SwiGLU MLP."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from engram.model.config import TinyEngramConfig


class RMSNorm(nn.Module):
    """Normalise in fp32, cast back, then scale (the Qwen3 order)."""

    def __init__(self, dim: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, dtype=dtype), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.square().mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rotate(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Neox-style rotary embedding of ``x`` [..., T, heads, head_dim] at ``positions`` [T]."""
    dim = x.shape[-1]
    steps = torch.arange(0, dim, 2, dtype=torch.float32, device=x.device)
    inv_freq = 1.0 / theta ** (steps / dim)
    angles = positions.float().unsqueeze(-1) * inv_freq  # [T, dim / 2]
    angles = torch.cat([angles, angles], dim=-1).unsqueeze(1)  # [T, 1, dim]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-second, first], dim=-1) * sin


@dataclass
class LayerCache:
    """One layer's keys and values [S, kv_heads, head_dim] of the positions seen so far."""

    keys: torch.Tensor | None = None
    values: torch.Tensor | None = None


class Attention(nn.Module):
    """GQA self-attention with per-head q/k RMSNorm; keeps its own KV cache slice."""

    def __init__(self, cfg: TinyEngramConfig):
        super().__init__()
        self.cfg = cfg
        dt, hidden = cfg.dtype, cfg.hidden_size
        self.q_proj = nn.Linear(hidden, cfg.q_size, bias=False, dtype=dt)
        self.k_proj = nn.Linear(hidden, cfg.kv_size, bias=False, dtype=dt)
        self.v_proj = nn.Linear(hidden, cfg.kv_size, bias=False, dtype=dt)
        self.o_proj = nn.Linear(cfg.q_size, hidden, bias=False, dtype=dt)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps, dt)
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps, dt)

    def forward(
        self, x: torch.Tensor, positions: torch.Tensor, cache: LayerCache | None
    ) -> torch.Tensor:
        """``x`` [..., T, hidden] at ``positions`` [T]; ``cache`` holds the earlier
        positions' keys and values and is extended with these (leading dims: training
        batches, without a cache)."""
        cfg = self.cfg
        q = self.q_norm(self.q_proj(x).unflatten(-1, (cfg.num_attention_heads, cfg.head_dim)))
        k = self.k_norm(self.k_proj(x).unflatten(-1, (cfg.num_key_value_heads, cfg.head_dim)))
        v = self.v_proj(x).unflatten(-1, (cfg.num_key_value_heads, cfg.head_dim))
        q = rotate(q, positions, cfg.rope_theta)
        k = rotate(k, positions, cfg.rope_theta)
        if cache is not None:
            if cache.keys is not None and cache.values is not None:
                k, v = torch.cat([cache.keys, k]), torch.cat([cache.values, v])
            cache.keys, cache.values = k, v
        key_pos = torch.arange(k.shape[-3], device=x.device)
        mask = key_pos.unsqueeze(0) <= positions.unsqueeze(1)  # [T, S] causal
        k = k.repeat_interleave(cfg.kv_groups, dim=-2)
        v = v.repeat_interleave(cfg.kv_groups, dim=-2)
        out = F.scaled_dot_product_attention(
            q.transpose(-3, -2), k.transpose(-3, -2), v.transpose(-3, -2), attn_mask=mask
        )
        return self.o_proj(out.transpose(-3, -2).flatten(-2))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: TinyEngramConfig):
        super().__init__()
        dt, hidden, inter = cfg.dtype, cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = nn.Linear(hidden, inter, bias=False, dtype=dt)
        self.up_proj = nn.Linear(hidden, inter, bias=False, dtype=dt)
        self.down_proj = nn.Linear(inter, hidden, bias=False, dtype=dt)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
