"""STAND-INS (plain torch) for the ``sgl_kernel`` CPU ops that prepare a Gated DeltaNet
layer's inputs: the split of its two input projections and its gates.

Qwen3.5's checkpoints lay the projections out head-first and contiguous:
``mixed_qkvz = [all q | all k | all v | all z]`` and ``mixed_ba = [all b | all a]``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def fused_qkvzba_split_reshape_cat_contiguous_cpu(
    mixed_qkvz: torch.Tensor,
    mixed_ba: torch.Tensor,
    num_heads_qk: int,
    num_heads_v: int,
    head_qk: int,
    head_v: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """STAND-IN for ``sgl_kernel::fused_qkvzba_split_reshape_cat_contiguous_cpu``:
    ``mixed_qkv [T, 2*Hk*Dk + Hv*Dv]`` (z dropped), ``z [T, Hv, Dv]``, ``b`` and
    ``a [T, Hv]``, each a new contiguous tensor (never a view of the inputs: a custom
    op's outputs may not alias them, and a one-token slice is already contiguous)."""
    tokens = mixed_qkvz.shape[0]
    qkv_width = 2 * num_heads_qk * head_qk + num_heads_v * head_v
    z_width = num_heads_v * head_v
    if mixed_qkvz.shape[-1] != qkv_width + z_width or mixed_ba.shape[-1] != 2 * num_heads_v:
        raise ValueError(
            f"qkvz/ba widths {mixed_qkvz.shape[-1]}/{mixed_ba.shape[-1]} do not match "
            f"{num_heads_qk} qk heads of {head_qk} and {num_heads_v} v heads of {head_v}"
        )
    copy = torch.contiguous_format
    mixed_qkv = mixed_qkvz[:, :qkv_width].clone(memory_format=copy)
    z = mixed_qkvz[:, qkv_width:].reshape(tokens, num_heads_v, head_v).clone(memory_format=copy)
    b = mixed_ba[:, :num_heads_v].clone(memory_format=copy)
    a = mixed_ba[:, num_heads_v:].clone(memory_format=copy)
    return mixed_qkv, z, b, a


def fused_gdn_gating_cpu(
    A_log: torch.Tensor,  # noqa: N803 - the op's argument name
    a: torch.Tensor,
    b: torch.Tensor,
    dt_bias: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """STAND-IN for ``sgl_kernel::fused_gdn_gating_cpu``: the log decay
    ``g = -exp(A_log) * softplus(a + dt_bias)`` (float32) and the write strength
    ``beta = sigmoid(b)`` (``b``'s dtype), each ``[1, T, Hv]``."""
    x = a.float() + dt_bias.float()
    g = -torch.exp(A_log.float()) * F.softplus(x, beta=1.0, threshold=20.0)
    beta = torch.sigmoid(b.float()).to(b.dtype)
    return g.unsqueeze(0), beta.unsqueeze(0)
