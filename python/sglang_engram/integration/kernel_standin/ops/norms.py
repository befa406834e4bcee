"""STAND-INS (plain torch) for ``sgl_kernel``'s CPU norm and gate ops used by the
Qwen3.5 family's attention and GDN layers on SGLang's CPU engine.

Each computes in float32 and returns the input's dtype, as the AVX-512 kernels do.
Gemma's RMSNorm scales by ``1 + weight``; the gated RMSNorm of the GDN output
(``RMSNormGated``, norm before gate, one group, SiLU gate) scales by ``weight``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """``x`` (float32) divided by its root mean square over the last dimension."""
    return x * torch.rsqrt(x.square().mean(dim=-1, keepdim=True) + eps)


def _gemma_rmsnorm_rows(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return (_rms(x.float(), eps) * (1.0 + weight.float())).to(x.dtype)


def fused_qk_gemma_rmsnorm_cpu(
    q: torch.Tensor,
    k: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    eps: float,
    head_dim: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """STAND-IN for ``sgl_kernel::fused_qk_gemma_rmsnorm_cpu``: Gemma RMSNorm of every
    ``head_dim`` slice of ``q`` and ``k``; outputs shaped as the inputs."""
    q_out = _gemma_rmsnorm_rows(q.reshape(-1, head_dim), q_weight, eps)
    k_out = _gemma_rmsnorm_rows(k.reshape(-1, head_dim), k_weight, eps)
    return q_out.reshape(q.shape), k_out.reshape(k.shape)


def fused_qk_gemma_rmsnorm_with_gate_cpu(
    q_gate: torch.Tensor,
    k: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    eps: float,
    head_dim: int,
    num_head: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """STAND-IN for ``sgl_kernel::fused_qk_gemma_rmsnorm_with_gate_cpu``.

    ``q_gate`` holds, per token and per head, the head's query then its output gate
    (``head_dim`` each). Returns the normed queries ``[T*num_head, head_dim]``, the normed
    keys ``[T*kv_heads, head_dim]`` and the gates ``[T*num_head, head_dim]`` (copied)."""
    per_head = q_gate.reshape(q_gate.shape[0], num_head, 2 * head_dim)
    q = per_head[..., :head_dim].reshape(-1, head_dim)
    # NOTE: a copy, never a view: a custom op's outputs may not alias its inputs
    gate = (
        per_head[..., head_dim:].reshape(-1, head_dim).clone(memory_format=torch.contiguous_format)
    )
    q_out = _gemma_rmsnorm_rows(q, q_weight, eps)
    k_out = _gemma_rmsnorm_rows(k.reshape(-1, head_dim), k_weight, eps)
    return q_out, k_out, gate


def fused_rmsnorm_gated_cpu(
    input: torch.Tensor,  # noqa: A002 - the op's argument name
    weight: torch.Tensor,
    z: torch.Tensor | None,
    eps: float,
) -> torch.Tensor:
    """STAND-IN for ``sgl_kernel::fused_rmsnorm_gated_cpu``: RMSNorm over the last
    dimension times ``weight``, then times ``silu(z)`` when ``z`` is given."""
    out = _rms(input.float(), eps) * weight.float()
    if z is not None:
        out = out * F.silu(z.float())
    return out.to(input.dtype)


def fused_sigmoid_mul_cpu(x: torch.Tensor, gate: torch.Tensor) -> None:
    """STAND-IN for ``sgl_kernel::fused_sigmoid_mul_cpu``: ``x *= sigmoid(gate)`` in
    place; ``gate`` may be a strided ``[T, heads, head_dim]`` view of ``x``'s shape."""
    product = x.float() * torch.sigmoid(gate.float()).reshape(x.shape)
    x.copy_(product.to(x.dtype))


def gate_shared_expert(
    hidden_states: torch.Tensor,
    gate_weight: torch.Tensor,
    shared_output: torch.Tensor,
    addend: torch.Tensor | None = None,
) -> torch.Tensor:
    """STAND-IN for SGLang's Triton ``fused_gate_sigmoid_mul[_add]`` (a Qwen MoE block's
    shared expert gate): ``sigmoid(hidden · gate_weight) * shared_output`` per token, plus
    ``addend`` when given; float32 inside, ``shared_output``'s dtype out."""
    gate = torch.sigmoid(hidden_states.float() @ gate_weight.float().reshape(-1, 1))
    out = gate * shared_output.float()
    if addend is not None:
        out = out + addend.float()
    return out.to(shared_output.dtype)
