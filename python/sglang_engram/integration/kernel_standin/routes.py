"""Where SGLang's CPU engine, on a CPU without AMX, calls a Triton kernel (which needs a
GPU; with AMX upstream takes an ``sgl_kernel`` CPU op or plain torch instead), send the
call to a torch stand-in, while the ``sgl_kernel`` stand-in is in use. Applied as hooks
(``integration/hooks.py``); anywhere else upstream's own path runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from sglang_engram.integration import kernel_standin
from sglang_engram.integration.kernel_standin.ops.norms import gate_shared_expert

_SILU = ("swish", "silu")


def _standin_on(x: torch.Tensor) -> bool:
    return x.device.type == "cpu" and kernel_standin.standin_loaded()


def gated_rmsnorm_forward(
    original: Callable[..., torch.Tensor],
    self: Any,
    x: torch.Tensor,
    z: torch.Tensor | None = None,
) -> torch.Tensor:
    """AROUND upstream's ``RMSNormGated.forward`` (a Gated DeltaNet layer's output norm):
    on a CPU tensor with the stand-in installed, ``fused_rmsnorm_gated_cpu``, as upstream
    does on an AMX CPU; anywhere else upstream's own path."""
    if not _standin_on(x):
        return original(self, x, z)
    if not (self.norm_before_gate and self.group_size is None and self.activation in _SILU):
        raise NotImplementedError(
            "the CPU gated RMSNorm stand-in covers norm-before-gate, one group, SiLU gate "
            f"(got norm_before_gate={self.norm_before_gate}, group_size={self.group_size}, "
            f"activation={self.activation})"
        )
    return torch.ops.sgl_kernel.fused_rmsnorm_gated_cpu(x, self.weight, z, self.eps)


def shared_expert_gate_add(
    original: Callable[..., None],
    hidden_states: torch.Tensor,
    gate_weight: torch.Tensor,
    shared_output: torch.Tensor,
    final_hidden_states: torch.Tensor,
) -> None:
    """AROUND ``fused_gate_sigmoid_mul_add`` as a Qwen MoE block calls it (a Triton
    kernel on every platform but NPU and AMX CPUs): adds the gated shared expert's output
    to ``final_hidden_states`` in place."""
    if not _standin_on(hidden_states):
        return original(hidden_states, gate_weight, shared_output, final_hidden_states)
    final_hidden_states.copy_(
        gate_shared_expert(hidden_states, gate_weight, shared_output, final_hidden_states)
    )
    return None


def shared_expert_gate(
    original: Callable[..., torch.Tensor],
    hidden_states: torch.Tensor,
    gate_weight: torch.Tensor,
    shared_output: torch.Tensor,
) -> torch.Tensor:
    """AROUND ``fused_gate_sigmoid_mul`` as a Qwen MoE block calls it: the gated shared
    expert's output, new."""
    if not _standin_on(hidden_states):
        return original(hidden_states, gate_weight, shared_output)
    return gate_shared_expert(hidden_states, gate_weight, shared_output)
