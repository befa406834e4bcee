"""STAND-IN for ``sgl_kernel.mamba``: the three CPU wrappers SGLang's GDN backend imports
(``from sgl_kernel.mamba import ...`` when it runs on the CPU engine), each calling the
plain-torch stand-in op registered by the package; any other name is an op that raises."""

from __future__ import annotations

from typing import Any

import torch
from sgl_kernel import StandinOp

_PAD_SLOT_ID = -1


def causal_conv1d_fn_cpu(
    mixed_qkv_transposed: torch.Tensor,
    conv_weights: torch.Tensor,
    bias: torch.Tensor | None,
    activation: str | None,
    conv_states: torch.Tensor | None,
    has_initial_state: torch.Tensor | None,
    cache_indices: torch.Tensor | None,
    query_start_loc: torch.Tensor | None,
    seq_lens_cpu: list[int] | None,
) -> torch.Tensor:
    """A prefill's short convolution: ``[dim, tokens]`` in, ``[dim, tokens]`` out."""
    return torch.ops.sgl_kernel.causal_conv1d_fwd_cpu(
        mixed_qkv_transposed,
        conv_weights,
        bias,
        conv_states,
        query_start_loc,
        cache_indices,
        has_initial_state,
        activation == "silu",
        _PAD_SLOT_ID,
        True,
    )


def causal_conv1d_update_cpu(
    mixed_qkv: torch.Tensor,
    conv_states: torch.Tensor,
    conv_weights: torch.Tensor,
    bias: torch.Tensor | None,
    activation: str | None,
    conv_state_indices: torch.Tensor | None,
) -> torch.Tensor:
    """A decode step's short convolution, one new token per request."""
    return torch.ops.sgl_kernel.causal_conv1d_update_cpu(
        mixed_qkv,
        conv_states,
        conv_weights,
        bias,
        activation == "silu",
        None,
        conv_state_indices,
        _PAD_SLOT_ID,
        True,
    )


def chunk_gated_delta_rule_cpu(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor,
    cu_seqlens: torch.Tensor,
    head_first: bool,
    use_qk_l2norm_in_kernel: bool,
    initial_state_indices: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, None]:
    """A prefill's gated delta rule: outputs, final states, and no per-chunk states."""
    out, final = torch.ops.sgl_kernel.chunk_gated_delta_rule_cpu(
        q,
        k,
        v,
        g,
        beta,
        initial_state,
        True,
        cu_seqlens,
        head_first,
        use_qk_l2norm_in_kernel,
        initial_state_indices,
    )
    return out, final, None


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return StandinOp(f"{__name__}.{name}")
