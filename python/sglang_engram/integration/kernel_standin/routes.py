"""Where SGLang's CPU engine takes an ``sgl_kernel`` CPU op only on an AMX CPU and a
Triton kernel (which needs a GPU) otherwise, send the call to the stand-in op instead,
while the ``sgl_kernel`` stand-in is in use. Applied as hooks (``integration/hooks.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from sglang_engram.integration import kernel_standin

_SILU = ("swish", "silu")


def gated_rmsnorm_forward(
    original: Callable[..., torch.Tensor],
    self: Any,
    x: torch.Tensor,
    z: torch.Tensor | None = None,
) -> torch.Tensor:
    """AROUND upstream's ``RMSNormGated.forward`` (a Gated DeltaNet layer's output norm):
    on a CPU tensor with the stand-in installed, ``fused_rmsnorm_gated_cpu``, as upstream
    does on an AMX CPU; anywhere else upstream's own path."""
    if x.device.type != "cpu" or not kernel_standin.status().standin:
        return original(self, x, z)
    if not (self.norm_before_gate and self.group_size is None and self.activation in _SILU):
        raise NotImplementedError(
            "the CPU gated RMSNorm stand-in covers norm-before-gate, one group, SiLU gate "
            f"(got norm_before_gate={self.norm_before_gate}, group_size={self.group_size}, "
            f"activation={self.activation})"
        )
    return torch.ops.sgl_kernel.fused_rmsnorm_gated_cpu(x, self.weight, z, self.eps)
